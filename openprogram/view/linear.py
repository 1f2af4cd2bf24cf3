"""The layout of nodes listed the way a session lists them, in one pass.

A session's nodes come in ``seq`` order, and a call is recorded after its caller and
after the calls its earlier siblings made: the list is already the layout's row order
(turn-level nodes in seq order, each followed by its nested calls depth first).
:func:`linear_layout` checks that while it walks the list once, keeping columns instead of
per-node objects (see :class:`~openprogram.view.placed.Rows`); a fold skips the rows it
hides.  Turns that interleave (two writers, a background run) are regrouped turn by turn
after the pass; calls that interleave inside a turn (threads) cost a depth-first ordering
and a second pass.  Anything else — bad data, links pointing forward — returns ``None``
and the general layout (:mod:`openprogram.view.layout`) takes the nodes.  What a node's
kind and status are, what a fold covers and which lane a branch gets are the rules of
:mod:`openprogram.view.rules`, which both layouts call.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from openprogram.context.nodes import COMPLETED, KINDS, STATUSES
from openprogram.view.placed import Columns, Layout, Rows
from openprogram.view.rules import DEFAULT_KIND, branch_lanes, fold_ids, kind_and_status

_INTERLEAVED = object()  # in seq order, clean, but calls of different turns interleave


def linear_layout(
    nodes: Sequence[Any],
    head_id: str | None,
    folded: Iterable[str],
    last_turns: int | None,
) -> Layout | None:
    """The layout of ``nodes`` if they are in seq order with clean data, else None."""
    layout = _one_pass(nodes, head_id, folded, last_turns, in_seq_order=True)
    if layout is _INTERLEAVED:
        order = _depth_first(nodes)
        if order is None:
            return None
        layout = _one_pass([nodes[r] for r in order], head_id, folded, last_turns, False)
    return layout if isinstance(layout, Layout) else None


def _depth_first(nodes: Sequence[Any]) -> list[int] | None:
    """Row order of nodes in seq order whose callers come before them: turn-level nodes,
    each followed by its nested calls depth first (None if they are not so listed; the
    rest is checked by the pass over the reordered nodes)."""
    row_of: dict[str, int] = {}
    kids_of: dict[int, list[int]] = {}
    tops: list[int] = []
    last_seq = -1
    for row, node in enumerate(nodes):
        if type(node) is not dict:
            return None
        nid, seq, caller = node.get("id"), node.get("seq"), node.get("caller")
        if type(nid) is not str or type(seq) is not int or seq <= last_seq:
            return None
        last_seq = seq
        row_of[nid] = row
        if caller is None:
            tops.append(row)
            continue
        at = row_of.get(caller) if type(caller) is str else None
        if at is None:
            return None
        if at in kids_of:
            kids_of[at].append(row)
        else:
            kids_of[at] = [row]
    order: list[int] = []
    for top in tops:
        stack = [top]
        while stack:
            row = stack.pop()
            order.append(row)
            if row in kids_of:
                stack.extend(reversed(kids_of[row]))
    return order


def _by_turn(tops: list[int], turn_rows: list[int]) -> list[list[int]]:
    rows: dict[int, list[int]] = {top: [] for top in turn_rows}
    for row, top in enumerate(tops):
        rows[top].append(row)
    return list(rows.values())


def _descendants(depths: list[int]) -> list[int]:
    """How many rows below each row nest under it, for rows in depth-first order."""
    desc = [0] * len(depths)
    open_rows: list[int] = []
    for row, depth in enumerate(depths):
        while open_rows and depths[open_rows[-1]] >= depth:
            done = open_rows.pop()
            desc[done] = row - 1 - done
        open_rows.append(row)
    for done in open_rows:
        desc[done] = len(depths) - 1 - done
    return desc


def _one_pass(
    nodes: Sequence[Any],
    head_id: str | None,
    folded: Iterable[str],
    last_turns: int | None,
    in_seq_order: bool,
) -> Layout | object | None:
    """The layout, ``_INTERLEAVED`` if a turn's calls are not depth first (only checked
    when ``in_seq_order``), or None for anything the general layout must take."""
    source: dict[str, Any] = {}
    row_of: dict[str, int] = {}
    count = len(nodes)  # the columns, filled row by row (most of the time at 100,000 nodes)
    ids: list[str] = [""] * count
    kinds: list[str] = [""] * count
    statuses: list[str] = [""] * count
    depths: list[int] = [0] * count
    tops: list[int] = [0] * count
    callers: list[str | None] = [None] * count
    preds: list[str | None] = [None] * count
    kids: list[int] = [0] * count
    desc: list[int] = [0] * count
    turn_rows: list[int] = []
    chain_kids: dict[str, list[str]] = {}
    open_rows: list[int] = []  # the current row's callers, outermost first
    stacks: dict[int, list[int]] = {}  # open_rows of each turn-level row
    interleaved = False  # a turn's call listed after a later turn began
    top = 0
    last_seq = -1
    try:
        for row, node in enumerate(nodes):
            if type(node) is not dict:
                return None
            nid = node["id"]  # a node without some key takes the general layout
            seq = node["seq"]
            if type(nid) is not str or not nid or nid in row_of or type(seq) is not int:
                return None
            if seq <= last_seq and in_seq_order:
                return None
            last_seq = seq
            meta = node["metadata"]
            if type(meta) is dict:  # rules.kind_and_status, inlined for the common case
                kind = meta.get("kind", DEFAULT_KIND)
                status = meta.get("status", COMPLETED)
                if type(kind) is not str or type(status) is not str:
                    return None
            else:
                read = kind_and_status(meta)
                if read is None:
                    return None
                kind, status = read
            if kind not in KINDS or status not in STATUSES:
                return None
            caller = node["caller"]
            if caller is None:
                pred = node["predecessor"]
                if pred is not None:
                    if type(pred) is not str or pred not in row_of:
                        return None
                    if pred in chain_kids:
                        chain_kids[pred].append(nid)
                    else:
                        chain_kids[pred] = [nid]
                for done in open_rows:
                    desc[done] = row - 1 - done
                stacks[row] = open_rows = [row]
                top = unit = row
                turn_rows.append(row)
                preds[row] = pred
            else:
                at = row_of.get(caller) if type(caller) is str else None
                if at is None:
                    return None
                unit = tops[at]
                if unit == top:
                    stack = open_rows
                else:  # an earlier turn goes on (another writer, a background run)
                    interleaved = True
                    stack = stacks[unit]
                while stack[-1] != at:  # the rows whose calls have all been listed
                    done = stack.pop()
                    desc[done] = row - 1 - done
                    if not stack:  # the caller is not an open call: not depth-first order
                        return _INTERLEAVED if in_seq_order else None
                stack.append(row)
                kids[at] += 1
                depths[row] = depths[at] + 1
                callers[row] = caller
            source[nid] = node
            row_of[nid] = row
            ids[row] = nid
            kinds[row] = kind
            statuses[row] = status
            tops[row] = unit
    except KeyError:
        return None
    for done in open_rows:
        desc[done] = len(ids) - 1 - done
    if interleaved:  # each turn's rows together, in order; depth first within each turn
        order = [row for rows in _by_turn(tops, turn_rows) for row in rows]
        new_of = [0] * len(order)
        for new, was in enumerate(order):
            new_of[was] = new
        ids = [ids[r] for r in order]
        kinds = [kinds[r] for r in order]
        statuses = [statuses[r] for r in order]
        depths = [depths[r] for r in order]
        callers = [callers[r] for r in order]
        preds = [preds[r] for r in order]
        kids = [kids[r] for r in order]
        tops = [new_of[tops[r]] for r in order]
        turn_rows = [new_of[r] for r in turn_rows]
        row_of = dict(zip(ids, range(len(ids)), strict=True))
        desc = _descendants(depths)

    # Folds (the rule of rules.fold_ids); a fold skips its rows.
    turn_ids = [ids[r] for r in turn_rows] if last_turns is not None else []
    effective = fold_ids(folded, last_turns, turn_ids, lambda nid: kids[row_of[nid]] > 0)
    ys: list[int | None] = [None] * len(ids)
    visible: list[int] = []
    row = 0
    while row < len(ids):
        ys[row] = len(visible)
        visible.append(row)
        row += desc[row] + 1 if kids[row] and ids[row] in effective else 1

    if turn_rows:
        tip = row_of[head_id] if head_id in row_of else turn_rows[-1]  # type: ignore[index]
        pred_rows = {r: row_of[p] for r in turn_rows if (p := preds[r]) is not None}
        first_kids = {row_of[kin[0]] for kin in chain_kids.values()}
        last_rows = {r: r + desc[r] for r in turn_rows}
        lane_of_top, lanes = branch_lanes(turn_rows, tip, tops, pred_rows, first_kids, last_rows)
    else:
        lane_of_top, lanes = {}, 0
    columns = Columns(
        ids,
        kinds,
        statuses,
        depths,
        tops,
        callers,
        preds,
        kids,
        desc,
        ys,
        visible,
        lane_of_top,
        lanes,
        frozenset(effective),
    )
    return Layout(
        placed=Rows(columns, row_of),
        source=source,
        head_id=head_id if head_id in row_of else None,
        lanes=lanes,
        columns=lanes + max(depths) if ids else 0,
        rows=len(visible),
        folded=frozenset(effective),
        skipped=0,
    )
