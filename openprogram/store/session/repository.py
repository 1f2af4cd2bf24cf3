"""A session's git repository, in-process: objects, trees and commits, over its refs
(:mod:`refs`) and loose objects and packs (:mod:`packing`).

The only part of the store that knows git's formats (with :mod:`refs` and :mod:`packing`).
A commit's objects are written as one small pack (:func:`packing.write_pack`) before its
ref moves; an object stored outside a commit is written loose (:func:`packing.write_loose`);
both are read through gitdb's public ``stream()`` (loose or packed); trees and commits
are git's documented object formats; a ref moves by compare-and-swap under git's own
lock protocol (:func:`refs.update_ref`).  Every git subprocess runs through :func:`safegit.run_git`.

A turn is committed without git's index (which costs O(tracked files) per commit): only
the blobs and the trees on the paths that changed are written, so with the history sharded
``history/<bucket>/<turn>/`` a commit writes four small trees whatever the session's size.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from openprogram.errors import CorruptedFile
from openprogram.store.session.files import MAX_FILE_BYTES
from openprogram.store.session.packing import (
    MERGE_FAN,
    MERGE_LEVELS,
    combine_packs,
    write_loose,
    write_pack,
)
from openprogram.store.session.refs import MAIN_REF, read_ref, update_ref
from openprogram.store.session.safegit import (
    ACTOR_EMAIL,
    ACTOR_NAME,
    check_layout,
    object_db,
    run_git,
)

if TYPE_CHECKING:
    from gitdb.db import GitDB

BLOB_MODE = 0o100644
TREE_MODE = 0o040000
# parsed trees kept, the least recently used dropped first: a commit reuses ~4 (root,
# history, bucket, turn); a bucket's tree (~100 turns) is ~10 KiB parsed, a new one a commit
TREE_CACHE_MAX = 64
READ_ATTEMPTS = 4  # looks for an object while writers merge and remove packs
MERGER_IDLE_S = 30.0  # a merging thread with no merge for this long ends (the next starts one)

TreeEntries = dict[str, tuple[bytes, int]]  # name -> (binsha, mode)


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


def _git_order(item: tuple[str, tuple[bytes, int]]) -> bytes:
    """Git's order of tree entries: by name, a folder compared as if it ended in ``/``."""
    name, (_sha, mode) = item
    return (name + "/" if mode == TREE_MODE else name).encode("utf-8", "surrogateescape")


def tree_data(entries: TreeEntries, *, ordered: bool = False) -> bytes:
    """The content of the tree object holding ``entries`` (``ordered``: already in git's
    order, as :func:`parse_tree` returns them).  Git orders entries by name, comparing a
    folder as if its name ended in ``/``."""
    items = entries.items()
    if not ordered:
        items = sorted(items, key=_git_order)  # type: ignore[assignment]
    return b"".join(
        b"%o %s\0%s" % (mode, name.encode("utf-8", "surrogateescape"), sha)
        for name, (sha, mode) in items
    )


def tree_sha(entries: TreeEntries, *, ordered: bool = False) -> bytes:
    """The binary sha of the tree holding ``entries``, without writing it."""
    return object_sha(b"tree", tree_data(entries, ordered=ordered))


def commit_data(
    tree: bytes, parents: list[bytes], message: str, when: int, author: str | None = None
) -> bytes:
    """A commit object (UTC, unsigned), as ``git commit-tree``: ``author`` (``Name
    <email>``, :mod:`identity`) wrote it, the openprogram actor committed it (the author
    too when none is given)."""
    actor = f"{ACTOR_NAME} <{ACTOR_EMAIL}> {when} +0000"
    lines = [f"tree {tree.hex()}", *(f"parent {p.hex()}" for p in parents)]
    by = f"{author} {when} +0000" if author else actor
    lines += [f"author {by}", f"committer {actor}", "", message]
    return "\n".join(lines).encode("utf-8", "surrogateescape")


