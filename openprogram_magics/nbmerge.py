"""Merging a notebook's session-derived parts before nbdime merges the rest (pure logic).

Two people who run cells of one notebook change two kinds of things in the ``.ipynb``:
what they wrote (sources, markdown, ordinary outputs) and what is *derived from the
session* — ``metadata.openprogram`` and the outputs a turn draws (the saved DAG
:data:`~openprogram.view.saved.DAG_MIME`, the session part
:data:`~openprogram_magics.notebook.MIME_TYPE`, a background cell's progress, an embedded
bundle).  The derived parts can always be drawn again from the merged session, so
:func:`resolve_derived` settles them in the three versions (base, ours, theirs) *before*
nbdime's three-way merge runs; nbdime then sees both sides agree on them and merges what
people wrote with its usual behaviour (inline conflict markers for a real conflict).

The rules (``ours`` is ``%A``, the side being merged into — the person running ``git
merge``/``git pull``; ``theirs`` is ``%B``):

- ``metadata.openprogram``: merged field by field — a field one side changed takes that
  side's value; a field both changed to different values takes ours (this clone's
  provider, model and remote are what it runs with).  The session id must agree: when
  both sides changed it to different sessions nothing is resolved here; the driver leaves a
  conflict (:func:`session_conflict`: a marker block holding both ids, git told).
  ``last_turn_id`` is dropped (files no longer keep it: each turn's output carries its own
  id).
- a cell *both* sides re-ran — a ``%%openprogram`` cell, a cell of only ``%openprogram``
  commands (``status``, ``log``, ``dag``…), or one whose outputs on both sides hold one of
  our derived parts — keeps our outputs, execution count and run timing (``metadata.execution``,
  ``metadata.papermill``): both turns are in the merged session, ours is what this person
  saw; an embedded bundle only theirs has is appended after ours (nothing is lost, and
  ``import --embedded`` reads the last one — theirs, the one this side lacks).
- everything else (sources, other outputs, cells one side changed) is nbdime's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from openprogram.view.saved import DAG_MIME
from openprogram_magics.cells.background import MIME_PROGRESS
from openprogram_magics.notebook import METADATA_KEY, METADATA_VERSION, MIME_TYPE
from openprogram_magics.sharing import BUNDLE_MIME

#: Output parts derived from the session: a cell holding one is re-derivable.
DERIVED_MIMES: Final = (DAG_MIME, MIME_TYPE, MIME_PROGRESS, BUNDLE_MIME)
#: Cell metadata that only says when a run happened (nbclient, papermill).
RUN_TIMING_KEYS: Final = ("execution", "papermill")
#: Fields of ``metadata.openprogram`` files no longer keep.
DROPPED_FIELDS: Final = ("last_turn_id",)


@dataclass
class Resolution:
    """What :func:`resolve_derived` settled (for the driver's one-line report)."""

    metadata: dict[str, Any] | None = None  # the merged metadata.openprogram, if any
    cells: list[str] = field(default_factory=list)  # ids (or indexes) of cells settled
    notes: list[str] = field(default_factory=list)  # what the user should be told
    sessions: tuple[str, str] | None = None  # (ours, theirs): each side names its own session


def merge_session_metadata(
    base: Any, ours: Any, theirs: Any
) -> tuple[dict[str, Any] | None, str | None]:
    """The merged ``metadata.openprogram`` and a note; ``(None, note)`` when the two sides
    name different sessions (left to nbdime), ``(None, None)`` when neither has one."""
    values = [v if isinstance(v, dict) else None for v in (base, ours, theirs)]
    b, o, t = (v or {} for v in values)
    if values[1] is None and values[2] is None:
        return None, None
    sid_o, sid_t = o.get("session_id"), t.get("session_id")
    if sid_o and sid_t and sid_o != sid_t and b.get("session_id") not in (sid_o, sid_t):
        return None, (
            f"this notebook names session {sid_o} here and {sid_t} in the merged branch; "
            "a conflict (pick one, then `%openprogram use ID`)"
        )
    merged: dict[str, Any] = {}
    for key in sorted({*o, *t} - set(DROPPED_FIELDS)):
        mine, other, old = o.get(key), t.get(key), b.get(key)
        value = other if mine == old and other != old else mine
        if value is not None:
            merged[key] = value
    if isinstance(o.get("version"), int) and isinstance(t.get("version"), int):
        merged["version"] = max(o["version"], t["version"])
    merged.setdefault("version", METADATA_VERSION)
    return merged, None


def resolve_derived(base: Any, ours: Any, theirs: Any) -> Resolution:
    """Settle the session-derived parts of three notebook dicts in place (see the module
    docstring); what is left differs only where people wrote different things."""
    out = Resolution()
    metas = [_metadata(nb).get(METADATA_KEY) for nb in (base, ours, theirs)]
    merged, note = merge_session_metadata(*metas)
    if note:
        out.notes.append(note)
        sid_o, sid_t = (str((m or {}).get("session_id")) for m in metas[1:])
        out.sessions = (sid_o, sid_t)
    if merged is not None:
        for nb in (base, ours, theirs):
            if isinstance(nb, dict) and isinstance(nb.get("metadata"), dict):
                nb["metadata"][METADATA_KEY] = dict(merged)
        out.metadata = merged
    base_cells = dict(_keyed_cells(base, ours, theirs, _cells(base)))
    their_cells = dict(_keyed_cells(base, ours, theirs, _cells(theirs)))
    for key, mine in _keyed_cells(base, ours, theirs, _cells(ours)):
        other = their_cells.get(key)
        if other is None or mine.get("cell_type") != "code":
            continue
        old = base_cells.get(key, {})
        if _settle_cell(mine, other, old):
            out.cells.append(str(key))
            if key in base_cells:  # the base agrees too: nbdime sees no change there
                base_cells[key]["outputs"] = mine.get("outputs", [])
    if out.cells:
        out.notes.append(
            f"{len(out.cells)} cell(s) both sides re-ran keep this side's turn output "
            "(both turns are in the merged session)"
        )
    return out


def session_conflict(sessions: tuple[str, str], marker_size: int = 7) -> list[dict[str, Any]]:
    """The conflict block (:func:`~openprogram_magics.cellmerge.conflict_block`) that heads
    a notebook whose two sides name different sessions: one markdown cell per choice."""
    from openprogram_magics.cellmerge import conflict_block

    ours, theirs = (
        {
            "cell_type": "markdown",
            "id": "openprogram-session",
            "metadata": {},
            "source": f"This notebook's session: `{sid}` (keep it: `%openprogram use {sid}`)",
        }
        for sid in sessions
    )
    return conflict_block(ours, theirs, marker_size)


def _settle_cell(mine: dict[str, Any], other: dict[str, Any], old: dict[str, Any]) -> bool:
    """Make ``other`` (theirs) agree with ``mine`` on derived outputs and run timing;
    True when outputs were settled."""
    _settle_timing(mine, other, old)
    outputs, theirs, before = (c.get("outputs") or [] for c in (mine, other, old))
    if outputs == theirs or before in (outputs, theirs):  # the same, or one side's change
        return False
    if not (_session_cell(mine) or (_derived(outputs) and _derived(theirs))):
        return False
    kept = list(outputs)
    kept += [o for o in theirs if _has(o, BUNDLE_MIME) and o not in kept]
    mine["outputs"] = kept
    other["outputs"] = list(kept)
    other["execution_count"] = mine.get("execution_count")
    return True


def _settle_timing(mine: dict[str, Any], other: dict[str, Any], old: dict[str, Any]) -> None:
    """Run timing both sides changed (a wall-clock stamp) takes ours."""
    m, t, b = (_metadata(c) for c in (mine, other, old))
    if t is not other.get("metadata"):  # theirs has no metadata object to settle
        return
    for key in RUN_TIMING_KEYS:
        if key in m and m.get(key) != t.get(key) and t.get(key) != b.get(key):
            t[key] = m[key]


def _session_cell(cell: dict[str, Any]) -> bool:
    """A ``%%openprogram`` cell, or one of only ``%openprogram`` commands (``status``,
    ``log``, ``dag``…): all its outputs come from the session."""
    source = cell.get("source")
    text = "".join(source) if isinstance(source, list) else source
    if not isinstance(text, str):
        return False
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if lines and lines[0].startswith("%%openprogram"):
        return True
    return bool(lines) and all(
        ln.startswith(("%openprogram ", "#")) or ln == "%openprogram" for ln in lines
    )


def _derived(outputs: Iterable[Any]) -> bool:
    return any(_has(o, mime) for o in outputs for mime in DERIVED_MIMES)


def _has(output: Any, mime: str) -> bool:
    data = output.get("data") if isinstance(output, dict) else None
    return isinstance(data, dict) and mime in data


def _metadata(nb: Any) -> dict[str, Any]:
    meta = nb.get("metadata") if isinstance(nb, dict) else None
    return meta if isinstance(meta, dict) else {}


def _cells(nb: Any) -> list[dict[str, Any]]:
    cells = nb.get("cells") if isinstance(nb, dict) else None
    return [c for c in cells if isinstance(c, dict)] if isinstance(cells, list) else []


def _keyed_cells(
    base: Any, ours: Any, theirs: Any, cells: list[dict[str, Any]]
) -> Iterator[tuple[str | int, dict[str, Any]]]:
    """Cells keyed by their id (nbformat 4.5); by position when a version has cells
    without ids and all three have as many cells (no cell was added or removed)."""
    if all(isinstance(c.get("id"), str) for nb in (ours, theirs) for c in _cells(nb)):
        for cell in cells:
            yield cell["id"], cell
    elif len({len(_cells(nb)) for nb in (base, ours, theirs)}) == 1:
        yield from enumerate(cells)
