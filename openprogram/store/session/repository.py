"""A session's git repository, in-process: objects, trees, commits, refs and packing.

The only module of the store that knows git's formats.  Objects are written loose
(``zlib`` of ``<kind> <size>\\0<data>``, named by their SHA-1, as git writes them) and
read through gitdb's public ``stream()`` (loose or packed); trees and commits are git's
documented object formats; a ref moves by compare-and-swap under git's own lock protocol
(``<ref>.lock`` created exclusively, the old value checked under it, renamed over the ref),
so ``git`` itself and other processes see a ref either before or after, never torn.
Every git subprocess runs through :func:`safegit.run_git`.

A turn is committed without git's index (which costs O(tracked files) per commit): only
the blobs and the trees on the paths that changed are written, so with the history sharded
``history/<bucket>/<turn>/`` a commit writes four small trees whatever the session's size.
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from openprogram.errors import CorruptedFile, OpenProgramError
from openprogram.store.session.files import MAX_FILE_BYTES, ensure_dir, read_bytes
from openprogram.store.session.safegit import (
    ACTOR_EMAIL,
    ACTOR_NAME,
    BRANCH,
    check_layout,
    object_db,
    run_git,
)

if TYPE_CHECKING:
    from gitdb.db import GitDB

BLOB_MODE = 0o100644
TREE_MODE = 0o040000
MAIN_REF = f"refs/heads/{BRANCH}"
MAX_PACKS = 20  # more packs than this and packing merges them (geometric repack)
STALE_LOCK_S = 60.0  # a ref lock older than this was left by a dead process
TREE_CACHE_MAX = 256  # parsed trees kept (bounded memory; a commit reuses ~4)

TreeEntries = dict[str, tuple[bytes, int]]  # name -> (binsha, mode)


class RefChanged(OpenProgramError, RuntimeError):
    """A compare-and-swap of a ref failed: it no longer points where the caller read it."""


class RefLocked(OpenProgramError, RuntimeError):
    """Another writer holds ``<ref>.lock`` (and kept it past the wait)."""


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Run the block with Ctrl-C held back until it ends (then delivered as usual), so a
    lock taken in it is always released.  Only the main thread gets KeyboardInterrupt, so
    elsewhere (or where Python does not own SIGINT) the block just runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:
        yield
        return
    signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            signal.raise_signal(signal.SIGINT)


# -- object formats (pure) ------------------------------------------------------------
def object_sha(kind: bytes, data: bytes) -> bytes:
    """The binary sha git gives an object of ``kind`` (blob, tree…) holding ``data``."""
    return hashlib.sha1(b"%s %d\0" % (kind, len(data)) + data).digest()


def parse_tree(data: bytes) -> TreeEntries:
    """The entries of a git tree object (``<mode> <name>\\0<20-byte sha>`` each)."""
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
    """The content of the tree object holding ``entries`` (``ordered``: already in git's
    order, as :func:`parse_tree` returns them).  Git orders entries by name, comparing a
    folder as if its name ended in ``/``."""
    items = entries.items()
    if not ordered:

        def key(item: tuple[str, tuple[bytes, int]]) -> bytes:
            name, (_sha, mode) = item
            return (name + "/" if mode == TREE_MODE else name).encode("utf-8", "surrogateescape")

        items = sorted(items, key=key)  # type: ignore[assignment]
    return b"".join(
        b"%o %s\0%s" % (mode, name.encode("utf-8", "surrogateescape"), sha)
        for name, (sha, mode) in items
    )


def tree_sha(entries: TreeEntries, *, ordered: bool = False) -> bytes:
    """The binary sha of the tree holding ``entries``, without writing it."""
    return object_sha(b"tree", tree_data(entries, ordered=ordered))


def commit_data(tree: bytes, parents: list[bytes], message: str, when: int) -> bytes:
    """A commit object by the openprogram actor (UTC, unsigned), as ``git commit-tree``."""
    actor = f"{ACTOR_NAME} <{ACTOR_EMAIL}> {when} +0000"
    lines = [f"tree {tree.hex()}", *(f"parent {p.hex()}" for p in parents)]
    lines += [f"author {actor}", f"committer {actor}", "", message]
    return "\n".join(lines).encode("utf-8", "surrogateescape")


def _sha(path: Path, hexsha: bytes) -> bytes:
    try:
        if len(hexsha) == 40:
            return bytes.fromhex(hexsha.decode("ascii"))
    except ValueError:
        pass
    raise CorruptedFile(str(path), f"not an object name: {hexsha[:60]!r}")


def commit_tree(data: bytes) -> bytes:
    """The root tree sha named by a commit object."""
    first = data.split(b"\n", 1)[0]
    if not first.startswith(b"tree "):
        raise ValueError("not a commit object")
    return bytes.fromhex(first[5:].decode())


class Repository:
    """Objects, trees, refs and commits of one session repository (``<worktree>/.git``).

    Thread-safe for readers; writers of a ref serialise through its lock (and the store
    holds the session lock around a commit anyway)."""

    def __init__(self, worktree: Path) -> None:
        self.worktree = worktree
        self.git_dir = worktree / ".git"
        self._objects = str(self.git_dir / "objects")
        self._odb: GitDB | None = None  # made on first read: importing gitdb takes time
        self._trees: dict[bytes, TreeEntries] = {}
        self._commit_trees: dict[bytes, bytes] = {}  # commit sha -> its root tree

    # -- objects ---------------------------------------------------------------------
    def store(self, kind: bytes, data: bytes) -> bytes:
        """Write one loose object; returns its binary sha.  (A background ``prune-packed``
        may remove an empty fan-out folder between making it and the rename: retried.)"""
        header = b"%s %d\0" % (kind, len(data))
        digest = hashlib.sha1(header)
        digest.update(data)
        binsha, hexsha = digest.digest(), digest.hexdigest()
        target = f"{self._objects}/{hexsha[:2]}/{hexsha[2:]}"
        if os.path.exists(target):
            return binsha
        tmp = f"{self._objects}/tmp_obj_{os.getpid()}_{threading.get_ident()}_{os.urandom(3).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            os.write(fd, zlib.compress(header + data, 1))
        finally:
            os.close(fd)
        for attempt in range(20):
            try:
                os.rename(tmp, target)
                break
            except FileNotFoundError:
                if attempt == 19:
                    os.unlink(tmp)
                    raise
                os.makedirs(f"{self._objects}/{hexsha[:2]}", exist_ok=True)
        return binsha

    @property
    def odb(self) -> GitDB:
        if self._odb is None:  # never reads objects/info/alternates
            check_layout(self.git_dir)  # nor objects through a symlinked .git
            self._odb = object_db(self.git_dir / "objects")
        return self._odb

    def read(self, binsha: bytes, limit: int | None = None) -> bytes:
        """The content of an object, loose or packed (one over ``limit`` bytes is refused
        with :class:`CorruptedFile` before it is inflated)."""
        try:
            stream = self.odb.stream(binsha)
        except Exception:
            # packed since (by maintenance) or written by another process: gitdb caches
            # which packs exist and where objects live, so look again
            self.odb.update_cache(force=True)
            stream = self.odb.stream(binsha)
        if limit is not None and stream.size > limit:
            raise CorruptedFile(binsha.hex(), f"an object of {stream.size} bytes (refused)")
        return bytes(stream.read())

    def read_tree(self, binsha: bytes | None) -> TreeEntries:
        """The entries of a tree (a copy: callers may change it); empty for None."""
        if binsha is None:
            return {}
        cached = self._trees.get(binsha)
        if cached is None:
            cached = parse_tree(self.read(binsha))
            self._remember(binsha, cached)
        return dict(cached)

    def write_tree(self, entries: TreeEntries) -> bytes:
        binsha = self.store(b"tree", tree_data(entries))
        self._remember(binsha, dict(entries))
        return binsha

    def _remember(self, binsha: bytes, entries: TreeEntries) -> None:
        if len(self._trees) >= TREE_CACHE_MAX:
            self._trees.clear()
        self._trees[binsha] = entries

    def forget(self) -> None:
        """Drop cached trees and where objects live (after packing, or to free memory)."""
        self._trees.clear()
        self._commit_trees.clear()
        if self._odb is not None:
            self._odb.update_cache(force=True)

    # -- refs ------------------------------------------------------------------------
    def read_ref(self, name: str = MAIN_REF) -> bytes | None:
        """The binary sha ``name`` points to (loose, else ``packed-refs``), or None."""
        loose = self.git_dir / name
        try:  # never through a symlink, never more than a ref's size
            return _sha(loose, read_bytes(str(loose), 4096)[:41].strip())
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise CorruptedFile(str(loose), str(exc)) from exc
        suffix = b" " + name.encode()
        packed = self.git_dir / "packed-refs"
        try:
            for line in read_bytes(str(packed)).splitlines():
                if line.endswith(suffix) and not line.startswith(b"#"):
                    return _sha(packed, line.split(b" ", 1)[0])
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise CorruptedFile(str(packed), str(exc)) from exc
        return None

    def update_ref(
        self, name: str, new: bytes, expected: bytes | None, *, wait_s: float = 2.0
    ) -> None:
        """Point ``name`` at ``new`` if it still points at ``expected`` (None: does not
        exist), under git's lock protocol; raises :class:`RefChanged` otherwise, or
        :class:`RefLocked` if another writer keeps ``<name>.lock`` past ``wait_s``."""
        if not name.startswith("refs/") or ".." in name or name.endswith(".lock"):
            raise ValueError(f"not a ref name: {name!r}")
        path = self.git_dir / name
        lock = f"{path}.lock"
        ensure_dir(self.git_dir, name.rsplit("/", 1)[0])  # a symlinked refs/heads: replaced
        with interrupts_deferred():  # a Ctrl-C here would leave the lock behind
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                    break
                except FileExistsError:
                    try:
                        if time.time() - os.stat(lock).st_mtime > STALE_LOCK_S:
                            os.unlink(lock)  # left by a process killed while holding it
                            continue
                    except FileNotFoundError:
                        continue
                    if time.monotonic() > deadline:
                        raise RefLocked(f"{lock} is held by another writer") from None
                    time.sleep(0.005)
            try:
                try:
                    os.write(fd, new.hex().encode() + b"\n")
                finally:
                    os.close(fd)
                current = self.read_ref(name)
                if current != expected:
                    raise RefChanged(
                        f"{name} is at {current.hex() if current else None}, "
                        f"not {expected.hex() if expected else None}"
                    )
                os.rename(lock, path)
            except BaseException:
                try:
                    os.unlink(lock)
                except FileNotFoundError:
                    pass
                raise

    # -- commits ---------------------------------------------------------------------
    def commit_tree_of(self, commit: bytes | None) -> bytes | None:
        if commit is None:
            return None
        tree = self._commit_trees.get(commit)
        if tree is None:
            tree = commit_tree(self.read(commit))
            if len(self._commit_trees) >= TREE_CACHE_MAX:
                self._commit_trees.clear()
            self._commit_trees[commit] = tree
        return tree

    def head_tree(self, ref: str = MAIN_REF) -> TreeEntries:
        """The root tree of ``ref`` (empty when it does not exist)."""
        return self.read_tree(self.commit_tree_of(self.read_ref(ref)))

    def tree_at(self, path: str, ref: str = MAIN_REF) -> TreeEntries:
        """The tree at ``path`` (``a/b``) in ``ref``'s root tree; empty if there is none."""
        entries = self.head_tree(ref)
        for part in path.split("/"):
            found = entries.get(part)
            if found is None or found[1] != TREE_MODE:
                return {}
            entries = self.read_tree(found[0])
        return entries

    def blob_at(self, path: str, ref: str = MAIN_REF) -> bytes:
        """The content of the file ``path`` (``a/b/c.json``) in ``ref``; raises
        ``FileNotFoundError`` when there is none (a file left out of the working tree is
        read this way)."""
        folder, _, name = path.rpartition("/")
        found = (self.tree_at(folder, ref) if folder else self.head_tree(ref)).get(name)
        if found is None or found[1] == TREE_MODE:
            raise FileNotFoundError(f"{path} is not a file in {ref}")
        return self.read(found[0], MAX_FILE_BYTES)

    def commit(
        self,
        files: Mapping[str, bytes | None],
        message: str,
        *,
        ref: str = MAIN_REF,
        when: int | None = None,
    ) -> bytes:
        """Commit ``files`` (path -> content; None deletes) on top of ``ref`` and move it
        there by compare-and-swap; returns the commit's binary sha."""
        parent = self.read_ref(ref)
        binsha = self.make_commit(files, message, parent, when=when)
        self.update_ref(ref, binsha, parent)
        return binsha

    def make_commit(
        self,
        files: Mapping[str, bytes | None],
        message: str,
        parent: bytes | None,
        *,
        when: int | None = None,
    ) -> bytes:
        """Write the trees and the commit of ``files`` on top of ``parent`` without moving
        any ref (:meth:`update_ref` does, or the commit is left unreferenced)."""
        nested: dict[str, object] = {}
        for path, content in files.items():
            node = nested
            parts = path.split("/")
            for part in parts[:-1]:
                node = node.setdefault(part, {})  # type: ignore[assignment]
            node[parts[-1]] = content
        tree = self._merge(self.read_tree(self.commit_tree_of(parent)), nested)
        data = commit_data(tree, [parent] if parent else [], message, when or int(time.time()))
        binsha = self.store(b"commit", data)
        self._commit_trees[binsha] = tree
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
                entries[name] = (self.store(b"blob", change), BLOB_MODE)
        return self.write_tree(entries)

    def read_paths(self, paths: list[str], ref: str = MAIN_REF) -> dict[str, bytes]:
        """The contents of many files of ``ref`` at once, inflated by git rather than Python:
        one ``git ls-tree -r -l`` of the folders they are in (each tree read once), one
        ``git cat-file --batch`` of their blobs.  Paths that are not files there, or hold
        more than ``MAX_FILE_BYTES``, are left out (:meth:`blob_at` says why)."""
        commit = self.read_ref(ref)
        if commit is None or not paths:
            return {}
        # the folders two levels up (history/<bucket>), or the whole tree
        folders = {path.rsplit("/", 2)[0] if path.count("/") >= 2 else "" for path in paths}
        specs = [] if "" in folders else sorted(folders)
        listed = run_git(
            self.worktree, "ls-tree", "-r", "-l", "-z", "--full-tree", commit.hex(), "--",
            *specs, check=False,
        )  # fmt: skip
        if listed.returncode:  # a repository git cannot read: the caller reads one by one
            return {}
        blobs: dict[str, bytes] = {}  # path -> hex sha, "<mode> blob <sha> <size>\t<path>"
        for item in listed.stdout.split(b"\0"):
            info, _, name = item.partition(b"\t")
            parts = info.split()
            if len(parts) == 4 and parts[1] == b"blob" and int(parts[3]) <= MAX_FILE_BYTES:
                blobs[name.decode("utf-8", "surrogateescape")] = parts[2]
        wanted = [(path, blobs[path]) for path in paths if path in blobs]
        fetched = run_git(
            self.worktree, "cat-file", "--batch", input=b"\n".join(sha for _p, sha in wanted),
            check=False,
        )  # fmt: skip
        if fetched.returncode:
            return {}
        data = fetched.stdout
        out: dict[str, bytes] = {}
        pos = 0
        for path, _sha in wanted:
            eol = data.index(b"\n", pos)
            size = int(data[pos:eol].rsplit(b" ", 1)[-1])
            out[path] = data[eol + 1 : eol + 1 + size]
            pos = eol + 2 + size
        return out

    def close(self) -> None:
        self._odb = None
        self._trees.clear()
        self._commit_trees.clear()


