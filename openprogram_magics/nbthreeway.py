"""The three-way merge of whole notebooks the driver writes: never one side silently.

:func:`merge_documents` takes three notebook dicts (their session-derived parts already
settled by :func:`openprogram_magics.nbmerge.resolve_derived`):

- cells with usable ids (nbformat 4.5+) merge cell by cell
  (:func:`openprogram_magics.cellmerge.merge_cells`); a cell both sides changed goes to
  nbdime alone, and when nbdime cannot merge it cleanly it becomes a conflict block;
- otherwise nbdime merges the notebook, inside a guard: if nbdime raises, or writes a
  notebook nbformat does not accept, every cell of both sides goes into one conflict block
  (:func:`openprogram_magics.cellmerge.fallback_merge`); a conflict nbdime records only in
  metadata gets a visible marker cell too.

:func:`same_ids` runs first: where one version's cells have ids and another's have none
(a colleague's newer Jupyter upgraded the file to nbformat 4.5 on save), the versions
without get ids matched by content, so the merge still goes cell by cell.

Notebook metadata merges key by key (a key one side changed takes that side's value; ours
when both changed it, with a note — theirs under ``git rebase``, where theirs is this
clone's commit); ``nbformat_minor`` is the higher of the two.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any, Final

from openprogram_magics.cellmerge import (
    Cell,
    fallback_merge,
    marker_cell,
    merge_cells,
    usable_ids,
)

_MISSING: Final = object()


@dataclass
class Merged:
    """The merged notebook (a plain dict), its conflicts and notes (one line each)."""

    notebook: dict[str, Any]
    conflicts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def merge_documents(
    base: dict[str, Any] | None,
    ours: dict[str, Any],
    theirs: dict[str, Any],
    marker_size: int = 7,
    keep_theirs: bool = False,
) -> Merged:
    """See the module docstring; ``base`` None is a notebook both sides added;
    ``keep_theirs``: metadata both changed takes theirs (a rebase: this clone's)."""
    base = base if base is not None else {**ours, "cells": [], "metadata": {}}
    cells = (_cells(base), _cells(ours), _cells(theirs))
    if usable_ids(*cells):
        metadata, notes = merge_metadata(
            base.get("metadata"), ours.get("metadata"), theirs, keep_theirs
        )
        done = merge_cells(*cells, both_changed=nbdime_cell, marker_size=marker_size)
        nb = {
            **ours,
            "metadata": metadata,
            "nbformat_minor": _minor(ours, theirs),
            "cells": done.cells,
        }
        if _valid(nb):
            return Merged(nb, done.conflicts, notes + done.notes)
        notes.append("the cell merge gave an invalid notebook; both sides kept with markers")
        return _fallback(ours, theirs, marker_size, notes)
    return nbdime_document(base, ours, theirs, marker_size)


def same_ids(
    base: dict[str, Any] | None, ours: dict[str, Any], theirs: dict[str, Any]
) -> list[str]:
    """Give ids, in place, to the versions whose cells have none when a side's have them
    (nbformat 4.4 beside 4.5), and put every version at the highest ``nbformat_minor``.

    A cell takes the id of the base cell it matches (same type and source; else the cell at
    its place between matched ones); the base's cells take the ids of the side cells they
    match (ours first), so a side's ids made on its own upgrade agree with the other's.  A
    cell only a side has keeps its id, else gets a new one that no other cell has (two
    sides adding the same text are two cells, as between two 4.4 versions).  Returns a note
    when it gave ids, else nothing.
    """
    b, o, t = (_cells(nb) if isinstance(nb, dict) else [] for nb in (base, ours, theirs))
    if not (usable_ids(o) or usable_ids(t)) or usable_ids(b, o, t):
        return []
    shared = usable_ids(b)  # the base's ids are the sides' (it was 4.5 already)
    if not shared:
        given: list[str | None] = [None] * len(b)
        for side in (s for s in (o, t) if usable_ids(s)):
            for i, j in _aligned(b, side).items():
                if given[i] is None and side[j]["id"] not in given:
                    given[i] = side[j]["id"]
        taken = {c.get("id") for c in (*o, *t)} | set(given)
        for i, cell in enumerate(b):
            cell["id"] = given[i] or _new_id(cell, taken)
    base_ids = [c["id"] for c in b]
    for side, other in ((o, t), (t, o)):
        if shared and usable_ids(side):
            continue
        matched = {j: i for i, j in _aligned(b, side).items()}
        taken = {*base_ids, *(c.get("id") for c in other)}  # an added cell is never theirs
        ids: list[str] = []
        for j, cell in enumerate(side):
            if j in matched:
                ids.append(base_ids[matched[j]])
                continue
            own = cell.get("id")
            if isinstance(own, str) and own and own not in taken and own not in ids:
                ids.append(own)
            else:
                ids.append(_new_id(cell, taken | set(ids)))
        for cell, cid in zip(side, ids, strict=True):
            cell["id"] = cid
    minors = [nb.get("nbformat_minor") for nb in (base, ours, theirs) if isinstance(nb, dict)]
    highest = max([5, *(m for m in minors if isinstance(m, int))])
    for nb in (base, ours, theirs):
        if isinstance(nb, dict):
            nb["nbformat_minor"] = highest
    return [f"cells without ids (nbformat before 4.5) matched by content: merged as 4.{highest}"]


def _key(cell: Cell) -> tuple[Any, str]:
    source = cell.get("source")
    return cell.get("cell_type"), "".join(source) if isinstance(source, list) else str(source)


def _aligned(first: list[Cell], second: list[Cell]) -> dict[int, int]:
    """Index in ``first`` -> index in ``second`` of the cells that match (see
    :func:`same_ids`): equal ones, and those of one type at one place among changes."""
    pairs: dict[int, int] = {}
    keys = ([_key(c) for c in first], [_key(c) for c in second])
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, *keys, autojunk=False).get_opcodes():
        if tag in ("equal", "replace"):
            pairs.update(
                (i, j)
                for i, j in zip(range(i1, i2), range(j1, j2), strict=False)
                if first[i].get("cell_type") == second[j].get("cell_type")
            )
    return pairs


