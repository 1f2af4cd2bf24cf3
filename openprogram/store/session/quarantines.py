"""The quarantine a pull or import receives into, kept for the next one.

Removing a folder costs ~3 ms on these machines' disk (ext4 mounted with ``discard``), and
an empty repository has nine: making and deleting one was a fifth of a pull of 10 turns.
So once a join is done its quarantine is emptied back to the bare skeleton (:data:`SKELETON`:
the folders :func:`safegit.init_repository` makes, ``HEAD`` and the canonical ``config``)
and kept in the session's ``.git`` (:data:`SPARE`, which git ignores) for the session's
next pull.  A session folder can come from anyone, so a spare is taken only when it is
exactly that skeleton — real folders, no other file, no link — and is otherwise removed;
what arrives is then received as into a new repository.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from openprogram.store.session.safegit import HEAD_CONTENT, canonical_config, init_repository

SPARE = "openprogram-incoming"  # in a session's .git: an empty quarantine for its next pull
SKELETON = (
    ".git",
    ".git/objects",
    ".git/objects/info",
    ".git/objects/pack",
    ".git/refs",
    ".git/refs/heads",
    ".git/refs/tags",
    ".git/refs/openprogram",  # where a pull names what it borrows and what arrived
)
_FILES = {".git/HEAD": HEAD_CONTENT, ".git/config": canonical_config()}


def make(path: Path, local: Path | None) -> None:
    """A new empty repository at ``path``: the spare of session folder ``local`` renamed
    there when it has one that is exactly the skeleton, else made afresh."""
    if local is None:
        _new(path)
        return
    try:
        os.rename(local / ".git" / SPARE, path)
    except OSError:  # none (or not movable): a new one
        _new(path)
        return
    if not is_skeleton(path):
        _remove(path)  # a link is removed, never followed
        _new(path)


def _new(path: Path) -> None:
    init_repository(path)
    os.mkdir(path / ".git" / "refs" / "openprogram")


def put_away(path: Path, local: Path | None) -> None:
    """Empty the quarantine ``path`` back to the skeleton and keep it as session folder
    ``local``'s spare; delete it when that cannot be done (no session there, a spare
    already kept, anything unexpected)."""
    try:
        if (
            local is not None
            and _real_dir(local / ".git")
            and not os.path.lexists(local / ".git" / SPARE)
        ):
            _empty(path)
            if is_skeleton(path):
                os.rename(path, local / ".git" / SPARE)
                return
    except OSError:
        pass
    shutil.rmtree(path, ignore_errors=True)


def _empty(path: Path) -> None:
    """Remove everything under ``path`` but the skeleton's folders and files."""
    keep_dirs, keep_files = set(SKELETON), set(_FILES)
    for where, dirs, files in os.walk(path, topdown=True):
        rel = os.path.relpath(where, path)
        for name in list(dirs):
            sub = os.path.normpath(os.path.join(rel, name))
            if sub not in keep_dirs or not _real_dir(path / sub):
                dirs.remove(name)
                _remove(path / sub)
        for name in files:
            sub = os.path.normpath(os.path.join(rel, name))
            if sub not in keep_files:
                os.unlink(path / sub)


def _remove(path: Path) -> None:
    if _real_dir(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def is_skeleton(path: Path) -> bool:
    """Whether ``path`` holds exactly an empty repository of ours: the skeleton's real
    folders, ``HEAD`` and the canonical ``config``, nothing else (no link anywhere)."""
    if not _real_dir(path):
        return False
    found_dirs: set[str] = set()
    for where, dirs, files in os.walk(path):
        rel = os.path.relpath(where, path)
        for name in dirs:
            sub = os.path.normpath(os.path.join(rel, name))
            if sub not in SKELETON or not _real_dir(path / sub):
                return False
            found_dirs.add(sub)
        for name in files:
            sub = os.path.normpath(os.path.join(rel, name))
            if _FILES.get(sub) is None or not _holds(path / sub, _FILES[sub]):
                return False
    return found_dirs == set(SKELETON) and all(os.path.lexists(path / name) for name in _FILES)


def _holds(path: Path, content: bytes) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, len(content) + 1) == content
    finally:
        os.close(fd)


def _real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False
