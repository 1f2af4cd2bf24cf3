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

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from openprogram.context.nodes import COMPLETED, KINDS, STATUSES

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

_NEST: Final = 1  # attached to its caller
_CHAIN: Final = 2  # attached to its predecessor
_BAD_SEQ_KEY: Final = 1 << 62


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
    """The result of :func:`compute_layout`; ``placed`` is in row order."""

    placed: dict[str, Placed]
    source: dict[str, Mapping[str, Any]]  # id -> the node dict that was laid out
    head_id: str | None
    lanes: int
    columns: int
    rows: int  # visible rows
    folded: frozenset[str]  # effective folds (given ones + those from ``last_turns``)
    skipped: int  # entries that were not dicts

    def visible(self) -> list[Placed]:
        return [p for p in self.placed.values() if not p.hidden]

    def edges(self) -> list[tuple[str, str, str]]:
        """``(from, to, "caller" | "pred")`` for every edge the layout uses."""
        out: list[tuple[str, str, str]] = []
        for p in self.placed.values():
            if p.caller is not None:
                out.append((p.caller, p.id, "caller"))
            elif p.pred is not None:
                out.append((p.pred, p.id, "pred"))
        return out


def _is_mapping(value: object) -> bool:
    return type(value) is dict or isinstance(value, Mapping)  # the fast path matters at 5k


def node_kind(node: Mapping[str, Any]) -> str:
    """``metadata.kind`` (``"function"`` when absent, like ``Call.kind``; ``"?"`` if junk)."""
    meta = node.get("metadata")
    kind = meta.get("kind", "function") if _is_mapping(meta) else "function"  # type: ignore[union-attr]
    return kind if type(kind) is str and kind else "?"


