"""The branches of a session's view: who ran each line of turns, and when.

A *branch* is a chain of turn-level nodes in one lane of the layout: it starts at the
root, or at a turn whose predecessor is in another lane (a fork: ``%%openprogram --from
NODE``, or a second notebook continuing the same turn), and goes on through the turns
that continue it in the same lane.  The views draw lanes side by side; this names each
one with its turns' authors (``metadata.author``, :mod:`openprogram.store.session.files`)
and the time of its first and last turn.  ``dag.js`` finds the same from the summaries
(``lane``, ``pred``, ``by``, ``at``) for the live and saved views.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from openprogram.view.layout import FLAG_MISSING_PREDECESSOR
from openprogram.view.placed import Layout, Placed
from openprogram.view.summary import author_name, content_summary

MAX_BRANCHES: Final = 12  # lines a static view lists (the newest branches)

__all__ = ["MAX_BRANCHES", "Branch", "branch_lines", "branches"]


@dataclass
class Branch:
    lane: int
    first: str  # id of its first turn-level node
    tip: str  # id of its last one
    fork: str | None  # the node it continues from (None: the first line; "": not in view)
    fork_name: str = ""  # that node's name, when the view holds it
    turns: int = 0  # turn-level nodes but the root
    authors: list[str] = field(default_factory=list)
    first_at: float | None = None
    last_at: float | None = None
    replay_of: str | None = None  # a replay's turns (``metadata.replay_of``): that session


def branches(lay: Layout, rows: Iterable[Placed] | None = None) -> list[Branch]:
    """The branches of ``lay``'s ``rows`` (its visible rows by default; a static view
    passes the rows it draws) in the order their first turns appear."""
    out: list[Branch] = []
    of: dict[str, Branch] = {}  # turn-level id -> its branch
    lanes: dict[str, int] = {}
    for p in lay.visible() if rows is None else rows:
        if p.depth:
            continue
        lanes[p.id] = p.lane
        b = of.get(p.pred) if p.pred is not None else None
        if b is None or b.lane != p.lane or b.tip != p.pred:
            pred = p.pred if p.pred in lanes else None  # in this view
            name = content_summary(lay.source[pred])["name"] if pred is not None else ""
            cut = p.pred is None and FLAG_MISSING_PREDECESSOR in p.flags  # not in the view
            b = Branch(p.lane, p.id, p.id, "" if cut else p.pred, name)
            out.append(b)
        of[p.id] = b
        b.tip = p.id
        node = lay.source[p.id]
        if p.kind != "root":
            b.turns += 1
        meta = node.get("metadata")
        replayed = meta.get("replay_of") if isinstance(meta, dict) else None
        if isinstance(replayed, str) and replayed and b.replay_of is None:
            b.replay_of = replayed
        by = author_name(node)
        if by and by not in b.authors:
            b.authors.append(by)
        at = node.get("created_at")
        if isinstance(at, int | float) and not isinstance(at, bool) and at > 0:
            b.first_at = at if b.first_at is None else min(b.first_at, at)
            b.last_at = at if b.last_at is None else max(b.last_at, at)
    return out


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at)) if at else ""


def branch_lines(
    lay: Layout, rows: Iterable[Placed] | None = None, limit: int = MAX_BRANCHES
) -> list[tuple[int, str]]:
    """``(lane, text)`` for each branch of ``rows``, when there is more than one (else
    none): where it starts, the number of turns, by whom, from when to when."""
    found = branches(lay, rows)
    if len(found) < 2:
        return []
    lines = []
    for b in found[-limit:]:
        where = (
            "from the start"
            if b.fork is None
            else f"branch from {b.fork_name}"
            if b.fork_name
            else "from older turns"
        )
        bits = [where, f"{b.turns} turn{'s' if b.turns != 1 else ''}"]
        if b.replay_of:  # `openprogram run --replay`: not work, a re-run from the recording
            bits.insert(0, f"replay of {b.replay_of}")
        if b.authors:
            bits.append("by " + ", ".join(b.authors))
        first, last = _when(b.first_at), _when(b.last_at)
        if first:
            bits.append(first if first == last else f"{first} – {last}")
        lines.append((b.lane, " · ".join(bits)))
    if len(found) > limit:
        lines.insert(0, (-1, f"… {len(found) - limit} earlier branches"))
    return lines