def _new_id(cell: Cell, taken: set[Any]) -> str:
    """An id from the cell's content (the same merge gives the same file), not in ``taken``."""
    seed = json.dumps(_key(cell))
    while (cid := hashlib.sha1(seed.encode()).hexdigest()[:8]) in taken:
        seed += "+"
    taken.add(cid)
    return cid


def merge_metadata(
    base: Any, ours: Any, theirs_nb: dict[str, Any], keep_theirs: bool = False
) -> tuple[Any, list[str]]:
    """Notebook metadata merged key by key (module docstring)."""
    theirs = theirs_nb.get("metadata")
    b, o, t = (m if isinstance(m, dict) else {} for m in (base, ours, theirs))
    merged: dict[str, Any] = {}
    notes = []
    for key in [*o, *(k for k in t if k not in o)]:
        mine, other, old = (m.get(key, _MISSING) for m in (o, t, b))
        if mine == other or other == old:
            value = mine
        elif mine == old:
            value = other
        else:
            value = other if keep_theirs else mine
            notes.append(f"notebook metadata {key!r} changed on both sides: this side's kept")
        if value is not _MISSING:  # a key one side deleted and the other left alone goes
            merged[key] = copy.deepcopy(value)
    return merged, notes


def nbdime_cell(base: Cell, ours: Cell, theirs: Cell) -> Cell | None:
    """nbdime's merge of one cell both sides changed; None unless clean and valid."""
    try:
        import nbformat
        from nbdime.merging import merge_notebooks

        def one(cell: Cell) -> Any:
            return nbformat.from_dict(nbformat.v4.new_notebook(cells=[copy.deepcopy(cell)]))

        merged, decisions = merge_notebooks(one(base), one(ours), one(theirs))
        if any(d.conflict for d in decisions) or len(merged.cells) != 1:
            return None
        nbformat.validate(merged)
        cell = json.loads(json.dumps(merged.cells[0]))
        return cell if cell.get("id") == ours.get("id") else None
    except Exception:  # nbdime's failure is a conflict block, never a lost cell
        return None


def nbdime_document(
    base: dict[str, Any], ours: dict[str, Any], theirs: dict[str, Any], marker_size: int
) -> Merged:
    """nbdime's merge of notebooks without usable cell ids, guarded (module docstring)."""
    notes: list[str] = []
    try:
        import nbformat
        from nbdime.merging import merge_notebooks

        nodes = [nbformat.from_dict(copy.deepcopy(nb)) for nb in (base, ours, theirs)]
        merged, decisions = merge_notebooks(*nodes)
        nbformat.validate(merged)
        nb = json.loads(json.dumps(merged))
        conflicts = [str(d.common_path) for d in decisions if d.conflict]
    except Exception as exc:
        notes.append(f"nbdime could not merge it ({type(exc).__name__}); both sides kept")
        return _fallback(ours, theirs, marker_size, notes)
    if conflicts and "<" * 7 not in json.dumps(nb["cells"]):
        marker = marker_cell("start", "<<<<<<< conflicts in the metadata (nbdime-conflicts)", "")
        del marker["id"]
        nb["cells"] = [marker, *nb["cells"]]
    return Merged(nb, conflicts, notes)


def guarded_fallback(
    ours: dict[str, Any], theirs: dict[str, Any], marker_size: int, exc: BaseException
) -> Merged:
    """What the driver writes when the merge itself failed: both sides with markers."""
    note = f"the merge failed ({type(exc).__name__}: {exc}); both sides kept with markers"
    return _fallback(ours, theirs, marker_size, [note])


def _fallback(
    ours: dict[str, Any], theirs: dict[str, Any], marker_size: int, notes: list[str]
) -> Merged:
    with_ids = _minor(ours, theirs) >= 5
    done = fallback_merge(_cells(ours), _cells(theirs), with_ids, marker_size)
    nb = {**ours, "nbformat_minor": _minor(ours, theirs), "cells": done.cells}
    return Merged(nb, done.conflicts or ["both sides kept"], notes)


def _cells(nb: dict[str, Any]) -> list[Cell]:
    cells = nb.get("cells")
    return [c for c in cells if isinstance(c, dict)] if isinstance(cells, list) else []


def _minor(ours: dict[str, Any], theirs: dict[str, Any]) -> int:
    values = [nb.get("nbformat_minor") for nb in (ours, theirs)]
    return max([v for v in values if isinstance(v, int)] or [5])


def _valid(nb: dict[str, Any]) -> bool:
    try:
        import nbformat

        nbformat.validate(nbformat.from_dict(copy.deepcopy(nb)))
    except Exception:
        return False
    return True
