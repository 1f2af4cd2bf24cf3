"""What a layout says about each node (:class:`Placed`) and the whole (:class:`Layout`).

A layout of a long session places 100,000 nodes of which a view shows a few thousand
rows (the rest are folded away), so :class:`Rows` keeps the layout as columns and makes a
:class:`Placed` only when one is asked for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Placed:
    """Where one node goes.  ``x``/``y`` are in grid units (columns / rows)."""

    id: str
    order: int  # row in the fully unfolded layout
    depth: int  # 0 for turn-level nodes, +1 per nesting level
    lane: int  # colour / column of the branch the node belongs to
    x: int
    y: int | None  # row with the current folds; None when hidden
    caller: str | None  # nesting parent used by the layout (None for turn-level)
    pred: str | None  # chain parent used by the layout (turn-level nodes only)
    children: int  # directly nested calls
    descendants: int  # all nested calls below
    folded: bool
    hidden: bool
    kind: str
    status: str
    flags: tuple[str, ...]

    @property
    def hidden_count(self) -> int:
        """How many nodes this node's fold hides (0 when it is not folded)."""
        return self.descendants if self.folded else 0


@dataclass(slots=True)
class Layout:
    """The result of :func:`~openprogram.view.layout.compute_layout`; ``placed`` is in row
    order."""

    placed: Rows
    source: dict[str, Mapping[str, Any]]  # id -> the node dict that was laid out
    head_id: str | None
    lanes: int
    columns: int
    rows: int  # visible rows
    folded: frozenset[str]  # effective folds (given ones + those from ``last_turns``)
    skipped: int  # entries that were not dicts

    def visible(self, start: int = 0, stop: int | None = None) -> list[Placed]:
        """The visible rows (not folded away), top to bottom; ``start``/``stop`` slice them."""
        return self.placed.visible(start, stop)

    def visible_ids(self, start: int = 0, stop: int | None = None) -> list[str]:
        return self.placed.visible_ids(start, stop)

    def edges(self) -> list[tuple[str, str, str]]:
        """``(from, to, "caller" | "pred")`` for every edge the layout uses."""
        out: list[tuple[str, str, str]] = []
        for p in self.placed.values():
            if p.caller is not None:
                out.append((p.caller, p.id, "caller"))
            elif p.pred is not None:
                out.append((p.pred, p.id, "pred"))
        return out


@dataclass(slots=True)
class Columns:
    """A layout in row order, one list per field (row = position in every list)."""

    ids: list[str]
    kinds: list[str]
    statuses: list[str]
    depths: list[int]
    tops: list[int]  # row of the turn-level node each row belongs to
    callers: list[str | None]
    preds: list[str | None]  # chain parent of turn-level rows
    kids: list[int]
    desc: list[int]
    ys: list[int | None]
    visible: list[int]  # rows not hidden
    lane_of_top: dict[int, int]  # turn-level row -> lane
    lanes: int
    folded: frozenset[str]
    flags: Mapping[str, tuple[str, ...]]  # only the nodes that have some (bad data)


class Rows(Mapping[str, Placed]):
    """``placed`` of a layout kept as :class:`Columns`: a :class:`Placed` is made (once)
    when asked for, so a view that shows 300 rows of 100,000 makes a few hundred."""

    def __init__(self, columns: Columns, row_of: dict[str, int]) -> None:
        self._c = columns
        self._row_of = row_of
        self._made: dict[str, Placed] = {}

    def __getitem__(self, nid: str) -> Placed:
        made = self._made.get(nid)
        if made is None:
            made = self._made[nid] = self._place(self._row_of[nid])
        return made

    def __contains__(self, nid: object) -> bool:
        return nid in self._row_of

    def __iter__(self) -> Iterator[str]:
        return iter(self._c.ids)

    def __len__(self) -> int:
        return len(self._c.ids)

    def visible(self, start: int = 0, stop: int | None = None) -> list[Placed]:
        return [self[nid] for nid in self.visible_ids(start, stop)]

    def visible_ids(self, start: int = 0, stop: int | None = None) -> list[str]:
        ids = self._c.ids
        return [ids[row] for row in self._c.visible[start:stop]]

    def _place(self, row: int) -> Placed:
        c = self._c
        nid, depth, y = c.ids[row], c.depths[row], c.ys[row]
        lane = c.lane_of_top[c.tops[row]]
        kids = c.kids[row]
        return Placed(
            nid,
            row,
            depth,
            lane,
            lane if depth == 0 else c.lanes + depth - 1,
            y,
            c.callers[row],
            c.preds[row],
            kids,
            c.desc[row],
            kids > 0 and nid in c.folded,
            y is None,
            c.kinds[row],
            c.statuses[row],
            c.flags.get(nid, ()),
        )
