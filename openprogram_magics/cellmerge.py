"""A three-way merge of notebooks cell by cell, keyed by the nbformat cell ``id`` (pure logic).

nbdime aligns cells by their text; two people adding a cell at the same place with similar
text (``triage("crash when printing")`` and ``triage("slow startup")``) make it merge the
two into one cell, and nbdime 4.0.4 then writes an invalid notebook (the two ids clash:
``TypeError: unhashable type: 'NotebookNode'`` in ``nbformat.validate``).  Cells carry
ids since nbformat 4.5, so most merges need no alignment at all:

- a cell only one side added is added; a cell both added identically is added once;
- a cell one side deleted and the other left alone is deleted;
- a cell one side changed is taken from that side; a cell both changed the same way too;
- a cell both changed differently is handed to ``both_changed`` (the driver tries nbdime
  on that cell alone); when that fails it becomes a conflict block;
- a cell one side deleted and the other changed is a conflict block.

A conflict block is five cells: a marker cell ``<<<<<<< ours``, our version, a marker cell
``=======``, their version, a marker cell ``>>>>>>> theirs`` (an absent version is left
out) — a valid notebook that opens in JupyterLab, where the person keeps one version and
deletes the rest.  Execution counts are transient (a difference there alone is no change).

Order: the cells both sides kept follow ours (theirs when only they moved cells).  Cells a
side added follow the cell before them on that side; cells both added after the same cell
are interleaved in turn order (the ``turn`` of the session part a run cell shows), a cell
without a turn after ours, so each side's cells keep their own order.

:func:`fallback_merge` is the last resort for notebooks without usable ids, when nbdime
fails: the common leading and trailing cells, and between them one conflict block holding
every other cell of both sides.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from openprogram_magics.notebook import MIME_TYPE

Cell = dict[str, Any]
#: The marker cells' metadata key (``{"openprogram": {"conflict": "start"|"middle"|"end"}}``).
MARKER_KEY: Final = "openprogram"
TRANSIENT: Final = ("execution_count",)


@dataclass
class CellMerge:
    """The merged cells and what could not be merged."""

    cells: list[Cell]
    conflicts: list[str] = field(default_factory=list)  # one line per conflict block
    notes: list[str] = field(default_factory=list)  # merged by the helper (nbdime)


#: ``both_changed(base, ours, theirs)`` → the merged cell, or None (a conflict block).
BothChanged = Callable[[Cell, Cell, Cell], Cell | None]


def usable_ids(*versions: Sequence[Cell]) -> bool:
    """Every cell of every version has a string id, unique within its version."""
    for cells in versions:
        ids = [c.get("id") for c in cells]
        if not all(isinstance(i, str) and i for i in ids) or len(set(ids)) != len(ids):
            return False
    return True


def merge_cells(
    base: Sequence[Cell],
    ours: Sequence[Cell],
    theirs: Sequence[Cell],
    both_changed: BothChanged | None = None,
    marker_size: int = 7,
) -> CellMerge:
    """The three-way merge of three cell lists with :func:`usable_ids` (module docstring)."""
    b = {c["id"]: c for c in base}
    o = {c["id"]: c for c in ours}
    t = {c["id"]: c for c in theirs}
    result = CellMerge(cells=[])
    kept: dict[str, list[Cell]] = {}  # id -> the cells standing at its place
    for cid in [*o, *(i for i in t if i not in o)]:
        mine, other, old = o.get(cid), t.get(cid), b.get(cid)
        if mine is not None and other is not None and same(mine, other):
            kept[cid] = [mine]
        elif old is None:  # added: by one side, or by both differently
            if mine is None or other is None:
                kept[cid] = [mine if other is None else other]  # type: ignore[list-item]
            else:
                kept[cid] = _both(_empty_like(mine), mine, other, both_changed, result, marker_size)
        elif mine is None or other is None:  # deleted on one side (or both)
            left = mine if other is None else other
            if left is None or same(left, old):
                continue  # the deletion holds
            result.conflicts.append(f"cell {cid}: deleted on one side, changed on the other")
            kept[cid] = conflict_block(mine, other, marker_size)
        elif same(other, old):
            kept[cid] = [mine]
        elif same(mine, old):
            kept[cid] = [other]
        else:
            kept[cid] = _both(old, mine, other, both_changed, result, marker_size)
    for cid in _order(b, ours, theirs, kept):
        result.cells.extend(kept[cid])
    return result


def _both(
    old: Cell,
    mine: Cell,
    other: Cell,
    both_changed: BothChanged | None,
    result: CellMerge,
    marker_size: int,
) -> list[Cell]:
    merged = both_changed(old, mine, other) if both_changed else None
    if merged is not None:
        result.notes.append(f"cell {mine['id']}: changed on both sides, merged")
        return [merged]
    result.conflicts.append(f"cell {mine['id']}: changed on both sides")
    return conflict_block(mine, other, marker_size)


def _empty_like(cell: Cell) -> Cell:
    return {"cell_type": cell.get("cell_type"), "id": cell.get("id"), "metadata": {}, "source": ""}


def same(a: Cell | None, b: Cell | None) -> bool:
    """Equal but for transient fields (execution counts)."""
    if a is None or b is None:
        return a is b
    return _stripped(a) == _stripped(b)


def _stripped(cell: Cell) -> Any:
    out = {k: v for k, v in cell.items() if k not in TRANSIENT}
    outputs = out.get("outputs")
    if isinstance(outputs, list):
        out["outputs"] = [
            {k: v for k, v in o.items() if k not in TRANSIENT} if isinstance(o, dict) else o
            for o in outputs
        ]
    if isinstance(out.get("source"), list):
        out["source"] = "".join(out["source"])
    return out


def turn_of(cell: Cell) -> int | None:
    """The turn number the cell's last session part shows (None: never run as a turn)."""
    turn = None
    for output in cell.get("outputs") or ():
        data = output.get("data") if isinstance(output, dict) else None
        part = data.get(MIME_TYPE) if isinstance(data, dict) else None
        if isinstance(part, dict) and isinstance(part.get("turn"), int):
            turn = part["turn"]
    return turn


