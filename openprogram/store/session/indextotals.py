"""Totals of a session's index, bucket by bucket: how many nodes, turns, kinds and
statuses, and what its ``llm`` nodes used (tokens, cost) — what ``sessions show`` counts
and a session budget starts from, without reading a node file or every bucket's entries.

A bucket's totals are summed from its light entries (:mod:`index`, whose usage columns
hold each node's tokens and cost).  Those of a sealed bucket (:mod:`buckets`) are kept in
``.state/index/totals.json`` keyed by the bucket's tree sha, so they are summed once per
machine; any other bucket (the newest ones, being written) is summed from the entries
loaded.  The file is a local cache: deleting it (or ``.state/index``) rebuilds it.

What ``sessions usage`` prints comes from them too: ``functions`` (the name of the node an
``llm`` node was called from -> its :data:`Used`), ``callers`` (the same for callers outside
the bucket, by id: the reader names them) and ``llm_turns`` (turns with an ``llm`` node).
Costs are summed exactly (:func:`exact_add`: the partials of Shewchuk's sum, rounded once by
``math.fsum``), so the totals are the same float whatever the order buckets add up in — the
one a scan of every node gives.
"""

from __future__ import annotations

import math
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
    F_TURN,
    Entry,
    counts_as_turn,
)
from openprogram.store.session.indexcache import CACHE_DIR

TOTALS_FILE = "totals.json"
TOTALS_VERSION = 2  # 2: functions, callers, llm_turns, cost_parts
_COUNTS = (
    "nodes", "tops", "turns", "calls", "input_tokens", "output_tokens", "unpriced", "llm_turns",
)  # fmt: skip
# the _COUNTS (ints), "cost" (float) and its exact "cost_parts", "kinds"/"statuses" (name ->
# n), "functions" (name -> Used), "callers" (id of a caller outside the bucket -> Used)
Totals = dict[str, Any]
Used = list[Any]  # [calls, input_tokens, output_tokens, unpriced, cost partials (floats)]


def empty() -> Totals:
    return {
        **dict.fromkeys(_COUNTS, 0), "cost": 0.0, "cost_parts": [], "kinds": {}, "statuses": {},
        "functions": {}, "callers": {},
    }  # fmt: skip


def exact_add(parts: list[float], x: float) -> None:
    """Add ``x`` to ``parts``, non-overlapping floats whose exact sum is the exact sum of
    what was added (Shewchuk; ``math.fsum(parts)`` is that sum correctly rounded)."""
    i = 0
    for y in parts:
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo:
            parts[i] = lo
            i += 1
        x = hi
    parts[i:] = [x]


def _use(into: dict[str, Used], key: str, tokens_in: int | None, out: int, cost: Any) -> None:
    used = into.get(key)
    if used is None:
        used = into[key] = [0, 0, 0, 0, []]
    used[0] += 1
    used[1] += tokens_in or 0
    used[2] += out
    if cost is not None:
        exact_add(used[4], cost)
    elif tokens_in is not None:
        used[3] += 1


def merge_used(into: dict[str, Used], part: dict[str, Used]) -> None:
    for key, used in part.items():
        have = into.get(key)
        if have is None:
            into[key] = [*used[:4], list(used[4])]
            continue
        for i in range(4):
            have[i] += used[i]
        for x in used[4]:
            exact_add(have[4], x)


def totals_of(rows: Iterable[Entry]) -> Totals:
    """The totals of these light entries."""
    out = empty()
    kinds: dict[str, int] = out["kinds"]
    statuses: dict[str, int] = out["statuses"]
    functions: dict[str, Used] = out["functions"]
    outside: dict[str, Used] = out["callers"]
    nodes = tops = turns = calls = tokens_in = tokens_out = unpriced = 0
    parts: list[float] = out["cost_parts"]
    names: dict[str, str] = {}
    llm_rows = []
    for row in rows:
        names[row[0]] = row[4]
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
                exact_add(parts, row[F_COST])
            elif used_in is not None:
                unpriced += 1
            llm_rows.append(row)
    for row in llm_rows:  # by the function each was called from (named once all are read)
        caller = row[F_CALLER]
        name = "(top level)" if caller is None else names.get(caller)
        into, key = (outside, caller) if name is None else (functions, name)
        _use(into, key, row[F_TOKENS_IN], row[F_TOKENS_OUT], row[F_COST])
    out.update(nodes=nodes, tops=tops, turns=turns, calls=calls, unpriced=unpriced)
    out.update(input_tokens=tokens_in, output_tokens=tokens_out, cost=math.fsum(parts))
    out["llm_turns"] = len({row[F_TURN] for row in llm_rows})
    return out


def add(total: Totals, part: Totals) -> None:
    for key in _COUNTS:
        total[key] += part[key]
    parts = total["cost_parts"]
    for x in part["cost_parts"]:
        exact_add(parts, x)
    total["cost"] = math.fsum(parts)
    for field in ("kinds", "statuses"):
        into = total[field]
        for name, count in part[field].items():
            into[name] = into.get(name, 0) + count
    for field in ("functions", "callers"):
        merge_used(total[field], part[field])


def _valid_used(used: Any) -> bool:
    return (
        type(used) is list
        and len(used) == 5
        and all(type(n) is int and n >= 0 for n in used[:4])
        and type(used[4]) is list
        and all(type(x) is float and 0 <= x < 1e15 for x in used[4])
    )


def _valid(part: Any) -> bool:
    if type(part) is not dict or type(part.get("tree")) is not str:
        return False
    if any(type(part.get(key)) is not int for key in _COUNTS):
        return False
    if type(part.get("cost")) is not float or not _valid_used([0, 0, 0, 0, part.get("cost_parts")]):
        return False
    if not all(
        type(part.get(field)) is dict and all(type(n) is int for n in part[field].values())
        for field in ("kinds", "statuses")
    ):
        return False
    return all(
        type(part.get(field)) is dict and all(map(_valid_used, part[field].values()))
        for field in ("functions", "callers")
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