# -- packing (run by the detached maintenance, never on a commit's path) --------------
def loose_objects(git_dir: Path) -> list[str]:
    """The hex names of the loose objects."""
    names = []
    objects = git_dir / "objects"
    for fan in os.scandir(objects):
        if len(fan.name) == 2 and fan.is_dir():
            names += [fan.name + o.name for o in os.scandir(fan.path) if len(o.name) == 38]
    return names


def pack_loose(worktree: Path) -> int:
    """Pack the loose objects (by name: O(new objects), no history walk) and delete the
    packed loose copies; past ``MAX_PACKS`` packs, merge them geometrically (reusing their
    deltas, again without a walk).  Returns how many objects were packed.  Concurrent
    commits are safe: only loose objects that are in a pack are deleted."""
    git_dir = worktree / ".git"
    names = loose_objects(git_dir)
    if names:
        stdin = ("\n".join(names) + "\n").encode()
        run_git(worktree, "pack-objects", "-q", str(git_dir / "objects" / "pack" / "pack"),
                input=stdin)  # fmt: skip
        run_git(worktree, "prune-packed")
    packs = [p for p in os.listdir(git_dir / "objects" / "pack") if p.endswith(".pack")]
    geometric = ("repack", "-d", "-q", "--geometric=2")
    if len(packs) > MAX_PACKS and run_git(worktree, *geometric, check=False).returncode:
        run_git(worktree, "repack", "-a", "-d", "-q")
    return len(names)