def _order(
    base: dict[str, Cell], ours: Sequence[Cell], theirs: Sequence[Cell], kept: dict[str, Any]
) -> list[str]:
    """The ids of ``kept`` in merged order (module docstring)."""
    o_ids, t_ids = [c["id"] for c in ours], [c["id"] for c in theirs]
    common = [i for i in o_ids if i in set(t_ids)]
    t_common = [i for i in t_ids if i in set(o_ids)]
    b_common = [i for i in base if i in set(common)]
    ours_moved = common != b_common
    skeleton, other = (t_ids, o_ids) if not ours_moved and t_common != common else (o_ids, t_ids)
    skeleton_is_ours = skeleton is o_ids
    placed = [i for i in skeleton if i in kept]
    on_skeleton = set(placed)
    runs: dict[str | None, list[str]] = {}
    anchor: str | None = None
    for cid in other:
        if cid in on_skeleton:
            anchor = cid
        elif cid in kept:
            runs.setdefault(anchor, []).append(cid)
    other_set = set(other)
    out: list[str] = []
    index = 0

    def flush(at: str | None) -> None:
        nonlocal index
        own: list[str] = []
        while index < len(placed) and placed[index] not in base and placed[index] not in other_set:
            own.append(placed[index])
            index += 1
        added = runs.get(at, [])
        first, second = (own, added) if skeleton_is_ours else (added, own)
        out.extend(_interleave(first, second, lambda i: _turn(kept[i])))

    flush(None)
    while index < len(placed):
        cid = placed[index]
        out.append(cid)
        index += 1
        flush(cid)
    return out


def _turn(cells: list[Cell]) -> int | None:
    turns = [t for t in (turn_of(c) for c in cells) if t is not None]
    return max(turns) if turns else None


