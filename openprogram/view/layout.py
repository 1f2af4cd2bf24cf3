"""Pure layout of the session DAG: a row, a lane and a column for every node.

The picture it describes:

- Every node gets its own row.  Rows follow the conversation: *turn-level* nodes (no
  caller) in ``seq`` order, each followed by the calls nested under it (depth first,
  siblings in ``seq`` order).
- Turn-level nodes sit in a *lane* column.  The chain that leads to HEAD is the trunk
  (lane 0); a second node continuing from the same predecessor (a fork) opens a new lane.
  A lane that has ended is reused by a later branch, like ``git log --graph``.
- Nested calls are indented to the right of every lane (``x = lanes + depth - 1``), so a
  lane's vertical line never runs through someone else's call.
- Folding a node hides the calls nested under it (not the conversation that follows it).

Bad data still lays out: entries that are not dicts are skipped (counted), missing or
non-string ids get a placeholder id, duplicate ids keep the last occurrence, a caller or
predecessor that does not exist is ignored, and a cycle is cut at one of its nodes.  Every
such node carries a ``flag`` so the views can mark it.  Linear time apart from sorting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from openprogram.context.nodes import COMPLETED, KINDS, STATUSES
from openprogram.view.linear import linear_layout
from openprogram.view.placed import Layout, Placed
from openprogram.view.rules import DEFAULT_KIND, branch_lanes, fold_ids, kind_and_status

# What the engine writes (openprogram.context.nodes); anything else is flagged as unknown.
KNOWN_KINDS: Final = KINDS
KNOWN_STATUSES: Final = STATUSES

FLAG_BAD_ID: Final = "bad-id"
FLAG_DUPLICATE: Final = "duplicate-id"
FLAG_BAD_SEQ: Final = "bad-seq"
FLAG_BAD_METADATA: Final = "bad-metadata"
FLAG_UNKNOWN_KIND: Final = "unknown-kind"
FLAG_UNKNOWN_STATUS: Final = "unknown-status"
FLAG_MISSING_CALLER: Final = "missing-caller"
FLAG_MISSING_PREDECESSOR: Final = "missing-predecessor"
FLAG_CYCLE: Final = "cycle"

_BAD_SEQ_KEY: Final = 1 << 62


def _is_mapping(value: object) -> bool:
    return type(value) is dict or isinstance(value, Mapping)  # the fast path matters at 5k


def node_kind(node: Mapping[str, Any]) -> str:
    """``metadata.kind`` (``"function"`` when absent, like ``Call.kind``; ``"?"`` if junk)."""
    read = kind_and_status(node.get("metadata"))
    return read[0] if read is not None else DEFAULT_KIND


def node_status(node: Mapping[str, Any]) -> str:
    """``metadata.status`` (``"completed"`` when absent, like ``Call.status``)."""
    read = kind_and_status(node.get("metadata"))
    return read[1] if read is not None else COMPLETED


def compute_layout(
    nodes: Sequence[Any],
    head_id: str | None = None,
    *,
    folded: Iterable[str] = (),
    last_turns: int | None = None,
) -> Layout:
    """Lay out ``nodes`` (dicts as ``Call.to_dict()`` makes them).

    ``folded`` hides the calls nested under those ids; ``last_turns=N`` additionally folds
    every turn-level node except the last ``N`` (for long sessions).
    """
    folded = list(folded)
    linear = linear_layout(nodes, head_id, folded, last_turns)
    if linear is not None:  # a session's nodes, as it lists them: one pass
        return linear
    index = _normalize(nodes)
    source, key, flags = index.source, index.key, index.flags
    links = _link(source, key, flags, index.in_order)
    caller_of, pred_of, nest_kids = links.caller_of, links.pred_of, links.nest_kids
    if links.simple:  # input in seq order, every link pointing back: already parents-first
        topo: Iterable[str] = source
    else:
        topo = _break_cycles(source, key, links, flags)
        for kids in (*nest_kids.values(), *links.chain_kids.values()):
            kids.sort(key=key.__getitem__)

    # Rows: turn-level nodes in seq order, each followed by its nested calls (depth first).
    turn_level = [n for n in source if n not in caller_of]
    if not links.simple:
        turn_level.sort(key=key.__getitem__)
    ordered: list[str] = []  # row order
    depths: list[int] = []  # depth of each row
    last_row: dict[str, int] = {}  # turn-level node -> the last row of its nested calls
    for top in turn_level:
        if top in nest_kids:
            stack = [(top, 0)]
            while stack:
                nid, d = stack.pop()
                ordered.append(nid)
                depths.append(d)
                if nid in nest_kids:
                    stack.extend((k, d + 1) for k in reversed(nest_kids[nid]))
        else:
            ordered.append(top)
            depths.append(0)
        last_row[top] = len(ordered) - 1

    tops = turn_level if links.simple else [n for n in topo if n not in caller_of]
    tip = head_id if head_id in source else turn_level[-1] if turn_level else None
    lane_of_top, lanes = _assign_lanes(tip, links, tops, ordered, last_row)

    effective = fold_ids(folded, last_turns, turn_level, nest_kids.__contains__)

    descendants: dict[str, int] = {}
    for nid in reversed(ordered):
        if nid in caller_of:
            par = caller_of[nid]
            descendants[par] = descendants.get(par, 0) + descendants.get(nid, 0) + 1

    placed: dict[str, Placed] = {}
    hides: set[str] = set()  # nodes whose nested calls are hidden (folded or hidden)
    kinds, statuses = index.kind, index.status
    row = 0
    columns = lanes if ordered else 0
    lane = 0
    for order, nid in enumerate(ordered):
        d = depths[order]
        if d == 0:
            lane = lane_of_top[nid]
            caller = None
            is_hidden = False
            x = lane
        else:
            caller = caller_of[nid]
            is_hidden = caller in hides
            x = lanes + d - 1
            if x >= columns:
                columns = x + 1
        n_kids = len(nest_kids[nid]) if nid in nest_kids else 0
        is_folded = n_kids > 0 and nid in effective
        if is_hidden or is_folded:
            hides.add(nid)
        found = flags.get(nid)
        placed[nid] = Placed(  # positional: this loop is most of the layout time
            nid,
            order,
            d,
            lane,
            x,
            None if is_hidden else row,
            caller,
            pred_of.get(nid) if d == 0 else None,
            n_kids,
            descendants.get(nid, 0),
            is_folded,
            is_hidden,
            kinds[nid],
            statuses[nid],
            tuple(found) if found else (),
        )
        if not is_hidden:
            row += 1
    return Layout(
        placed=placed,
        source=source,
        head_id=head_id if head_id in source else None,
        lanes=lanes,
        columns=columns,
        rows=row,
        folded=frozenset(effective),
        skipped=index.skipped,
    )


@dataclass(slots=True)
class _Index:
    source: dict[str, Mapping[str, Any]]
    key: dict[str, tuple[int, int]]  # sort key: (seq, position in the input)
    flags: dict[str, list[str]]  # only the nodes that have some
    kind: dict[str, str]
    status: dict[str, str]
    skipped: int
    in_order: bool  # unique ids, int seqs rising in input order: sorting changes nothing


def _normalize(nodes: Sequence[Any]) -> _Index:
    """Index the nodes by id (last duplicate wins) and flag malformed ones."""
    source: dict[str, Mapping[str, Any]] = {}
    key: dict[str, tuple[int, int]] = {}
    flags: dict[str, list[str]] = {}
    kinds: dict[str, str] = {}
    statuses: dict[str, str] = {}
    skipped = 0
    in_order = True
    last_seq = -1
    for index, node in enumerate(nodes):
        if not _is_mapping(node):
            skipped += 1
            continue
        raw_id = node.get("id")
        nid = raw_id if isinstance(raw_id, str) and raw_id else f"?{index}"
        found: list[str] = []
        if nid in source:
            found.append(FLAG_DUPLICATE)
            in_order = False
        if nid is not raw_id:
            found.append(FLAG_BAD_ID)
        seq = node.get("seq")
        if type(seq) is not int:
            found.append(FLAG_BAD_SEQ)
            seq = _BAD_SEQ_KEY
            in_order = False
        elif seq <= last_seq:
            in_order = False
        last_seq = seq
        read = kind_and_status(node.get("metadata"))
        if read is None:
            found.append(FLAG_BAD_METADATA)
            read = DEFAULT_KIND, COMPLETED
        kind, status = read
        if kind not in KNOWN_KINDS:
            found.append(FLAG_UNKNOWN_KIND)
        if status not in KNOWN_STATUSES:
            found.append(FLAG_UNKNOWN_STATUS)
        source[nid] = node
        key[nid] = (seq, index)
        kinds[nid] = kind
        statuses[nid] = status
        if found:
            flags[nid] = found
        elif nid in flags:
            del flags[nid]  # a duplicate's earlier flags go with it
    return _Index(source, key, flags, kinds, statuses, skipped, in_order)


@dataclass(slots=True)
class _Links:
    """Each node's one layout parent: its caller, else (turn level) its predecessor."""

    caller_of: dict[str, str]
    pred_of: dict[str, str]
    nest_kids: dict[str, list[str]]
    chain_kids: dict[str, list[str]]
    simple: bool  # input in order and every parent earlier in it: no cycle, no sorting


