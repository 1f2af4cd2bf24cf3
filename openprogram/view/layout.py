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

One engine (:func:`_lay_out`) places the rows, in one pass over nodes listed in row order:
a session lists its nodes that way (in ``seq`` order a call comes after its caller and
after the calls its earlier siblings made), so its list is laid out as it comes, keeping
columns instead of per-node objects (:class:`~openprogram.view.placed.Rows`).  Any other
list — turns that interleave (two writers, a background run), any order, bad data — is
first put in row order by :func:`_repair`, which fixes the data and places nothing.

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
from openprogram.view.placed import Columns, Layout, Rows
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
    listed = _lay_out(nodes, head_id, folded, last_turns)
    if listed is _INTERLEAVED:  # clean, in seq order, but the calls of turns interleave
        order = _depth_first(nodes)
        rows = [nodes[r] for r in order] if order is not None else []
        listed = _lay_out(rows, head_id, folded, last_turns, in_seq_order=False) if rows else None
    if isinstance(listed, Layout):  # a session's nodes, as it lists them
        return listed
    repaired = _repair(nodes)
    laid = _lay_out(repaired.rows, head_id, folded, last_turns, repaired)
    assert isinstance(laid, Layout), "repaired rows are in row order"
    return laid


_INTERLEAVED = object()  # in seq order, clean, but calls of different turns interleave


@dataclass(slots=True)
class _Repaired:
    """Nodes put in row order by :func:`_repair`: ``rows`` are stand-ins the engine reads
    (resolved links, the kind and status as read); ``source`` the nodes themselves."""

    rows: list[dict[str, Any]]
    source: dict[str, Mapping[str, Any]]
    flags: dict[str, tuple[str, ...]]
    lane_order: list[str]  # the turn-level nodes, each after its predecessor
    skipped: int


def _lay_out(
    nodes: Sequence[Any],
    head_id: str | None,
    folded: Iterable[str],
    last_turns: int | None,
    repaired: _Repaired | None = None,
    *,
    in_seq_order: bool = True,
) -> Layout | object | None:
    """The layout of ``nodes`` listed in row order; ``_INTERLEAVED`` when they are listed in
    seq order but a turn's calls are not depth first (:func:`_depth_first` orders them,
    then ``in_seq_order`` is False); None when their data is not clean: :func:`_repair`
    puts those in order first (``repaired``)."""
    source: dict[str, Any] = {}
    row_of: dict[str, int] = {}
    count = len(nodes)  # the columns, filled row by row (most of the time at 100,000 nodes)
    ids: list[str] = [""] * count
    kinds: list[str] = [""] * count
    statuses: list[str] = [""] * count
    depths: list[int] = [0] * count
    tops: list[int] = [0] * count
    callers: list[str | None] = [None] * count
    preds: list[Any] = [None] * count
    kids: list[int] = [0] * count
    desc: list[int] = [0] * count
    turn_rows: list[int] = []
    open_rows: list[int] = []  # the current row's callers, outermost first
    top = 0
    last_seq = -1
    try:
        for row, node in enumerate(nodes):
            if type(node) is not dict:
                return None
            nid = node["id"]  # a node without some key is repaired first
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
            if repaired is None and (kind not in KINDS or status not in STATUSES):
                return None  # kept as read, and flagged, by the repair
            caller = node["caller"]
            if caller is None:
                for done in open_rows:
                    desc[done] = row - 1 - done
                open_rows = [row]
                top = row
                turn_rows.append(row)
                preds[row] = node["predecessor"]
            else:
                at = row_of.get(caller) if type(caller) is str else None
                if at is None:
                    return None
                interleaved = _INTERLEAVED if in_seq_order and repaired is None else None
                if tops[at] != top:  # an earlier turn goes on (another writer, a background run)
                    return interleaved
                while open_rows[-1] != at:  # the rows whose calls have all been listed
                    done = open_rows.pop()
                    desc[done] = row - 1 - done
                    if not open_rows:  # the caller is not an open call: not depth first
                        return interleaved
                open_rows.append(row)
                kids[at] += 1
                depths[row] = depths[at] + 1
                callers[row] = caller
            source[nid] = node
            row_of[nid] = row
            ids[row] = nid
            kinds[row] = kind
            statuses[row] = status
            tops[row] = top
    except KeyError:
        return None
    for done in open_rows:
        desc[done] = count - 1 - done

    # The chain: each turn-level row's predecessor, and which rows are a first chain child.
    pred_rows: dict[int, int] = {}
    first_kids: set[int] = set()
    continued: set[int] = set()
    for row in turn_rows:
        pred = preds[row]
        if pred is None:
            continue
        at = row_of.get(pred) if type(pred) is str else None
        if at is None or (repaired is None and at > row):
            return None
        pred_rows[row] = at
        if at not in continued:
            continued.add(at)
            first_kids.add(row)

    # Folds (the rule of rules.fold_ids); a fold skips its rows.
    turn_ids = [ids[r] for r in turn_rows] if last_turns is not None else []
    effective = fold_ids(folded, last_turns, turn_ids, lambda nid: kids[row_of[nid]] > 0)
    ys: list[int | None] = [None] * count
    visible: list[int] = []
    row = 0
    while row < count:
        ys[row] = len(visible)
        visible.append(row)
        row += desc[row] + 1 if kids[row] and ids[row] in effective else 1

    if turn_rows:  # lanes (the rule of rules.branch_lanes), each turn after its predecessor
        tip = row_of[head_id] if head_id in row_of else turn_rows[-1]  # type: ignore[index]
        order = turn_rows if repaired is None else [row_of[n] for n in repaired.lane_order]
        last_rows = {r: r + desc[r] for r in turn_rows}
        lane_of_top, lanes = branch_lanes(order, tip, tops, pred_rows, first_kids, last_rows)
    else:
        lane_of_top, lanes = {}, 0
    flags = repaired.flags if repaired is not None else {}
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
        flags,
    )
    return Layout(
        placed=Rows(columns, row_of),
        source=repaired.source if repaired is not None else source,
        head_id=head_id if head_id in row_of else None,
        lanes=lanes,
        columns=lanes + max(depths) if ids else 0,
        rows=len(visible),
        folded=frozenset(effective),
        skipped=repaired.skipped if repaired is not None else 0,
    )


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


def _repair(nodes: Sequence[Any]) -> _Repaired:
    """``nodes`` in row order with their data fixed (see the module), as rows the engine
    reads: turn-level nodes by ``seq``, each followed by its nested calls depth first."""
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
    turn_level = [n for n in source if n not in caller_of]
    if not links.simple:
        turn_level.sort(key=key.__getitem__)
    rows: list[dict[str, Any]] = []
    kinds, statuses = index.kind, index.status
    for top in turn_level:
        stack = [top]
        while stack:
            nid = stack.pop()
            rows.append(
                {
                    "id": nid,
                    "seq": len(rows),
                    "caller": caller_of.get(nid),
                    "predecessor": None if nid in caller_of else pred_of.get(nid),
                    "metadata": {"kind": kinds[nid], "status": statuses[nid]},
                }
            )
            if nid in nest_kids:
                stack.extend(reversed(nest_kids[nid]))
    lane_order = turn_level if links.simple else [n for n in topo if n not in caller_of]
    found = {nid: tuple(marks) for nid, marks in flags.items()}
    return _Repaired(rows, source, found, lane_order, index.skipped)


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