def commit_tree(data: bytes) -> bytes:
    """The root tree sha named by a commit object."""
    first = data.split(b"\n", 1)[0]
    if not first.startswith(b"tree "):
        raise ValueError("not a commit object")
    return bytes.fromhex(first[5:].decode())


def cat_file_batch(
    worktree: Path, names: list[bytes], *, sanitize: bool = True
) -> list[tuple[bytes, bytes, bytes] | None]:
    """The objects ``names`` (hex shas, or ``<rev>:<path>``) of the repository at
    ``worktree``, read by one ``git cat-file --batch`` (git inflates them and resolves
    packed deltas in C; gitdb does it in Python): per name, its (hex sha, type, content),
    or None when git has none by that name — every one None when git cannot read the
    repository (the caller reads one by one).  ``sanitize``: as :func:`safegit.run_git`."""
    out: list[tuple[bytes, bytes, bytes] | None] = [None] * len(names)
    if not names:
        return out
    done = run_git(
        worktree, "cat-file", "--batch", input=b"".join(n + b"\n" for n in names),
        check=False, sanitize=sanitize,
    )  # fmt: skip
    if done.returncode:
        return out
    data, pos = done.stdout, 0
    for i in range(len(names)):  # "<sha> <type> <size>\n<content>\n", or "<name> missing\n"
        eol = data.find(b"\n", pos)
        if eol < 0:
            break
        header = data[pos:eol].split(b" ")
        pos = eol + 1
        if len(header) == 3 and header[2].isdigit() and len(header[0]) == 40:
            size = int(header[2])
            out[i] = (header[0], header[1], data[pos : pos + size])
            pos += size + 1
    return out


def _never() -> bool:
    return False


