"""Totals of a session's index, bucket by bucket: how many nodes, turns, kinds and
statuses, and what its ``llm`` nodes used (tokens, cost) — what ``sessions show`` counts
and a session budget starts from, without reading a node file or every bucket's entries.

A bucket's totals are summed from its light entries (:mod:`index`, whose usage columns
hold each node's tokens and cost).  Those of a sealed bucket (:mod:`buckets`) are kept in
``.state/index/totals.json`` keyed by the bucket's tree sha, so they are summed once per
machine; any other bucket (the newest ones, being written) is summed from the entries
loaded.  The file is a local cache: deleting it (or ``.state/index``) rebuilds it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from openprogram.store.session.files import atomic_write, dumps, ensure_dir, loads, read_bytes
from openprogram.store.session.index import (
    F_CALLER,
    F_COST,
    F_KIND,
    F_TOKENS_IN,
    F_TOKENS_OUT,
    Entry,
    counts_as_turn,
)
from openprogram.store.session.indexcache import CACHE_DIR

TOTALS_FILE = "totals.json"
TOTALS_VERSION = 1
_COUNTS = ("nodes", "tops", "turns", "calls", "input_tokens", "output_tokens", "unpriced")
Totals = dict[str, Any]  # the _COUNTS (ints), "cost" (float), "kinds"/"statuses" (name -> n)


def empty() -> Totals:
    return {**dict.fromkeys(_COUNTS, 0), "cost": 0.0, "kinds": {}, "statuses": {}}


def totals_of(rows: Iterable[Entry]) -> Totals:
    """The totals of these light entries."""
    out = empty()
    kinds: dict[str, int] = out["kinds"]
    statuses: dict[str, int] = out["statuses"]
    nodes = tops = turns = calls = tokens_in = tokens_out = unpriced = 0
    cost = 0.0
    for row in rows:
        nodes += 1
        kind = row[F_KIND]
        kinds[kind] = kinds.get(kind, 0) + 1
        statuses[row[6]] = statuses.get(row[6], 0) + 1
        if row[F_CALLER] is None:
            tops += 1
            turns += counts_as_turn(None, kind)
        if kind == "llm":  # what usage.totals counts: the llm nodes
            calls += 1
            used_in = row[F_TOKENS_IN]
            tokens_in += used_in or 0
            tokens_out += row[F_TOKENS_OUT]
            if row[F_COST] is not None:
                cost += row[F_COST]
            elif used_in is not None:
                unpriced += 1
    out.update(nodes=nodes, tops=tops, turns=turns, calls=calls, unpriced=unpriced)
    out.update(input_tokens=tokens_in, output_tokens=tokens_out, cost=cost)
    return out


def add(total: Totals, part: Totals) -> None:
    for key in _COUNTS:
        total[key] += part[key]
    total["cost"] += part["cost"]
    for field in ("kinds", "statuses"):
        into = total[field]
        for name, count in part[field].items():
            into[name] = into.get(name, 0) + count


def _valid(part: Any) -> bool:
    if type(part) is not dict or type(part.get("tree")) is not str:
        return False
    if any(type(part.get(key)) is not int for key in _COUNTS):
        return False
    if type(part.get("cost")) is not float:
        return False
    return all(
        type(part.get(field)) is dict and all(type(n) is int for n in part[field].values())
        for field in ("kinds", "statuses")
    )


def read_totals(root: Path) -> dict[str, Totals]:
    """Bucket -> its cached totals (with ``tree``: the tree sha they were summed at)."""
    try:
        data = loads(read_bytes(str(root / ".state" / CACHE_DIR / TOTALS_FILE)))
        if type(data) is not dict or data.get("v") != TOTALS_VERSION:
            return {}
        buckets = data["buckets"]
        return {k: v for k, v in buckets.items() if _valid(v)} if type(buckets) is dict else {}
    except Exception:  # missing, or not ours: summed again
        return {}


def write_totals(root: Path, buckets: dict[str, Totals]) -> None:
    ensure_dir(root, f".state/{CACHE_DIR}")
    data = dumps({"v": TOTALS_VERSION, "buckets": buckets})
    atomic_write(root / ".state" / CACHE_DIR / TOTALS_FILE, data)
