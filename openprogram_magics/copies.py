"""A copy is a new line, a rename is the same line (issue 35 item 7).

A notebook names its session in its metadata, so ``cp review.ipynb review-copy.ipynb``
makes two files naming one session.  When a notebook's turn would continue a session
that this machine last used from *another* notebook — one that still exists and still
names that session — this notebook is a copy: its turns go to a new session, which
starts with the original's whole history (the copy's cells follow the turns the copy
shows) and records where it came from (``meta.json`` ``forked_from``).  A notebook whose
session was last used from a path that no longer exists, or no longer names it, was
renamed (or moved): it continues the same session.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from openprogram.errors import MetadataError
from openprogram_magics.notebook import NotebookMeta, parse_metadata


def notebook_path(place: str) -> Path | None:
    """The absolute path of ``notebook <path>`` (a place or a title), else None."""
    kind, _, path = place.partition(" ")
    if kind != "notebook" or not path or not Path(path).is_absolute():
        return None
    return Path(path)


def original_of(session_id: str, place: str, recorded: str) -> Path | None:
    """The notebook this one (at ``place``, ``notebook <absolute path>``) is a copy of:
    the one the session was last used from (``recorded``, its ``.state/place``) when that
    is another file that exists and still names ``session_id``; else None (a rename,
    the same notebook, or a place not known)."""
    here, there = notebook_path(place), notebook_path(recorded)
    if here is None or there is None:
        return None
    from openprogram_magics.notebook import read_file_metadata

    try:
        if here.resolve() == there.resolve() or not there.is_file():
            return None
        if here.exists() and here.samefile(there):  # one file, two paths (a hard link)
            return None
        named = parse_metadata(read_file_metadata(there))
        # ``here`` is found by name in the working folder (``%cd`` may have moved it): a
        # copy names the session on disk too; another notebook of that name is not this one
        mine = parse_metadata(read_file_metadata(here))
    except (OSError, MetadataError):
        return None
    if mine is None or mine.session_id != session_id:
        return None
    return there if named is not None and named.session_id == session_id else None


def fork_copy(meta: NotebookMeta, original: Path, title: str) -> tuple[NotebookMeta, str]:
    """A new session for the copy: the original session's history (bundled and imported
    under a new id; what remotes hold of it noted, so ``sessions delete`` counts only the
    copy's own turns as not pushed), its ``forked_from`` recorded, the copy's title; and
    the one line that says so."""
    from openprogram.agent.session_db import default_db
    from openprogram.context.secrets import without_home
    from openprogram.store.session.files import mint_session_id
    from openprogram.store.session.remotes import copy_remote_refs
    from openprogram.store.session.sync import export_bundle, import_bundle
    from openprogram_magics.sessions import shareable_title

    db = default_db()
    new_id = mint_session_id("nb")
    with tempfile.TemporaryDirectory(prefix="openprogram-copy-") as tmp:
        bundle = export_bundle(db, meta.session_id, Path(tmp) / "session.bundle")
        got = import_bundle(db, bundle, as_id=new_id)
    copy_remote_refs(db.session_path(meta.session_id), db.session_path(new_id))
    session = db.open(new_id)
    session.set_meta(
        title=shareable_title(title),
        forked_from={
            "session": meta.session_id,
            "notebook": shareable_title(f"notebook {original}"),
            "turn": meta.last_turn_id or session.head_id,
        },
    )
    shown = without_home(str(original))  # printed into the notebook: no home path
    note = (
        f"this notebook is a copy of {shown} (session {meta.session_id}): its turns go "
        f"to a new session {new_id}, which starts with the {got.new_turns} turns of "
        f"{meta.session_id}; the original keeps {meta.session_id}"
    )
    forked = NotebookMeta(new_id, meta.last_turn_id, meta.remote, meta.provider, meta.model)
    return forked, note
