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

Notebook metadata merges key by key (a key one side changed takes that side's value; ours
when both changed it, with a note — theirs under ``git rebase``, where theirs is this
clone's commit); ``nbformat_minor`` is the higher of the two.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
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
