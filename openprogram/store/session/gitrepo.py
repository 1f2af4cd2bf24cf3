"""Committing a session's files to git without the index (the fast path).

The git index costs O(tracked files) per commit, so a turn is committed by writing the
blobs and the few trees on its path directly with gitdb (GitPython's object layer) and a
commit made from the new root tree.  History is sharded ``history/<bucket>/<turn>/`` so a
commit rewrites four small trees, and the cost stays flat as the session grows
(measurements: ``../shared/recipes/git-persistence-speed.md`` and ``benchmarks/``).

Because the index is not updated per commit, :func:`maintain` refreshes it (and packs
loose objects) every few dozen turns; between two maintenances ``git status`` in the
session lists the newest node files as untracked although they are committed.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import subprocess
import threading
import time
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from openprogram.store.session.safegit import (
    ACTOR_EMAIL,
    ACTOR_NAME,
    BRANCH,
    check_layout,
    git_argv,
    git_env,
    init_repository,
    make_safe,
    object_db,
    run_git,
)

if TYPE_CHECKING:
    from gitdb.db import GitDB

BLOB_MODE = 0o100644
TREE_MODE = 0o040000
MAX_PACKS = 20  # more packs than this and maintenance merges them into one

TreeEntries = dict[str, tuple[bytes, int]]  # name -> (binsha, mode)


def parse_tree(data: bytes) -> TreeEntries:
    """The entries of a git tree object (``<mode> <name>\\0<20-byte sha>`` each).

    Parsed here rather than by GitPython, whose import (~70 ms) an open would otherwise pay.
    """
    entries: TreeEntries = {}
    pos, end = 0, len(data)
    while pos < end:
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        name = data[space + 1 : nul].decode("utf-8", "surrogateescape")
        entries[name] = (data[nul + 1 : nul + 21], int(data[pos:space], 8))
        pos = nul + 21
    return entries


def tree_data(entries: TreeEntries, *, ordered: bool = False) -> bytes:
    """The content of the git tree object holding ``entries`` (``ordered``: they are in git's
    order already, as :func:`parse_tree` returns them)."""
    if ordered:
        return b"".join(
            b"%o %s\0%s" % (mode, name.encode("utf-8", "surrogateescape"), sha)
            for name, (sha, mode) in entries.items()
        )

    # git orders tree entries by name, comparing directories as if they ended in "/"
    def key(item: tuple[str, tuple[bytes, int]]) -> bytes:
        name, (_sha, mode) = item
        return (name + "/" if mode == TREE_MODE else name).encode("utf-8", "surrogateescape")

    # the format of GitPython's ``tree_to_stream``, without its per-entry name checks
    # (15x faster; names here are our own: history/<bucket>/<turn>/<seq>-<l>-<id>.json)
    return b"".join(
        b"%o %s\0%s" % (mode, name.encode("utf-8", "surrogateescape"), sha)
        for name, (sha, mode) in sorted(entries.items(), key=key)
    )


def object_sha(kind: bytes, data: bytes) -> bytes:
    """The binary sha git gives an object of ``kind`` (blob, tree…) holding ``data``."""
    return hashlib.sha1(b"%s %d\0" % (kind, len(data)) + data).digest()


def tree_sha(entries: TreeEntries, *, ordered: bool = False) -> bytes:
    """The binary sha of the tree holding ``entries``, without writing it."""
    return object_sha(b"tree", tree_data(entries, ordered=ordered))


def init_repo(path: Path) -> None:
    """Create the session's repository (branch ``main``, the canonical config: no hooks,
    no auto gc), without running git."""
    init_repository(path)


def commit_data(tree: bytes, parent: bytes | None, message: str, when: int) -> bytes:
    """The content of a commit object by the openprogram actor (UTC, no signature)."""
    actor = f"{ACTOR_NAME} <{ACTOR_EMAIL}> {when} +0000"
    return (
        f"tree {tree.hex()}\n"
        + (f"parent {parent.hex()}\n" if parent else "")
        + f"author {actor}\ncommitter {actor}\n\n{message}"
    ).encode("utf-8", "surrogateescape")


class GitWriter:
    """Writes blobs, trees and commits for one session repository, in-process."""

    def __init__(self, worktree: Path) -> None:
        self.worktree = worktree
        self.git_dir = worktree / ".git"
        self._odb: GitDB | None = None  # created on first use: importing gitdb takes time
        self._tree_cache: dict[bytes, TreeEntries] = {}
        self._commit_trees: dict[bytes, bytes] = {}  # commit sha -> its root tree sha

    @property
    def odb(self) -> GitDB:
        if self._odb is None:  # never reads objects/info/alternates
            check_layout(self.git_dir)
            self._odb = object_db(self.git_dir / "objects")
        return self._odb

    # -- refs --------------------------------------------------------------------------
    def head_commit(self) -> bytes | None:
        """The binary sha ``refs/heads/main`` points to, or None in an empty repository."""
        loose = self.git_dir / "refs" / "heads" / BRANCH
        try:
            return bytes.fromhex(loose.read_text().strip())
        except FileNotFoundError:
            pass
        packed = self.git_dir / "packed-refs"
        try:
            for line in packed.read_text().splitlines():
                if line.endswith(f" refs/heads/{BRANCH}"):
                    return bytes.fromhex(line.split(" ", 1)[0])
        except FileNotFoundError:
            pass
        return None

    def _set_head_commit(self, binsha: bytes) -> None:
        ref = self.git_dir / "refs" / "heads" / BRANCH
        ref.parent.mkdir(parents=True, exist_ok=True)
        tmp = ref.with_name(f".{BRANCH}.{os.getpid()}.tmp")
        tmp.write_text(binsha.hex() + "\n")
        os.replace(tmp, ref)

    # -- objects -----------------------------------------------------------------------
    def _store(self, kind: bytes, data: bytes) -> bytes:
        """Write one loose object (zlib of ``<kind> <size>\\0<data>``, as git does).

        Done here rather than by gitdb's ``LooseObjectDB.store``: fewer syscalls, and a
        background ``git prune-packed`` may remove an empty fan-out folder between creating
        it and renaming the object into it, which gitdb does not survive.
        """
        header = b"%s %d\0" % (kind, len(data))
        digest = hashlib.sha1(header)
        digest.update(data)
        binsha, hexsha = digest.digest(), digest.hexdigest()
        objects = self.git_dir / "objects"
        target = f"{objects}/{hexsha[:2]}/{hexsha[2:]}"
        if os.path.exists(target):
            return binsha
        tmp = f"{objects}/tmp_obj_{os.getpid()}_{threading.get_ident()}_{os.urandom(3).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            os.write(fd, zlib.compress(header + data, 1))
        finally:
            os.close(fd)
        for attempt in range(20):
            try:
                os.rename(tmp, target)
                break
            except FileNotFoundError:  # the fan-out folder does not exist (any more)
                if attempt == 19:
                    os.unlink(tmp)
                    raise
                os.makedirs(f"{objects}/{hexsha[:2]}", exist_ok=True)
        return binsha

    def _read(self, binsha: bytes) -> bytes:
        try:
            return bytes(self.odb.stream(binsha).read())
        except Exception:
            # packed since (``maintain``, here or in another process) or written by another
            # process: gitdb caches where objects live and which packs exist, so refresh
            self.odb.update_cache(force=True)
            return bytes(self.odb.stream(binsha).read())

    def refresh(self) -> None:
        """Forget where objects live (after packing) and drop the tree caches (bounded memory)."""
        if self._odb is not None:
            self._odb.update_cache(force=True)
        self._tree_cache.clear()
        self._commit_trees.clear()

    def blob(self, data: bytes) -> bytes:
        return self._store(b"blob", data)

    def read_commit(self, binsha: bytes) -> bytes:
        return self._read(binsha)

    def read_blob(self, binsha: bytes) -> bytes:
        return self._read(binsha)

    def read_tree(self, binsha: bytes | None) -> TreeEntries:
        if binsha is None:
            return {}
        cached = self._tree_cache.get(binsha)
        if cached is None:
            cached = parse_tree(self._read(binsha))
            self._tree_cache[binsha] = cached
        return dict(cached)

    def head_tree(self) -> TreeEntries:
        """The root tree of ``main`` (empty in an empty repository)."""
        return self.read_tree(self._commit_tree(self.head_commit()))

    def write_tree(self, entries: TreeEntries) -> bytes:
        binsha = self._store(b"tree", tree_data(entries))
        self._tree_cache[binsha] = dict(entries)
        return binsha

    def _commit_tree(self, binsha: bytes | None) -> bytes | None:
        if binsha is None:
            return None
        tree = self._commit_trees.get(binsha)
        if tree is not None:
            return tree
        data = self._read(binsha)
        first = data.split(b"\n", 1)[0]
        return bytes.fromhex(first.split(b" ", 1)[1].decode())

    # -- commits -----------------------------------------------------------------------
    def commit(self, files: Mapping[str, bytes | None], message: str) -> bytes:
        """Commit ``files`` (path -> content, None deletes) on top of ``main``.

        Callers hold the session lock, so reading the parent and moving the ref is atomic
        with respect to other writers.
        """
        parent = self.head_commit()
        root = self.read_tree(self._commit_tree(parent))
        nested: dict[str, object] = {}
        for path, content in files.items():
            node = nested
            parts = path.split("/")
            for part in parts[:-1]:
                node = node.setdefault(part, {})  # type: ignore[assignment]
            node[parts[-1]] = content
        tree = self._merge(root, nested)
        binsha = self._store(b"commit", commit_data(tree, parent, message, int(time.time())))
        self._commit_trees[binsha] = tree
        self._set_head_commit(binsha)
        return binsha

    def _merge(self, entries: TreeEntries, changes: Mapping[str, object]) -> bytes:
        for name, change in changes.items():
            if isinstance(change, dict):
                old = entries.get(name)
                sub = self.read_tree(old[0]) if old and old[1] == TREE_MODE else {}
                entries[name] = (self._merge(sub, change), TREE_MODE)
            elif change is None:
                entries.pop(name, None)
            else:
                assert isinstance(change, bytes)
                entries[name] = (self.blob(change), BLOB_MODE)
        return self.write_tree(entries)

    def close(self) -> None:
        self._odb = None


def refresh_index(worktree: Path) -> None:
    """Make git's index match HEAD, so ``git status`` in the session is clean."""
    run_git(worktree, "read-tree", "HEAD", check=False)


