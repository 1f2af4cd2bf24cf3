"""A session's history in git through GitPython, gitdb and git's own commands; no git format
(object, tree, commit, pack, index, ref) is written by hand, here or anywhere else.

A commit's objects (trees by GitPython's ``tree_to_stream``, the commit by its ``Commit``)
are one pack by gitdb's ``write_pack``, its index renamed in first.  Reads: gitdb, ``git
cat-file --batch``, ``git log``.  A ref moves by git's lockfile protocol; a ``main.lock``
found under the session's write lock (:mod:`live`) is a dead writer's, taken over.
Packing: the small packs rolled up by git's ``pack-objects`` (:mod:`rollup`).
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from openprogram.errors import CorruptedFile, RefChanged, RefLocked
from openprogram.store.session import files as fs
from openprogram.store.session import rollup, safegit
from openprogram.store.session.files import MAX_FILE_BYTES, read_bytes
from openprogram.store.session.safegit import check_layout, run_git

MAIN_REF = f"refs/heads/{safegit.BRANCH}"
BLOB_MODE = 0o100644
TREE_MODE = 0o040000
TREE_CACHE_MAX = 64  # parsed trees kept (LRU): a commit reuses ~4 (root, history, bucket, turn)
ENTRY_CACHE_MAX = 4096  # tree entries kept serialised (a tree changed is one entry serialised)
READ_ATTEMPTS = 4  # looks for an object while a repack replaces packs
STALE_LOCK_S = 60.0  # a ref lock older than this was left by a dead process
REPACK_EVERY = 10  # packs a writer writes before it starts a repack beside itself
REPACK_WAIT_S = 2.0  # a repack running at close is waited for this long, then ended
MAPS_KEPT = 64  # files gitdb maps before the writer collects them, between roll-ups

TreeEntries = dict[str, tuple[bytes, int]]  # name -> (binsha, mode)
Files = Mapping[str, bytes | None]  # path -> content (None: deleted)
# parsed trees, commits' root trees, serialised tree entries: content-addressed, so shared
_trees: dict[bytes, TreeEntries] = {}
_commit_trees: dict[bytes, bytes] = {}
_entries: dict[tuple[str, bytes, int], bytes] = {}
_cached = threading.Lock()
V = TypeVar("V")


def _kept(cache: dict[Any, V], key: Any, value: V, limit: int) -> V:
    """``value``, kept in ``cache`` as the most recently used (the least, dropped past
    ``limit``)."""
    with _cached:
        cache.pop(key, None)
        cache[key] = value
        if len(cache) > limit:
            del cache[next(iter(cache))]
    return value


def object_sha(kind: bytes, data: bytes) -> bytes:
    """The binary sha git gives an object of ``kind`` (blob, tree…) holding ``data``."""
    from gitdb.fun import loose_object_header

    return hashlib.sha1(loose_object_header(kind, len(data)) + data).digest()


def _git_order(item: tuple[str, tuple[bytes, int]]) -> bytes:
    """Git's order of tree entries: by name, a folder's as if it ended in ``/``."""
    name, (_sha, mode) = item
    return (name + "/" if mode == TREE_MODE else name).encode("utf-8", "surrogateescape")


def tree_data(entries: TreeEntries) -> bytes:
    """The tree object holding ``entries``, each entry written by ``tree_to_stream`` once
    (~7 µs an entry: a bucket of 100 turns rewritten whole cost ~0.7 ms a commit)."""
    from git.objects.fun import tree_to_stream

    parts = []
    for name, (sha, mode) in sorted(entries.items(), key=_git_order):
        one = _entries.get((name, sha, mode))
        if one is None:
            out = io.BytesIO()
            tree_to_stream([(sha, mode, name)], out.write)
            one = _kept(_entries, (name, sha, mode), out.getvalue(), ENTRY_CACHE_MAX)
        parts.append(one)
    return b"".join(parts)


def parse_tree(data: bytes) -> TreeEntries:
    """The entries of a tree object (GitPython's reader; ``ValueError`` if malformed)."""
    from git.objects.fun import tree_entries_from_data

    return {name: (sha, mode) for sha, mode, name in tree_entries_from_data(data)}


def commit_data(
    tree: bytes, parents: list[bytes], message: str, when: int, author: str | None = None
) -> bytes:
    """A commit object (UTC, unsigned; GitPython's): by ``author`` (``Name <email>``) or the
    openprogram actor, committed by that actor."""
    from git.objects import Commit, Tree
    from git.util import Actor

    actor = Actor(safegit.ACTOR_NAME, safegit.ACTOR_EMAIL)
    by = Actor._from_string(author) if author else actor
    made = Commit(
        None, Commit.NULL_BIN_SHA, Tree(None, tree), by, when, 0, actor, when, 0,  # type: ignore[arg-type]
        message.encode("utf-8", "surrogateescape"), [Commit(None, p) for p in parents], "UTF-8",  # type: ignore[arg-type]
    )  # fmt: skip
    out = io.BytesIO()
    made._serialize(out)
    return out.getvalue()


def commit_tree(data: bytes) -> bytes:
    """The root tree sha a commit object names (GitPython's reader)."""
    from git.objects import Commit

    parsed = Commit(None, Commit.NULL_BIN_SHA)  # type: ignore[arg-type]
    try:
        parsed._deserialize(io.BytesIO(data))
        return bytes(parsed.tree.binsha)
    except Exception as exc:  # whatever a crafted object makes the parser raise
        raise ValueError(f"not a commit object: {exc}") from None


def _sha(path: Path, hexsha: bytes) -> bytes:
    with suppress(ValueError):
        if len(hexsha) == 40:
            return bytes.fromhex(hexsha.decode("ascii"))
    raise CorruptedFile(str(path), f"not an object name: {hexsha[:60]!r}")


def read_ref(git_dir: Path, name: str = MAIN_REF) -> bytes | None:
    """The binary sha ``name`` points to (loose, else ``packed-refs``), or None."""
    loose, packed = git_dir / name, git_dir / "packed-refs"
    try:  # never through a symlink, never more than a ref's size
        with suppress(FileNotFoundError):
            return _sha(loose, read_bytes(str(loose), 4096)[:41].strip())
        with suppress(FileNotFoundError):
            for line in read_bytes(str(packed)).splitlines():
                if line.endswith(b" " + name.encode()) and not line.startswith(b"#"):
                    return _sha(packed, line.split(b" ", 1)[0])
    except OSError as exc:
        raise CorruptedFile(exc.filename or str(loose), str(exc)) from exc
    return None


def update_ref(
    git_dir: Path, name: str, new: bytes, expected: bytes | None, *, wait_s: float = 2.0,
    take_over: bool = False,
) -> None:  # fmt: skip
    """Point ``name`` at ``new`` if it is at ``expected`` (None: absent), else
    :class:`RefChanged`; :class:`RefLocked` if another keeps ``<name>.lock`` past ``wait_s``.
    ``take_over`` (the caller holds the write lock all this ref's writers hold): a lock
    found is a dead writer's, removed at once (not after ``STALE_LOCK_S``)."""
    if not name.startswith("refs/") or ".." in name or name.endswith(".lock"):
        raise ValueError(f"not a ref name: {name!r}")
    path = git_dir / name
    lock = path.with_name(path.name + ".lock")
    fs.ensure_dir(git_dir, name.rsplit("/", 1)[0])  # a symlinked refs/heads: replaced
    with fs.interrupts_deferred():  # a Ctrl-C here would leave the lock behind
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                try:  # once under the write lock: a lock made again is someone else's
                    if take_over or time.time() - os.stat(lock).st_mtime > STALE_LOCK_S:
                        take_over = False
                        lock.unlink(missing_ok=True)
                        continue
                except FileNotFoundError:
                    continue
                if time.monotonic() > deadline:
                    raise RefLocked(f"{lock} is held by another writer") from None
                time.sleep(0.005)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(new.hex().encode() + b"\n")
            current = read_ref(git_dir, name)
            if current != expected:
                raise RefChanged(
                    f"{name} is at {current.hex() if current else None}, "
                    f"not {expected.hex() if expected else None}"
                )
            fs.replace(lock, path)  # (the old ref file freed off this path)
        except BaseException:
            lock.unlink(missing_ok=True)
            raise


def write_pack(objects: Path, items: Mapping[bytes, tuple[bytes, bytes]]) -> None:
    """Write ``items`` (binsha -> (kind, data)) as one pack and its index (gitdb's
    ``write_pack``) into ``objects/pack``, the index renamed into place first."""
    from gitdb import OStream
    from gitdb.pack import PackEntity

    if not items:
        return
    pack, index = io.BytesIO(), io.BytesIO()
    streams = [OStream(s, k, len(d), io.BytesIO(d)) for s, (k, d) in items.items()]
    pack_sha, _ = PackEntity.write_pack(streams, pack.write, index.write, len(streams))
    folder = objects / "pack"
    folder.mkdir(exist_ok=True)  # (a repository made by hand may lack it)
    tag = f"{os.getpid()}_{threading.get_ident()}_{os.urandom(3).hex()}"
    for suffix, content in ((".idx", index.getvalue()), (".pack", pack.getvalue())):
        tmp = os.path.join(folder, f"tmp_{suffix[1:]}_{tag}")  # (str: pathlib interns names)
        try:
            with open(tmp, "xb") as out:
                out.write(content)
            os.replace(tmp, os.path.join(folder, f"pack-{pack_sha.hex()}{suffix}"))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def repack(git_dir: Path) -> None:
    """Roll a session's small packs and loose objects into one (:mod:`rollup`: git's
    ``pack-objects`` fed their objects, the big packs left), and remove a killed writer's
    debris; returns once done."""
    rollup.RollUp(git_dir).wait()  # (another roll-up took the packs first: they stay as they are)
    safegit.free_maps(MAPS_KEPT)


@dataclass(frozen=True)
class LogEntry:
    sha: str  # hex
    time: int  # committer time, seconds since the epoch
    summary: str  # the message's first line
    author: str = ""  # the author's name (who ran the turn), as the commit records it
    email: str = ""


def commit_log(worktree: Path) -> list[LogEntry]:
    """Every commit reachable from ``main``, newest first, as ``git log`` lists them."""
    fields = "%x1f".join(("%H", "%ct", "%an", "%ae", "%s"))
    done = run_git(worktree, "log", "-z", f"--format={fields}", MAIN_REF, "--", check=False)
    out = []
    for record in done.stdout.split(b"\0") if done.returncode == 0 else []:
        parts = record.decode("utf-8", "replace").split("\x1f")
        if len(parts) == 5:
            sha, when, name, email, summary = parts
            stamp = int(when) if when.isdigit() else 0
            out.append(LogEntry(sha, stamp, summary, name[:200], email[:200]))
    return out


class Repository:
    """Objects, trees, refs and commits of one session repository (``<worktree>/.git``)."""

    def __init__(self, worktree: Path) -> None:
        self.worktree = worktree
        self.git_dir = worktree / ".git"
        self._odb: Any = None  # gitdb's database, made at the first read (gitdb loads slowly)
        self._stale = False  # a pack was written since gitdb listed them
        self._refreshing = threading.Lock()
        self._local = threading.local()  # .pending: this thread's commit (sha -> kind, data)
        self._packs = 0  # packs written since the last repack started
        self._repacking: rollup.RollUp | subprocess.Popen[bytes] | None = None  # running beside
        # (a process: a test's and a benchmark's stand-in, kept the same way)
        # whether this thread holds the session's write lock (a ref lock found is a dead one's)
        self.lock_held: Callable[[], bool] = lambda: False

    def store(self, kind: bytes, data: bytes) -> bytes:
        """Store one object (into this thread's commit's pack, else loose); returns its sha."""
        pending: dict[bytes, tuple[bytes, bytes]] | None = getattr(self._local, "pending", None)
        if pending is None:  # loose, by the one gitdb database (its loose objects' writer)
            from gitdb import IStream

            check_layout(self.git_dir)  # (at each write: never through a folder linked since)
            return bytes(self._db().store(IStream(kind, len(data), io.BytesIO(data))).binsha)
        binsha = object_sha(kind, data)
        pending[binsha] = (kind, data)
        return binsha

    def _db(self) -> Any:
        if self._odb is None:  # never reads objects/info/alternates
            check_layout(self.git_dir)  # nor objects through a symlinked .git
            self._odb, self._stale = safegit.object_db(self.git_dir / "objects"), False
        elif self._stale:
            with self._refreshing:
                if self._stale:  # new packs are listed; those a repack removed, dropped
                    self._stale = False
                    self._odb.update_cache()
        return self._odb

    def read(self, binsha: bytes, limit: int | None = None) -> bytes:
        """An object's content (:class:`CorruptedFile` over ``limit`` bytes, before inflating)."""
        data: bytes | None = (getattr(self._local, "pending", None) or {}).get(binsha, (0, None))[1]
        if data is not None:  # in this thread's commit, not written yet
            size = len(data)
        else:
            for attempt in range(READ_ATTEMPTS):
                try:
                    stream = self._db().stream(binsha)
                    break
                except Exception:  # another's, or its pack repacked since gitdb listed them
                    if attempt == READ_ATTEMPTS - 1:
                        raise
                    with suppress(Exception):  # (a pack git is writing or removing now)
                        self._db().update_cache(force=True)
            data, size = None, stream.size
        if limit is not None and size > limit:
            raise CorruptedFile(binsha.hex(), f"an object of {size} bytes (refused)")
        return bytes(stream.read()) if data is None else data

    def read_tree(self, binsha: bytes | None) -> TreeEntries:
        """The entries of a tree (a copy: callers may change it); empty for None."""
        if binsha is None:
            return {}
        cached = _trees.get(binsha)
        if cached is None:
            try:
                cached = parse_tree(self.read(binsha))
            except ValueError as exc:
                raise CorruptedFile(binsha.hex(), f"not a tree: {exc}") from None
        return _kept(_trees, binsha, cached, TREE_CACHE_MAX).copy()

    def write_tree(self, entries: TreeEntries) -> bytes:
        """Store the tree of ``entries``; returns its sha."""
        binsha = self.store(b"tree", tree_data(entries))
        _kept(_trees, binsha, entries.copy(), TREE_CACHE_MAX)
        return binsha

    def forget(self) -> None:
        """List the packs again at the next read (after a repack)."""
        self._stale = self._odb is not None

    def read_ref(self, name: str = MAIN_REF) -> bytes | None:
        return read_ref(self.git_dir, name)

    def update_ref(self, name: str, new: bytes, old: bytes | None, wait_s: float = 2.0) -> None:
        """:func:`update_ref`, a lock found taken over when the caller holds the write lock."""
        update_ref(self.git_dir, name, new, old, wait_s=wait_s, take_over=self.lock_held())

    def commit_tree_of(self, commit: bytes | None) -> bytes | None:
        if commit is None:
            return None
        tree = _commit_trees.get(commit) or commit_tree(self.read(commit))
        return _kept(_commit_trees, commit, tree, TREE_CACHE_MAX)

    def tree_at(self, path: str, ref: str = MAIN_REF) -> TreeEntries:
        """The tree at ``path`` (``""``: the root) of ``ref``; empty if none."""
        return self.subtree(self.commit_tree_of(self.read_ref(ref)), path)

    def subtree(self, tree: bytes | None, path: str) -> TreeEntries:
        """The tree at ``path`` (``""``: ``tree`` itself) under ``tree``; empty if none."""
        entries = self.read_tree(tree)
        for part in filter(None, path.split("/")):
            found = entries.get(part)
            if found is None or found[1] != TREE_MODE:
                return {}
            entries = self.read_tree(found[0])
        return entries

    def blob_at(self, path: str, ref: str = MAIN_REF) -> bytes:
        """The content of the file ``path`` in ``ref`` (``FileNotFoundError``: none there)."""
        folder, _, name = path.rpartition("/")
        found = self.tree_at(folder, ref).get(name)
        if found is None or found[1] == TREE_MODE:
            raise FileNotFoundError(f"{path} is not a file in {ref}")
        return self.read(found[0], MAX_FILE_BYTES)

    def commit(self, files: Files, message: str, **kw: Any) -> bytes:
        """:meth:`commit_on` the commit ``ref`` (a keyword, ``main`` by default) is at."""
        return self.commit_on(self.read_ref(kw.get("ref", MAIN_REF)), files, message, **kw)

    def commit_on(
        self, parent: bytes | None, files: Files, message: str, *, ref: str = MAIN_REF,
        when: int | None = None, author: str | None = None,
    ) -> bytes:  # fmt: skip
        """Commit ``files`` on ``parent`` (read from ``ref``; :class:`RefChanged` if ``ref``
        moved since) by ``author`` (``Name <email>``); its objects one pack before ``ref`` moves."""
        pending: dict[bytes, tuple[bytes, bytes]] = {}
        self._local.pending = pending
        try:
            tree = self.edit_tree(self.commit_tree_of(parent), files)
            parents = [parent] if parent else []
            data = commit_data(tree, parents, message, when or int(time.time()), author)
            binsha = self.store(b"commit", data)
        finally:
            self._local.pending = None
        write_pack(self.git_dir / "objects", pending)  # (listed by gitdb when a read misses:
        _kept(_commit_trees, binsha, tree, TREE_CACHE_MAX)  # a listing at each commit grew)
        self.update_ref(ref, binsha, parent)
        self._packs += 1
        if self._packs >= REPACK_EVERY:
            self._start_repack()
        return binsha

    def edit_tree(self, tree: bytes | None, files: Files) -> bytes:
        """``tree`` with ``files`` written in (only the trees on their paths rewritten)."""
        nested: dict[str, Any] = {}
        for path, content in files.items():
            node = nested
            *folders, name = path.split("/")
            for part in folders:
                node = node.setdefault(part, {})
            node[name] = content
        return self._merge(tree, nested)

    def _merge(self, base: bytes | None, changes: Mapping[str, Any]) -> bytes:
        entries = self.read_tree(base)
        for name, change in changes.items():
            old = entries.get(name)
            if isinstance(change, dict):
                sub = old[0] if old and old[1] == TREE_MODE else None
                entries[name] = (self._merge(sub, change), TREE_MODE)
            elif change is None:
                entries.pop(name, None)
            else:
                entries[name] = (self.store(b"blob", change), BLOB_MODE)
        return self.write_tree(entries)

    def _start_repack(self) -> None:
        """Start the roll-up of the small packs beside the writer unless one runs (a thread
        whose git commands the writer never waits for)."""
        if self._repacking is not None and self._repacking.poll() is None:
            return
        self._packs = 0
        safegit.free_maps(MAPS_KEPT)  # (the last one's maps of the indexes it read: none runs now)
        self._repacking = rollup.RollUp(self.git_dir, done=self.forget)

    def wait_for_repack(self, timeout: float | None = None, *, settle: bool = True) -> None:
        """Return once this object's repack has ended (ended past ``timeout`` s: git cleans
        up) and, ``settle``, one more has rolled up the packs written meanwhile."""
        while True:
            child, self._repacking = self._repacking, None
            if child is not None:
                try:
                    child.wait(timeout)
                except subprocess.TimeoutExpired:
                    child.terminate()
                    child.wait()
                self._stale = True
                safegit.free_maps(MAPS_KEPT)
            if not settle or not self._packs:
                return
            settle = False
            self._start_repack()

    def close(self) -> None:
        self.wait_for_repack(REPACK_WAIT_S, settle=False)
        self._odb = None
