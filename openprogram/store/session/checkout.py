"""What of a session's history is checked out: the buckets that are not sealed.

A sealed bucket (:mod:`buckets`) is listed from its committed index and a node's content
is the blob in HEAD, so its node files need not be on disk, where each costs a 4 KiB
block for ~1 KB of JSON.  Git's own sparse checkout (cone mode, on in the canonical
config of :mod:`safegit`) leaves them out: ``.git/info/sparse-checkout`` names the
buckets kept, which are those *not* sealed in the commit git's index is set to, so a
bucket opened since is never left out.  Git marks the files it left out skip-worktree:
``git status`` stays clean; ``git log -p``, ``git show HEAD:history/…`` and ``git grep …
HEAD`` see all of them; a clone checks everything out; ``git sparse-checkout disable``
brings every file back and the session keeps them (:func:`safegit.sparse_wanted`).

:func:`refresh` is the one place that sets git's index and the checked-out files; the
detached maintenance runs it after sealing, a pull after joining a line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from openprogram.store.session.buckets import bucket_trees, sealed_columns
from openprogram.store.session.files import atomic_write, ensure_dir
from openprogram.store.session.repository import Repository
from openprogram.store.session.safegit import run_git, sparse_wanted

SEALED_FILE = "sealed.json"  # .state/: bucket -> tree sha found sealed (not checked again)


def patterns(kept: Iterable[str]) -> bytes:
    """Cone-mode patterns keeping the files at the top and ``history/<bucket>/`` of each
    bucket in ``kept`` (only names the store made: ``BUCKET_NAME``)."""
    lines = ["/*", "!/*/", "/history/", "!/history/*/"]
    lines += [f"/history/{name}/" for name in sorted(kept, key=int)]
    return ("\n".join(lines) + "\n").encode()


def read_known(root: Path) -> dict[str, str]:
    """``.state/sealed.json``: bucket -> the tree (hex) it was found sealed at."""
    try:
        known = json.loads((root / ".state" / SEALED_FILE).read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(known, dict):
        return {}
    return {k: v for k, v in known.items() if isinstance(k, str) and isinstance(v, str)}


def write_known(root: Path, known: Mapping[str, str]) -> None:
    try:
        atomic_write(root / ".state" / SEALED_FILE, json.dumps(dict(known)).encode())
    except OSError:
        pass


def sealed_buckets(
    repo: Repository, root: Path, trees: Mapping[str, bytes], known: dict[str, str]
) -> set[str]:
    """The buckets of ``trees`` whose committed index records their tree (``known`` is
    trusted and completed: a wrong entry only decides which committed files are on disk,
    never what the store reads)."""
    sealed = set()
    for name, tree in trees.items():
        if known.get(name) != tree.hex():
            if sealed_columns(repo, root, name, tree, None) is None:
                continue
            known[name] = tree.hex()
        sealed.add(name)
    return sealed


def never_refreshed(root: Path, repo: Repository) -> bool:
    """Whether a session with sealed buckets has never had them left out (a clone, a
    session made before this layout): the next open starts a maintenance for it."""
    git_dir = root / ".git"
    if os.path.lexists(git_dir / "info" / "sparse-checkout") or not sparse_wanted(git_dir):
        return False
    try:
        return len(bucket_trees(repo)) > 1
    except Exception:  # no commit, unreadable objects: nothing to leave out
        return False


def refresh(root: Path, repo: Repository, known: dict[str, str] | None = None) -> None:
    """Set git's index to HEAD (``read-tree -m``: the stat data and skip-worktree marks of
    unchanged entries are kept, the working tree is not touched) and, unless the user
    turned the sparse checkout off, leave the sealed buckets' files out of the working
    tree (``git sparse-checkout reapply``: a file that differs from HEAD is left, never
    lost).  ``known``: the sealed buckets known already (``.state/sealed.json``)."""
    commit = repo.read_ref()
    if commit is None:
        return
    sparse = sparse_wanted(root / ".git")
    if sparse:
        if known is None:
            known = read_known(root)
        trees = bucket_trees(repo, commit)
        kept = set(trees) - sealed_buckets(repo, root, trees, known)
        write_known(root, known)
        atomic_write(ensure_dir(root / ".git", "info") / "sparse-checkout", patterns(kept))
    run_git(root, "read-tree", "-m", commit.hex(), check=False)
    if sparse:
        run_git(root, "sparse-checkout", "reapply", check=False)
