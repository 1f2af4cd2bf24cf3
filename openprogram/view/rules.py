"""The rules of the DAG layout (:mod:`openprogram.view.layout`): a node's kind and status
with the engine's defaults, which nodes a fold covers, and the lanes of the conversation's
branches.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import Any, Final

from openprogram.context.nodes import COMPLETED

DEFAULT_KIND: Final = "function"  # what ``Call.kind`` says when metadata has none
UNREADABLE: Final = "?"  # a kind or status that is not a non-empty string


def kind_and_status(meta: Any) -> tuple[str, str] | None:
    """``metadata``'s kind and status, defaulting as ``Call.kind`` / ``Call.status`` do
    (``function``, ``completed``); ``"?"`` for a value that is not a non-empty string; None
    when the metadata is neither a mapping nor absent."""
    if type(meta) is dict or (meta is not None and isinstance(meta, Mapping)):
        kind = meta.get("kind", DEFAULT_KIND)
        status = meta.get("status", COMPLETED)
    elif meta is None:
        return DEFAULT_KIND, COMPLETED
    else:
        return None
    return (
        kind if type(kind) is str and kind else UNREADABLE,
        status if type(status) is str and status else UNREADABLE,
    )


def fold_ids(
    folded: Iterable[object],
    last_turns: int | None,
    turns: Sequence[str],
    has_calls: Callable[[str], bool],
) -> set[str]:
    """The nodes folded: the ids in ``folded``, plus (``last_turns=N``) every turn-level
    node with nested calls except the last ``N`` — ``turns`` are the turn-level ids in row
    order."""
    effective = {f for f in folded if isinstance(f, str)}
    if last_turns is not None:
        older = turns[: max(len(turns) - max(last_turns, 0), 0)]
        effective.update(nid for nid in older if has_calls(nid))
    return effective


def branch_lanes(
    turn_rows: Sequence[int],
    tip: int,
    tops: Sequence[int],
    pred_rows: Mapping[int, int],
    first_kids: Container[int],
    last_rows: Mapping[int, int],
) -> tuple[dict[int, int], int]:
    """Lane of every turn-level row, and how many lanes.

    The trunk (lane 0) is the chain of turns leading to the turn of row ``tip`` (HEAD).
    Any other turn-level row continues its predecessor's branch if that predecessor is a
    turn on a branch and this row is its first chain child (in seq order); else it opens
    a branch.  Branches get lanes by :func:`pack_branches`.

    ``turn_rows``: the turn-level rows, each after its predecessor's turn; ``tops[row]``:
    the turn-level row ``row`` belongs to; ``pred_rows``: turn-level row -> its
    predecessor's row (for those with one); ``first_kids``: the rows that are the first
    chain child of their predecessor; ``last_rows``: turn-level row -> its last row (its
    nested calls included).
    """
    trunk: set[int] = set()
    walk: int | None = tops[tip]
    while walk is not None:
        trunk.add(walk)
        pred = pred_rows.get(walk)
        walk = tops[pred] if pred is not None else None
    if len(trunk) == len(turn_rows):  # no branch
        return dict.fromkeys(turn_rows, 0), 1
    segment: dict[int, int] = {}
    first_of: list[int] = [tip]  # segment -> its first turn-level row (0: the trunk)
    end = [0]  # segment -> its last row
    for row in turn_rows:
        if row in trunk:
            segment[row] = 0
            continue
        at = pred_rows.get(row)
        if at is not None and at not in trunk and at in segment and row in first_kids:
            seg = segment[row] = segment[at]
        else:
            seg = segment[row] = len(first_of)
            first_of.append(row)
            end.append(0)
        if last_rows[row] > end[seg]:
            end[seg] = last_rows[row]
    spans = [(pred_rows.get(first, first), first, seg) for seg, first in enumerate(first_of)][1:]
    lane_of_segment, lanes = pack_branches(spans, end)
    return {row: lane_of_segment[segment[row]] for row in turn_rows}, lanes


def pack_branches(spans: list[tuple[int, int, int]], end: list[int]) -> tuple[list[int], int]:
    """Lanes of branch segments (``(fork row, first row, segment)``; segment 0 is the trunk,
    ``end[segment]`` its last row): each takes the lowest lane free at its fork row, so a
    lane that has ended is reused, like ``git log --graph``.  Returns (lanes by segment,
    how many lanes)."""
    spans.sort()  # by fork row, then the earlier branch first
    lane_of_segment = [0] * len(end)
    active: list[tuple[int, int]] = []  # (end row, lane)
    free: list[int] = []
    lanes = 1
    for start, _, seg in spans:
        while active and active[0][0] < start:
            heapq.heappush(free, heapq.heappop(active)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane = lanes
            lanes += 1
        lane_of_segment[seg] = lane
        heapq.heappush(active, (end[seg], lane))
    return lane_of_segment, lanes