def maintain(worktree: Path, lock_path: Path, *, wait: bool = True) -> bool:
    """Pack loose objects and refresh the index so ``git status`` is clean again.

    The loose objects are listed by name and packed with ``git pack-objects`` (deltas
    among them), then ``git prune-packed``: O(new objects).  (``git repack -d`` would do the
    same but walks the whole history first: ~0.6 s at 5,000 turns.)  Once there are more
    than ``MAX_PACKS`` packs, ``git repack -d --geometric=2`` merges them, reusing their
    deltas, again without a history walk.  It is still a few subprocesses, so with
    ``wait=False`` it runs in a detached background process and this returns at once; ``lock_path``
    (``flock``-ed by whoever runs the maintenance, inherited by the background process)
    keeps two maintenances from overlapping: a second one without ``wait`` is skipped
    (returns False), with ``wait`` it waits for the first.  Concurrent commits are safe:
    only loose objects that are in a pack are deleted, and readers refresh their view of
    the packs (:meth:`GitWriter._read`).

    A stale ``index.lock`` left by a dead process is removed first: nothing else in a
    session uses the index, so an old lock can only be debris.
    """
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    try:
        lock = worktree / ".git" / "index.lock"
        try:
            if time.time() - lock.stat().st_mtime > 60:
                lock.unlink()
        except FileNotFoundError:
            pass
        make_safe(worktree / ".git")
        git = shlex.join(git_argv())
        packs = "$(ls .git/objects/pack | grep -c '[.]pack$')"
        script = (
            # the loose objects, by name: packing them costs O(new objects), no history walk
            "objs=$(find .git/objects/?? -type f 2>/dev/null"
            " | sed -nE 's#.*/([0-9a-f]{2})/([0-9a-f]{38})$#\\1\\2#p'); "
            'if [ -n "$objs" ]; then printf "%s\\n" "$objs"'
            f" | {git} pack-objects -q .git/objects/pack/pack >/dev/null"
            f" && {git} prune-packed; fi; "
            f'if [ "{packs}" -gt {MAX_PACKS} ]; then '
            f"{git} repack -d -q --geometric=2 || {git} repack -a -d -q; fi; "
            f"{git} read-tree HEAD"
        )
        if not wait:  # detach: the subshell outlives this call and holds the lock
            script = f"({script}) </dev/null >/dev/null 2>&1 &"
        subprocess.run(
            ["sh", "-c", script],
            cwd=worktree,
            env=git_env({"GIT_DIR": str(worktree / ".git"), "GIT_WORK_TREE": str(worktree)}),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(fd,),
            check=False,
        )
    finally:
        os.close(fd)
    return True