def _interleave(
    first: list[str], second: list[str], turn: Callable[[str], int | None]
) -> list[str]:
    """Merge two runs keeping each run's order: the lower turn first, ``first`` on a tie or
    when either has no turn."""
    out: list[str] = []
    i = j = 0
    while i < len(first) and j < len(second):
        a, b = turn(first[i]), turn(second[j])
        if a is not None and b is not None and b < a:
            out.append(second[j])
            j += 1
        else:
            out.append(first[i])
            i += 1
    return out + first[i:] + second[j:]


def marker_cell(kind: str, text: str, cid: str) -> Cell:
    """A markdown cell drawing one conflict marker (red, as nbdime draws its own)."""
    return {
        "cell_type": "markdown",
        "id": cid,
        "metadata": {MARKER_KEY: {"conflict": kind}},
        "source": f'<span style="color:red"><b>{text}</b></span>',
    }


def conflict_block(ours: Cell | None, theirs: Cell | None, marker_size: int = 7) -> list[Cell]:
    """Marker, our version, marker, their version, marker (absent versions left out); the
    ids stay unique (their version of a cell both have gets ``-theirs``)."""
    seed = (ours or theirs or {}).get("id") or "cell"
    size = max(marker_size, 7)
    cells = [marker_cell("start", f"{'<' * size} ours", _mark_id(seed, "start"))]
    if ours is not None:
        cells.append(ours)
    cells.append(marker_cell("middle", "=" * size, _mark_id(seed, "middle")))
    if theirs is not None:
        theirs = copy.deepcopy(theirs)
        if ours is not None:
            theirs["id"] = _mark_id(seed, "theirs")
        cells.append(theirs)
    cells.append(marker_cell("end", f"{'>' * size} theirs", _mark_id(seed, "end")))
    return cells


def _mark_id(seed: str, kind: str) -> str:
    return f"{seed[: 63 - len(kind)]}-{kind}"


def fallback_merge(
    ours: Sequence[Cell], theirs: Sequence[Cell], with_ids: bool, marker_size: int = 7
) -> CellMerge:
    """The last resort: common leading/trailing cells, every other cell of both sides in
    one conflict block (``with_ids``: ids made unique; else marker cells have none, as
    nbformat before 4.5 wants)."""
    start = 0
    while start < min(len(ours), len(theirs)) and same(ours[start], theirs[start]):
        start += 1
    end = 0
    while end < min(len(ours), len(theirs)) - start and same(
        ours[len(ours) - 1 - end], theirs[len(theirs) - 1 - end]
    ):
        end += 1
    head, tail = list(ours[:start]), list(ours[len(ours) - end :])
    mine, other = list(ours[start : len(ours) - end]), list(theirs[start : len(theirs) - end])
    if not mine and not other:
        return CellMerge(cells=head + tail)
    size = max(marker_size, 7)
    block = [marker_cell("start", f"{'<' * size} ours", "openprogram-conflict-start")]
    block += mine
    block.append(marker_cell("middle", "=" * size, "openprogram-conflict-middle"))
    block += other
    block.append(marker_cell("end", f"{'>' * size} theirs", "openprogram-conflict-end"))
    cells = head + block + tail
    conflict = f"{len(mine)} cell(s) here and {len(other)} there could not be merged"
    return CellMerge(cells=_unique_ids(cells) if with_ids else _no_ids(cells), conflicts=[conflict])


def _unique_ids(cells: list[Cell]) -> list[Cell]:
    """Every cell with an id, all different (a missing or repeated one renamed)."""
    seen: set[str] = set()
    out = []
    for n, cell in enumerate(cells):
        cid = cell.get("id")
        if not isinstance(cid, str) or not cid or cid in seen:
            cell = {**cell, "id": f"openprogram-{n}"}
        seen.add(cell["id"])
        out.append(cell)
    return out


def _no_ids(cells: list[Cell]) -> list[Cell]:
    return [{k: v for k, v in c.items() if k != "id"} for c in cells]