def _link(
    source: dict[str, Mapping[str, Any]],
    key: dict[str, tuple[int, int]],
    flags: dict[str, list[str]],
    in_order: bool,
) -> _Links:
    caller_of: dict[str, str] = {}
    pred_of: dict[str, str] = {}
    nest_kids: dict[str, list[str]] = {}
    chain_kids: dict[str, list[str]] = {}
    simple = in_order
    # the caller if there is one, else (turn level) the predecessor; a bad link is flagged
    kinds_of_link = (
        ("caller", caller_of, nest_kids, FLAG_MISSING_CALLER),
        ("predecessor", pred_of, chain_kids, FLAG_MISSING_PREDECESSOR),
    )
    for nid, node in source.items():
        for field, parent_of, kids_of, missing in kinds_of_link:
            parent = node.get(field)
            if parent is None:
                continue
            if isinstance(parent, str) and parent in source and parent != nid:
                parent_of[nid] = parent
                kids_of.setdefault(parent, []).append(nid)
                simple = simple and key[parent] < key[nid]
                break
            flags.setdefault(nid, []).append(FLAG_CYCLE if parent == nid else missing)
    return _Links(caller_of, pred_of, nest_kids, chain_kids, simple)


def _break_cycles(
    source: dict[str, Mapping[str, Any]],
    key: dict[str, tuple[int, int]],
    links: _Links,
    flags: dict[str, list[str]],
) -> list[str]:
    """Cut every cycle of layout parents at one of its nodes; return a parents-first order."""
    caller_of, pred_of = links.caller_of, links.pred_of
    nest_kids, chain_kids = links.nest_kids, links.chain_kids
    topo: list[str] = []
    seen: set[str] = set()

    def reach(start: str) -> None:
        stack = [start]
        while stack:
            nid = stack.pop()
            seen.add(nid)
            topo.append(nid)
            stack.extend(nest_kids.get(nid, ()))
            stack.extend(chain_kids.get(nid, ()))

    for nid in source:
        if nid not in caller_of and nid not in pred_of:
            reach(nid)
    if len(seen) < len(source):
        for nid in sorted((n for n in source if n not in seen), key=key.__getitem__):
            if nid in seen:
                continue
            walked: set[str] = set()
            member = nid
            while member not in walked:  # only cycles are left unreached: walk into one
                walked.add(member)
                member = caller_of[member] if member in caller_of else pred_of[member]
            if member in caller_of:
                nest_kids[caller_of.pop(member)].remove(member)
            else:
                chain_kids[pred_of.pop(member)].remove(member)
            flags.setdefault(member, []).append(FLAG_CYCLE)
            reach(member)
    return topo