def node_status(node: Mapping[str, Any]) -> str:
    """``metadata.status`` (``"completed"`` when absent, like ``Call.status``)."""
    meta = node.get("metadata")
    status = meta.get("status", COMPLETED) if _is_mapping(meta) else COMPLETED  # type: ignore[union-attr]
    return status if type(status) is str and status else "?"


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
    index = _normalize(nodes)
    source, key, flags = index.source, index.key, index.flags
    parent, attach = _link(source, flags)
    nest_kids: dict[str, list[str]] = {}
    chain_kids: dict[str, list[str]] = {}
    for nid, par in parent.items():
        (nest_kids if attach[nid] == _NEST else chain_kids).setdefault(par, []).append(nid)
    topo = _break_cycles(source, key, parent, attach, nest_kids, chain_kids, flags)
    for kids in (*nest_kids.values(), *chain_kids.values()):
        kids.sort(key=key.__getitem__)

    # Rows: turn-level nodes in seq order, each followed by its nested calls (depth first).
    turn_level = sorted((n for n in source if attach.get(n) != _NEST), key=key.__getitem__)
    order: dict[str, int] = {}
    depth: dict[str, int] = {}
    unit: dict[str, str] = {}
    for top in turn_level:
        stack = [(top, 0)]
        while stack:
            nid, d = stack.pop()
            order[nid] = len(order)
            depth[nid] = d
            unit[nid] = top
            stack.extend((k, d + 1) for k in reversed(nest_kids.get(nid, ())))

    lane_of_top, lanes = _assign_lanes(
        source, head_id, parent, attach, chain_kids, topo, turn_level, order, unit
    )

    # Folds: given ids, plus all but the last N turn-level nodes.
    effective = {f for f in folded if isinstance(f, str)}
    if last_turns is not None:
        old = turn_level[: max(len(turn_level) - max(last_turns, 0), 0)]
        effective.update(n for n in old if n in nest_kids)

    descendants = dict.fromkeys(order, 0)
    ordered = list(order)  # insertion order is row order
    for nid in reversed(ordered):
        if attach.get(nid) == _NEST:
            descendants[parent[nid]] += descendants[nid] + 1

    placed: dict[str, Placed] = {}
    hidden: dict[str, bool] = {}
    row = 0
    columns = 0
    for nid in ordered:
        how = attach.get(nid)
        caller = parent[nid] if how == _NEST else None
        is_hidden = caller is not None and (hidden[caller] or caller in effective)
        hidden[nid] = is_hidden
        lane = lane_of_top[unit[nid]]
        d = depth[nid]
        x = lane if d == 0 else lanes + d - 1
        if x >= columns:
            columns = x + 1
        n_kids = len(nest_kids[nid]) if nid in nest_kids else 0
        placed[nid] = Placed(  # positional: this loop is most of the layout time at 5k nodes
            nid,
            order[nid],
            d,
            lane,
            x,
            None if is_hidden else row,
            caller,
            parent[nid] if how == _CHAIN else None,
            n_kids,
            descendants[nid],
            n_kids > 0 and nid in effective,
            is_hidden,
            index.kind[nid],
            index.status[nid],
            tuple(flags[nid]),
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
    flags: dict[str, list[str]]
    kind: dict[str, str]
    status: dict[str, str]
    skipped: int


def _normalize(nodes: Sequence[Any]) -> _Index:
    """Index the nodes by id (last duplicate wins) and flag malformed ones."""
    source: dict[str, Mapping[str, Any]] = {}
    key: dict[str, tuple[int, int]] = {}
    flags: dict[str, list[str]] = {}
    kind: dict[str, str] = {}
    status: dict[str, str] = {}
    skipped = 0
    for index, node in enumerate(nodes):
        if not _is_mapping(node):
            skipped += 1
            continue
        raw_id = node.get("id")
        nid = raw_id if isinstance(raw_id, str) and raw_id else f"?{index}"
        found = [FLAG_DUPLICATE] if nid in source else []
        if nid is not raw_id:
            found.append(FLAG_BAD_ID)
        seq = node.get("seq")
        if type(seq) is not int:
            found.append(FLAG_BAD_SEQ)
            seq = _BAD_SEQ_KEY
        meta = node.get("metadata")
        if meta is not None and not _is_mapping(meta):
            found.append(FLAG_BAD_METADATA)
        kind[nid] = node_kind(node)
        status[nid] = node_status(node)
        if kind[nid] not in KNOWN_KINDS:
            found.append(FLAG_UNKNOWN_KIND)
        if status[nid] not in KNOWN_STATUSES:
            found.append(FLAG_UNKNOWN_STATUS)
        source[nid] = node
        key[nid] = (seq, index)
        flags[nid] = found
    return _Index(source, key, flags, kind, status, skipped)


def _link(
    source: dict[str, Mapping[str, Any]], flags: dict[str, list[str]]
) -> tuple[dict[str, str], dict[str, int]]:
    """Pick each node's one layout parent: its caller, else (turn level) its predecessor."""
    parent: dict[str, str] = {}
    attach: dict[str, int] = {}
    for nid, node in source.items():
        caller = node.get("caller")
        if caller is not None:
            if isinstance(caller, str) and caller in source and caller != nid:
                parent[nid] = caller
                attach[nid] = _NEST
                continue
            flags[nid].append(FLAG_CYCLE if caller == nid else FLAG_MISSING_CALLER)
        pred = node.get("predecessor")
        if pred is not None:
            if isinstance(pred, str) and pred in source and pred != nid:
                parent[nid] = pred
                attach[nid] = _CHAIN
            else:
                flags[nid].append(FLAG_CYCLE if pred == nid else FLAG_MISSING_PREDECESSOR)
    return parent, attach


def _break_cycles(
    source: dict[str, Mapping[str, Any]],
    key: dict[str, tuple[int, int]],
    parent: dict[str, str],
    attach: dict[str, int],
    nest_kids: dict[str, list[str]],
    chain_kids: dict[str, list[str]],
    flags: dict[str, list[str]],
) -> list[str]:
    """Cut every cycle of layout parents at one of its nodes; return a parents-first order."""
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
        if nid not in parent:
            reach(nid)
    if len(seen) < len(source):
        for nid in sorted((n for n in source if n not in seen), key=key.__getitem__):
            if nid in seen:
                continue
            walked: set[str] = set()
            member = nid
            while member not in walked:  # only cycles are left unreached: walk into one
                walked.add(member)
                member = parent[member]
            par = parent.pop(member)
            (nest_kids if attach.pop(member) == _NEST else chain_kids)[par].remove(member)
            flags[member].append(FLAG_CYCLE)
            reach(member)
    return topo


def _assign_lanes(
    source: dict[str, Mapping[str, Any]],
    head_id: str | None,
    parent: dict[str, str],
    attach: dict[str, int],
    chain_kids: dict[str, list[str]],
    topo: list[str],
    turn_level: list[str],
    order: dict[str, int],
    unit: dict[str, str],
) -> tuple[dict[str, int], int]:
    """Lane of every turn-level node: trunk = the chain to HEAD, one lane per other branch."""
    if not turn_level:
        return {}, 0
    tip = head_id if head_id in source else turn_level[-1]
    trunk: set[str] = set()
    walk: str | None = tip
    while walk is not None:
        if walk not in attach or attach[walk] == _CHAIN:
            trunk.add(walk)
        walk = parent.get(walk)

    segment: dict[str, int] = {}
    first_of: list[str] = [tip]  # segment id -> its first turn-level node (0 = trunk)
    for nid in topo:
        if nid in attach and attach[nid] == _NEST:
            continue
        if nid in trunk:
            segment[nid] = 0
            continue
        par = parent.get(nid)
        # A branch continues through the first (in seq order) child of its last node.
        if par is not None and par not in trunk and par in segment and chain_kids[par][0] == nid:
            segment[nid] = segment[par]
        else:
            segment[nid] = len(first_of)
            first_of.append(nid)

    # Each branch segment spans from its fork row to the last row of its units.
    end = [0] * len(first_of)
    for nid, top in unit.items():
        seg = segment[top]
        end[seg] = max(end[seg], order[nid])
    spans = []
    for seg in range(1, len(first_of)):
        first = first_of[seg]
        fork = parent.get(first)
        spans.append((order[fork] if fork is not None else order[first], order[first], seg))
    spans.sort()  # by fork row, then the earlier branch first
    lane_of_segment = [0] * len(first_of)
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
    return {top: lane_of_segment[segment[top]] for top in turn_level}, lanes