class Repository:
    """Objects, trees, refs and commits of one session repository (``<worktree>/.git``).

    Thread-safe for readers; writers of a ref serialise through its lock (and the store
    holds the session lock around a commit anyway)."""

    def __init__(self, worktree: Path) -> None:
        self.worktree = worktree
        self.git_dir = worktree / ".git"
        self._objects = str(self.git_dir / "objects")
        self._odb: GitDB | None = None  # made on first read: importing gitdb takes time
        # packs were written or removed since gitdb listed them: the next read lists them again
        # (a turn that reads nothing back pays no listing: its trees are cached)
        self._stale = False
        self._refreshing = threading.Lock()
        self._trees: dict[bytes, TreeEntries] = {}
        self._tree_bytes: dict[bytes, bytes] = {}  # the content of trees in _trees (most)
        self._commit_trees: dict[bytes, bytes] = {}  # commit sha -> its root tree
        self._local = threading.local()  # .pending: this thread's batch (sha -> kind, data)
        self._ahead: Mapping[bytes, bytes] = {}  # sha -> content read ahead (reading_ahead)
        # the packs this object's batches wrote, by merge level (see :meth:`merge_own_packs`)
        self._own: list[list[str]] = [[] for _ in range(MERGE_LEVELS)]
        self._own_lock = threading.Lock()  # held for a list's change only
        self._own_full = threading.Condition(self._own_lock)  # level 0 full, a merge ended…
        self._merging = threading.Lock()  # held while a merge runs
        self._merger: threading.Thread | None = None  # the thread merging them
        self._stopping = False
        self._busy = False  # the thread is merging (or about to)
        # whether the calling thread holds the session's write lock (every ref move of the
        # session's main line is made under it): a ref lock found then is a dead writer's
        self.lock_held: Callable[[], bool] = _never

    # -- objects ---------------------------------------------------------------------
    def store(self, kind: bytes, data: bytes) -> bytes:
        """Store one object; returns its binary sha.  Inside :meth:`batch` it is kept for
        the batch's pack, else written loose (:func:`packing.write_loose`)."""
        pending: dict[bytes, tuple[bytes, bytes]] | None = getattr(self._local, "pending", None)
        if pending is None:
            return write_loose(self._objects, kind, data)
        binsha = object_sha(kind, data)
        pending[binsha] = (kind, data)
        return binsha

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Objects stored by this thread in the block are written as one pack when it ends
        (nothing when it raises); nested blocks join the outer one."""
        if getattr(self._local, "pending", None) is not None:
            yield
            return
        pending: dict[bytes, tuple[bytes, bytes]] = {}
        self._local.pending = pending
        try:
            yield
        finally:
            self._local.pending = None
        name = write_pack(self._objects, ((sha, k, data) for sha, (k, data) in pending.items()))
        self._stale = True
        if name is not None:
            with self._own_lock:
                self._own[0].append(name)

    def merge_own_packs(self, *, wait: bool = False) -> None:
        """Merge the packs this object wrote ``MERGE_FAN`` at a time, level by level
        (:func:`packing.combine_packs`: a copy of their bytes, no git process), so a writer
        that commits for hours keeps a bounded number of packs between maintenances (each
        pack is one more place every object lookup tries).  In a thread of this object's,
        started at the first full level and woken at the next: the commit that fills a
        level neither merges nor waits for a thread to start (a new thread a merge made
        the commit wait until that thread ran: milliseconds on a busy machine, every eighth
        turn).  ``wait``: here, after a running one."""
        if wait:
            with self._merging:
                self._merge_levels()
            return
        with self._own_lock:
            if len(self._own[0]) < MERGE_FAN:
                return
            if self._merger is None:
                merger = threading.Thread(target=self._merge_loop, name="op-pack-merge")
                merger.daemon = True  # (a merge cut short is a crash it survives: see packing)
                try:
                    merger.start()
                except RuntimeError:  # no new thread now (the interpreter exiting)
                    return
                self._merger = merger
            self._own_full.notify_all()

    def wait_for_merge(self) -> None:
        """Return once no merge of this object's packs is running or about to run."""
        with self._own_lock:
            while self._busy or (
                self._merger is not None and not self._stopping and len(self._own[0]) >= MERGE_FAN
            ):
                self._own_full.wait()

    def _merge_loop(self) -> None:
        while True:
            with self._own_lock:
                while len(self._own[0]) < MERGE_FAN and not self._stopping:
                    idle = not self._own_full.wait(MERGER_IDLE_S)
                    if idle and not self._stopping and len(self._own[0]) < MERGE_FAN:
                        self._merger = None  # a repository left open (never closed) keeps
                        return  # no thread: the next full level starts one
                if self._stopping:
                    return
                self._busy = True
            try:
                with self._merging:
                    self._merge_levels()
            except (OSError, ValueError):
                pass  # left as they are: the maintenance merges them
            finally:
                with self._own_lock:
                    self._busy = False
                    self._own_full.notify_all()

    def _stop_merging(self) -> None:
        """End the merging thread (after the merge it runs); a later commit starts one."""
        with self._own_lock:
            merger, self._stopping = self._merger, True
            self._own_full.notify_all()
        if merger is not None and merger is not threading.current_thread():
            merger.join()
        with self._own_lock:
            self._merger, self._stopping = None, False

    def _merge_levels(self) -> None:
        """Each full level merged into one pack of the next (the caller holds _merging)."""
        for level in range(MERGE_LEVELS):
            with self._own_lock:
                names = self._own[level]
                if len(names) < MERGE_FAN:
                    return
                self._own[level] = []
            made = combine_packs(self._objects, names)
            if made is None:
                return
            self._stale = True
            if level + 1 < MERGE_LEVELS:
                with self._own_lock:
                    self._own[level + 1].append(made)

    @property
    def odb(self) -> GitDB:
        if self._odb is None:  # never reads objects/info/alternates
            check_layout(self.git_dir)  # nor objects through a symlinked .git
            self._odb, self._stale = object_db(self.git_dir / "objects"), False
        elif self._stale:
            with self._refreshing:
                if self._stale:  # new packs are listed; those a maintenance removed, unmapped
                    self._stale = False
                    self._odb.update_cache()
        return self._odb

    def read(self, binsha: bytes, limit: int | None = None) -> bytes:
        """The content of an object, loose or packed (one over ``limit`` bytes is refused
        with :class:`CorruptedFile` before it is inflated)."""
        pending = getattr(self._local, "pending", None)
        if pending is not None and binsha in pending:  # stored in this batch, not written yet
            data = pending[binsha][1]
            if limit is not None and len(data) > limit:
                raise CorruptedFile(binsha.hex(), f"an object of {len(data)} bytes (refused)")
            return data
        ahead = self._ahead.get(binsha)
        if ahead is not None:
            if limit is not None and len(ahead) > limit:
                raise CorruptedFile(binsha.hex(), f"an object of {len(ahead)} bytes (refused)")
            return ahead
        for attempt in range(READ_ATTEMPTS):
            try:
                stream = self.odb.stream(binsha)
                break
            except Exception:
                # packed since or written by another process (gitdb caches which packs
                # exist and where objects live), or in a pack another writer merged and
                # removed after gitdb listed it (its objects are in the merged pack): look
                # again
                if attempt == READ_ATTEMPTS - 1:
                    raise
                self.odb.update_cache(force=True)
        if limit is not None and stream.size > limit:
            raise CorruptedFile(binsha.hex(), f"an object of {stream.size} bytes (refused)")
        return bytes(stream.read())

    @contextmanager
    def reading_ahead(self, objects: Mapping[bytes, bytes]) -> Iterator[None]:
        """Inside the block, :meth:`read` returns the objects of ``objects`` (binary sha ->
        content, read already: what a pull received, by :func:`cat_file_batch`) without
        looking them up; nothing is kept after it."""
        self._ahead = objects
        try:
            yield
        finally:
            self._ahead = {}

    def read_tree(self, binsha: bytes | None) -> TreeEntries:
        """The entries of a tree (a copy: callers may change it); empty for None."""
        if binsha is None:
            return {}
        cached = self._trees.get(binsha)
        data = None
        if cached is None:
            data = self.read(binsha)
            cached = parse_tree(data)
        self._remember(binsha, cached, data)  # the most recently used now
        return dict(cached)

    def write_tree(
        self, entries: TreeEntries, *, ordered: bool = False, data: bytes | None = None
    ) -> bytes:
        """Store the tree of ``entries`` (``ordered``: already in git's order; ``data``: its
        content, made already)."""
        if not ordered:  # remembered in git's order too: a later edit keeps it
            entries = dict(sorted(entries.items(), key=_git_order))
        if data is None:
            data = tree_data(entries, ordered=True)
        binsha = self.store(b"tree", data)
        self._remember(binsha, dict(entries), data)
        return binsha

    def _remember(self, binsha: bytes, entries: TreeEntries, data: bytes | None = None) -> None:
        trees = self._trees
        trees.pop(binsha, None)
        trees[binsha] = entries
        if data is not None:
            self._tree_bytes[binsha] = data
        if len(trees) > TREE_CACHE_MAX:
            dropped = next(iter(trees))
            del trees[dropped]
            self._tree_bytes.pop(dropped, None)

    def forget(self) -> None:
        """Drop cached trees and where objects live (after packing, or to free memory)."""
        self._trees.clear()
        self._tree_bytes.clear()
        self._commit_trees.clear()
        if self._odb is not None:
            self._odb.update_cache(force=True)

    # -- refs ------------------------------------------------------------------------
    def read_ref(self, name: str = MAIN_REF) -> bytes | None:
        """The binary sha ``name`` points to (loose, else ``packed-refs``), or None."""
        return read_ref(self.git_dir, name)

    def update_ref(
        self, name: str, new: bytes, expected: bytes | None, *, wait_s: float = 2.0
    ) -> None:
        """Point ``name`` at ``new`` if it still points at ``expected`` (see
        :func:`refs.update_ref`)."""
        update_ref(self.git_dir, name, new, expected, wait_s=wait_s, take_over=self.lock_held())

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

    def tree_at(
        self, path: str, ref: str = MAIN_REF, *, commit: bytes | None = None
    ) -> TreeEntries:
        """The tree at ``path`` (``a/b``) in ``ref``'s root tree (``commit``'s when given);
        empty if there is none."""
        entries = self.read_tree(self.commit_tree_of(commit or self.read_ref(ref)))
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
        author: str | None = None,
    ) -> bytes:
        """Commit ``files`` (path -> content; None deletes) on top of ``ref`` and move it
        there by compare-and-swap; returns the commit's binary sha.  ``author``: who made
        the change (``Name <email>``; the openprogram actor when None).  Its new objects
        are one pack, complete with its index before the ref moves."""
        return self.commit_on(self.read_ref(ref), files, message, ref=ref, when=when, author=author)

    def commit_on(
        self,
        parent: bytes | None,
        files: Mapping[str, bytes | None],
        message: str,
        *,
        ref: str = MAIN_REF,
        when: int | None = None,
        author: str | None = None,
    ) -> bytes:
        """:meth:`commit` on ``parent``, which the caller read from ``ref`` (the ref moves
        only if it is still there: :class:`RefChanged` otherwise)."""
        with self.batch():
            binsha = self.make_commit(files, message, parent, when=when, author=author)
        self.update_ref(ref, binsha, parent)
        return binsha

    def make_commit(
        self,
        files: Mapping[str, bytes | None],
        message: str,
        parent: bytes | None,
        *,
        when: int | None = None,
        author: str | None = None,
    ) -> bytes:
        """Write the trees and the commit of ``files`` on top of ``parent`` without moving
        any ref (:meth:`update_ref` does, or the commit is left unreferenced)."""
        tree = self.edit_tree(self.commit_tree_of(parent), files)
        parents = [parent] if parent else []
        data = commit_data(tree, parents, message, when or int(time.time()), author)
        binsha = self.store(b"commit", data)
        self._commit_trees[binsha] = tree
        return binsha

    def edit_tree(self, tree: bytes | None, files: Mapping[str, bytes | None]) -> bytes:
        """The tree ``tree`` with ``files`` (path -> content; None deletes) written in; only
        the trees on the way to a changed file are rewritten."""
        nested: dict[str, object] = {}
        for path, content in files.items():
            node = nested
            parts = path.split("/")
            for part in parts[:-1]:
                node = node.setdefault(part, {})  # type: ignore[assignment]
            node[parts[-1]] = content
        return self._merge(tree, nested)

    def _merge(self, base: bytes | None, changes: Mapping[str, object]) -> bytes:
        # entries come in git's order (parse_tree); replacing a name keeps its place, so
        # only a tree that gains a name is sorted again (history/ gains one per bucket)
        entries = self.read_tree(base)
        before = {name: entries.get(name) for name in changes}
        for name, change in changes.items():
            old = before[name]
            if isinstance(change, dict):
                sub = old[0] if old and old[1] == TREE_MODE else None
                entries[name] = (self._merge(sub, change), TREE_MODE)
            elif change is None:
                entries.pop(name, None)
            else:
                assert isinstance(change, bytes)
                entries[name] = (self.store(b"blob", change), BLOB_MODE)
        ordered = all(old is not None for old in before.values())
        data = self._tree_bytes.get(base) if base is not None and ordered else None
        for name, old in before.items():  # the base's bytes with the changed shas replaced:
            new = entries.get(name)  # not every entry formatted again (history/ has one per
            if data is None or old is None or new is None or new[1] != old[1]:  # bucket)
                data = None
                break
            head = b"%o %s\0" % (old[1], name.encode("utf-8", "surrogateescape"))
            at = data.find(head + old[0])  # (an entry's own sha: found where it is)
            if at < 0:
                data = None
                break
            data = b"".join((data[:at], head, new[0], data[at + len(head) + 20 :]))
        return self.write_tree(entries, ordered=ordered, data=data)

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
        fetched = cat_file_batch(self.worktree, [sha for _p, sha in wanted])
        pairs = zip(wanted, fetched, strict=True)
        return {path: got[2] for (path, _sha), got in pairs if got is not None}

    def close(self) -> None:
        self._stop_merging()
        self._odb = None
        self._trees.clear()
        self._tree_bytes.clear()
        self._commit_trees.clear()