def _assign_lanes(
    tip: str | None,
    links: _Links,
    tops: list[str],
    ordered: list[str],
    last_row: dict[str, int],
) -> tuple[dict[str, int], int]:
    """Lane of every turn-level node (the rule of ``rules.branch_lanes``, on rows).

    ``tops`` are the turn-level nodes, parents first; the trunk leads to ``tip``."""
    if tip is None or not tops:
        return {}, 0
    caller_of, pred_of = links.caller_of, links.pred_of
    row_of = {nid: row for row, nid in enumerate(ordered)}
    top_of: list[int] = []  # row -> the row of its turn-level node
    for row, nid in enumerate(ordered):
        top_of.append(top_of[row_of[caller_of[nid]]] if nid in caller_of else row)
    turn_rows = [row_of[nid] for nid in tops]
    pred_rows = {row_of[nid]: row_of[pred_of[nid]] for nid in tops if nid in pred_of}
    first_kids = {row_of[kids[0]] for kids in links.chain_kids.values() if kids}
    last_rows = {row_of[nid]: last_row[nid] for nid in tops}
    lanes_of, lanes = branch_lanes(turn_rows, row_of[tip], top_of, pred_rows, first_kids, last_rows)
    return {ordered[row]: lane for row, lane in lanes_of.items()}, lanes
