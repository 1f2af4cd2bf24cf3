"""A session's history in git, through GitPython, gitdb and git's own commands.

The one module of the store that writes git: no object, tree, commit, pack, index or
ref format is written here by hand.

* Objects: a blob's and a tree's sha come from gitdb's object header
  (:func:`object_sha`); trees are GitPython's ``tree_to_stream``, commits GitPython's
  ``Commit`` serialisation (both parsed back by GitPython too).
* A commit's new objects are written as one pack and its index by gitdb's
  ``PackEntity.write_pack`` (two files a turn whatever its number of nodes), each written
  to a temporary file and renamed, the index first: git uses a pack only once both
  exist, gitdb lists ``.pack`` files.  An object stored outside a commit (a merge's) is
  a loose object written by gitdb.  Nothing on the write path maps a file into memory.
* Reads go through gitdb's object database (:func:`safegit.object_db`), or many at
  once through ``git cat-file --batch`` (:func:`cat_file_batch`, :meth:`read_paths`);
  the log is ``git log`` (:func:`commit_log`).
* A ref moves by git's lockfile protocol, in-process (:func:`update_ref`): ``<ref>.lock``
  created exclusively, the old value checked under it, renamed over the ref.  The
  session's main line moves only under the session's write lock (SQLite's, :mod:`live`),
  which the kernel releases when its holder dies: a ``main.lock`` found then is a dead
  writer's and is taken over at once.
* Packing is git's: ``git repack -d --geometric=2`` (:func:`repack`), started by a writer
  beside itself every ``REPACK_EVERY`` packs it wrote (at most one at a time, never
  waited for but at close, for ``REPACK_WAIT_S``) and run by the maintenance.

A turn is committed without git's index: only the blobs and the trees on the paths that
changed are written (four small trees under ``history/<bucket>/<turn>/``).
"""

from __future__ import annotations

import hashlib
import io
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openprogram.errors import CorruptedFile, RefChanged, RefLocked
from openprogram.store.session.files import MAX_FILE_BYTES, ensure_dir, read_bytes
from openprogram.store.session.safegit import (
    ACTOR_EMAIL,
    ACTOR_NAME,
    BRANCH,
    check_layout,
    git_command,
    object_db,
    run_git,
)

if TYPE_CHECKING:
    from gitdb.db import GitDB

MAIN_REF = f"refs/heads/{BRANCH}"
BLOB_MODE = 0o100644
TREE_MODE = 0o040000
# parsed trees kept, the least recently used dropped first: a commit reuses ~4 (root,
# history, bucket, turn); a bucket's tree (~100 turns) is ~10 KiB parsed, a new one a commit
TREE_CACHE_MAX = 64
READ_ATTEMPTS = 4  # looks for an object while a repack replaces packs
STALE_LOCK_S = 60.0  # a ref lock older than this was left by a dead process
STRAY_S = 3600.0  # a temporary pack file, or an index without its pack, older: a dead writer's
REPACK_EVERY = 10  # packs a writer writes before it starts a repack beside itself
REPACK_WAIT_S = 2.0  # a repack running at close is waited for this long, then ended

TreeEntries = dict[str, tuple[bytes, int]]  # name -> (binsha, mode)


# -- objects (pure) -------------------------------------------------------------------
def object_sha(kind: bytes, data: bytes) -> bytes:
    """The binary sha git gives an object of ``kind`` (blob, tree…) holding ``data``."""
    from gitdb.fun import loose_object_header

    return hashlib.sha1(loose_object_header(kind, len(data)) + data).digest()


def _git_order(item: tuple[str, tuple[bytes, int]]) -> str:
    """Git's order of tree entries: by name, a folder's as if it ended in ``/``."""
    name, (_sha, mode) = item
    return name + "/" if mode == TREE_MODE else name


def tree_data(entries: TreeEntries) -> bytes:
    """The content of the tree object holding ``entries`` (GitPython's writer)."""
    from git.objects.fun import tree_to_stream

    out = io.BytesIO()
    ordered = sorted(
        entries.items(), key=lambda item: _git_order(item).encode("utf-8", "surrogateescape")
    )
    tree_to_stream([(sha, mode, name) for name, (sha, mode) in ordered], out.write)
    return out.getvalue()


def tree_sha(entries: TreeEntries) -> bytes:
    """The binary sha of the tree holding ``entries``, without writing it."""
    return object_sha(b"tree", tree_data(entries))


def parse_tree(data: bytes) -> TreeEntries:
    """The entries of a tree object (GitPython's reader); a malformed one raises
    ``ValueError``."""
    from git.objects.fun import tree_entries_from_data

    return {name: (sha, mode) for sha, mode, name in tree_entries_from_data(data)}


def commit_data(
    tree: bytes, parents: list[bytes], message: str, when: int, author: str | None = None
) -> bytes:
    """A commit object (UTC, unsigned), GitPython's serialisation: ``author`` (``Name
    <email>``, :mod:`identity`) wrote it, the openprogram actor committed it (the author
    too when none is given)."""
    from git.objects import Commit, Tree
    from git.util import Actor

    actor = Actor(ACTOR_NAME, ACTOR_EMAIL)
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


# -- refs ------------------------------------------------------------------------------
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


def _sha(path: Path, hexsha: bytes) -> bytes:
    try:
        if len(hexsha) == 40:
            return bytes.fromhex(hexsha.decode("ascii"))
    except ValueError:
        pass
    raise CorruptedFile(str(path), f"not an object name: {hexsha[:60]!r}")


def read_ref(git_dir: Path, name: str = MAIN_REF) -> bytes | None:
    """The binary sha ``name`` points to (loose, else ``packed-refs``), or None."""
    loose = git_dir / name
    try:  # never through a symlink, never more than a ref's size
        return _sha(loose, read_bytes(str(loose), 4096)[:41].strip())
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise CorruptedFile(str(loose), str(exc)) from exc
    suffix = b" " + name.encode()
    packed = git_dir / "packed-refs"
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
    git_dir: Path,
    name: str,
    new: bytes,
    expected: bytes | None,
    *,
    wait_s: float = 2.0,
    take_over: bool = False,
) -> None:
    """Point ``name`` at ``new`` if it still points at ``expected`` (None: does not
    exist), under git's lock protocol; raises :class:`RefChanged` otherwise, or
    :class:`RefLocked` if another writer keeps ``<name>.lock`` past ``wait_s``.

    ``take_over``: the caller holds the session's write lock (:mod:`live`), under which
    every writer of the session moves this ref, and which the kernel releases when its
    holder dies: so a ``<name>.lock`` found is a dead writer's and is removed at once, not
    after ``STALE_LOCK_S``."""
    if not name.startswith("refs/") or ".." in name or name.endswith(".lock"):
        raise ValueError(f"not a ref name: {name!r}")
    path = git_dir / name
    lock = f"{path}.lock"
    ensure_dir(git_dir, name.rsplit("/", 1)[0])  # a symlinked refs/heads: replaced
    with interrupts_deferred():  # a Ctrl-C here would leave the lock behind
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                if take_over:  # once: a lock made again is someone else's, waited for
                    take_over = False
                    _unlink(lock)
                    continue
                try:
                    if time.time() - os.stat(lock).st_mtime > STALE_LOCK_S:
                        _unlink(lock)  # left by a process killed while holding it
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
            current = read_ref(git_dir, name)
            if current != expected:
                raise RefChanged(
                    f"{name} is at {current.hex() if current else None}, "
                    f"not {expected.hex() if expected else None}"
                )
            os.replace(lock, path)
        except BaseException:
            _unlink(lock)
            raise


def _unlink(path: str | Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# -- packs -----------------------------------------------------------------------------
def write_pack(objects: Path, items: Mapping[bytes, tuple[bytes, bytes]]) -> None:
    """Write ``items`` (binsha -> (kind, data)) as one pack and its index (gitdb's
    ``write_pack``) into ``objects/pack``, the index renamed into place first."""
    from gitdb import OStream
    from gitdb.pack import PackEntity

    if not items:
        return
    pack, index = io.BytesIO(), io.BytesIO()
    streams = [
        OStream(sha, kind, len(data), io.BytesIO(data)) for sha, (kind, data) in items.items()
    ]
    pack_sha, _ = PackEntity.write_pack(streams, pack.write, index.write, len(streams))
    folder = objects / "pack"
    tag = f"{os.getpid()}_{threading.get_ident()}_{os.urandom(3).hex()}"
    for suffix, content in ((".idx", index.getvalue()), (".pack", pack.getvalue())):
        tmp = folder / f"tmp_{suffix[1:]}_{tag}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        except FileNotFoundError:  # no pack folder yet (a repository made by hand)
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            try:
                view = memoryview(content)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(tmp, folder / f"pack-{pack_sha.hex()}{suffix}")
        except BaseException:
            _unlink(tmp)
            raise


def _remove_strays(folder: Path, older_than_s: float = STRAY_S) -> None:
    """Temporary pack files, and indexes whose pack never came, that a writer killed
    mid-write left (older than ``older_than_s``: no live writer's)."""
    try:
        names = set(os.listdir(folder))
    except FileNotFoundError:
        return
    now = time.time()
    for name in names:
        stray = name.startswith("tmp_") or (
            name.endswith(".idx") and name[:-4] + ".pack" not in names
        )
        try:
            if stray and now - os.lstat(folder / name).st_mtime > older_than_s:
                os.unlink(folder / name)
        except FileNotFoundError:
            pass


def repack(git_dir: Path) -> None:
    """Git's own geometric repack of the repository at ``git_dir`` (a session's ``.git``):
    small packs and loose objects rolled into one, the packs it replaces removed; then
    what a killed writer left in ``objects/pack`` (see :func:`_remove_strays`)."""
    _remove_strays(git_dir / "objects" / "pack")
    run_git(_repo_of(git_dir), "repack", "-d", "-q", "--geometric=2", check=False)


def _repo_of(git_dir: Path) -> Path:
    return git_dir.parent if git_dir.name == ".git" else git_dir


# -- reads through git -----------------------------------------------------------------
def cat_file_batch(
    worktree: Path, names: list[bytes], *, sanitize: bool = True
) -> list[tuple[bytes, bytes, bytes] | None]:
    """The objects ``names`` (hex shas, or ``<rev>:<path>``) of the repository at
    ``worktree``, read by one ``git cat-file --batch``: per name, its (hex sha, type,
    content), or None when git has none by that name — every one None when git cannot
    read the repository (the caller reads one by one).  ``sanitize``: as
    :func:`safegit.run_git`."""
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


@dataclass(frozen=True)
class LogEntry:
    sha: str  # hex
    time: int  # committer time, seconds since the epoch
    summary: str  # the message's first line
    author: str = ""  # the author's name (who ran the turn), as the commit records it
    email: str = ""


def commit_log(worktree: Path) -> list[LogEntry]:
    """Every commit reachable from ``main``, newest first: ``git log``'s own list (a
    shallow clone's stops where its history does; a date git cannot read is 0)."""
    fields = "%x1f".join(("%H", "%ct", "%an", "%ae", "%s"))
    done = run_git(worktree, "log", "-z", f"--format={fields}", MAIN_REF, "--", check=False)
    if done.returncode:  # no commit yet
        return []
    out = []
    for record in done.stdout.split(b"\0"):
        parts = record.decode("utf-8", "replace").split("\x1f")
        if len(parts) == 5:
            sha, when, name, email, summary = parts
            stamp = int(when) if when.isdigit() else 0
            out.append(LogEntry(sha, stamp, summary, name[:200], email[:200]))
    return out


# -- one repository ----------------------------------------------------------------------
def _never() -> bool:
    return False


class Repository:
    """Objects, trees, refs and commits of one session repository (``<worktree>/.git``).

    Thread-safe for readers; writers of a ref serialise through its lock (and the store
    holds the session lock around a commit anyway)."""

    def __init__(self, worktree: Path) -> None:
        self.worktree = worktree
        self.git_dir = worktree / ".git"
        self._odb: GitDB | None = None  # made on first read: importing gitdb takes time
        self._stale = False  # a pack was written since gitdb listed them
        self._refreshing = threading.Lock()
        self._trees: dict[bytes, TreeEntries] = {}
        self._commit_trees: dict[bytes, bytes] = {}  # commit sha -> its root tree
        self._local = threading.local()  # .pending: this thread's commit (sha -> kind, data)
        self._packs = 0  # packs written since the last repack started
        self._repacking: subprocess.Popen[bytes] | None = None
        # whether the calling thread holds the session's write lock (every ref move of the
        # session's main line is made under it): a ref lock found then is a dead writer's
        self.lock_held: Callable[[], bool] = _never

    # -- objects ---------------------------------------------------------------------
    def store(self, kind: bytes, data: bytes) -> bytes:
        """Store one object; returns its binary sha.  Inside a commit it goes into the
        commit's pack, else it is written loose (by gitdb)."""
        pending: dict[bytes, tuple[bytes, bytes]] | None = getattr(self._local, "pending", None)
        if pending is None:
            from gitdb import IStream
            from gitdb.db.loose import LooseObjectDB

            check_layout(self.git_dir)
            loose = LooseObjectDB(str(self.git_dir / "objects"))
            return bytes(loose.store(IStream(kind, len(data), io.BytesIO(data))).binsha)
        binsha = object_sha(kind, data)
        pending[binsha] = (kind, data)
        return binsha

    def _db(self) -> GitDB:
        if self._odb is None:  # never reads objects/info/alternates
            check_layout(self.git_dir)  # nor objects through a symlinked .git
            self._odb, self._stale = object_db(self.git_dir / "objects"), False
        elif self._stale:
            with self._refreshing:
                if self._stale:  # new packs are listed; those a repack removed, dropped
                    self._stale = False
                    self._odb.update_cache()
        return self._odb

    def read(self, binsha: bytes, limit: int | None = None) -> bytes:
        """The content of an object, loose or packed (one over ``limit`` bytes is refused
        with :class:`CorruptedFile` before it is inflated)."""
        pending = getattr(self._local, "pending", None)
        if pending is not None and binsha in pending:  # in this commit, not written yet
            data: bytes | None = pending[binsha][1]
            size = len(pending[binsha][1])
        else:
            for attempt in range(READ_ATTEMPTS):
                try:
                    stream = self._db().stream(binsha)
                    break
                except Exception:
                    # written by another process, or in a pack a repack replaced after gitdb
                    # listed it (gitdb caches which packs exist): look again
                    if attempt == READ_ATTEMPTS - 1:
                        raise
                    self._db().update_cache(force=True)
            data, size = None, stream.size
        if limit is not None and size > limit:
            raise CorruptedFile(binsha.hex(), f"an object of {size} bytes (refused)")
        return bytes(stream.read()) if data is None else data

    def read_tree(self, binsha: bytes | None) -> TreeEntries:
        """The entries of a tree (a copy: callers may change it); empty for None."""
        if binsha is None:
            return {}
        cached = self._trees.pop(binsha, None)
        if cached is None:
            try:
                cached = parse_tree(self.read(binsha))
            except ValueError as exc:
                raise CorruptedFile(binsha.hex(), f"not a tree: {exc}") from None
        self._remember(binsha, cached)  # the most recently used now
        return dict(cached)

    def write_tree(self, entries: TreeEntries) -> bytes:
        """Store the tree of ``entries``; returns its sha."""
        binsha = self.store(b"tree", tree_data(entries))
        self._remember(binsha, dict(entries))
        return binsha

    def _remember(self, binsha: bytes, entries: TreeEntries) -> None:
        self._trees.pop(binsha, None)
        self._trees[binsha] = entries
        if len(self._trees) > TREE_CACHE_MAX:
            del self._trees[next(iter(self._trees))]

    def forget(self) -> None:
        """Drop cached trees and where objects live (after packing, or to free memory)."""
        self._trees.clear()
        self._commit_trees.clear()
        if self._odb is not None:
            self._odb.update_cache(force=True)

    # -- refs ------------------------------------------------------------------------
    def read_ref(self, name: str = MAIN_REF) -> bytes | None:
        return read_ref(self.git_dir, name)

    def update_ref(
        self, name: str, new: bytes, expected: bytes | None, *, wait_s: float = 2.0
    ) -> None:
        """Point ``name`` at ``new`` if it still points at ``expected`` (see
        :func:`update_ref`)."""
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
        ``FileNotFoundError`` when there is none."""
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
        the change (``Name <email>``; the openprogram actor when None)."""
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
        only if it is still there: :class:`RefChanged` otherwise).  The commit's new
        objects are one pack, complete with its index before the ref moves."""
        pending: dict[bytes, tuple[bytes, bytes]] = {}
        self._local.pending = pending
        try:
            tree = self.edit_tree(self.commit_tree_of(parent), files)
            data = commit_data(
                tree, [parent] if parent else [], message, when or int(time.time()), author
            )
            binsha = self.store(b"commit", data)
        finally:
            self._local.pending = None
        write_pack(self.git_dir / "objects", pending)
        self._stale = True
        self._commit_trees[binsha] = tree
        self.update_ref(ref, binsha, parent)
        self._packs += 1
        if self._packs >= REPACK_EVERY:
            self._start_repack()
        return binsha

    def edit_tree(self, tree: bytes | None, files: Mapping[str, bytes | None]) -> bytes:
        """The tree ``tree`` with ``files`` (path -> content; None deletes) written in; only
        the trees on the way to a changed file are rewritten."""
        nested: dict[str, Any] = {}
        for path, content in files.items():
            node = nested
            parts = path.split("/")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = content
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

    # -- packing beside the writer -----------------------------------------------------
    def _start_repack(self) -> None:
        """Start git's repack in a child unless one runs; the writer never waits for it."""
        if self._repacking is not None and self._repacking.poll() is None:
            return
        self._packs = 0
        _remove_strays(self.git_dir / "objects" / "pack")
        argv, env = git_command(self.worktree, "repack", "-d", "-q", "--geometric=2")
        try:
            self._repacking = subprocess.Popen(
                argv, cwd=self.worktree, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        except OSError:  # no process now: the next pack asks again, the maintenance repacks
            self._repacking = None

    def wait_for_repack(self, timeout: float | None = None) -> None:
        """Return once the repack this object started has ended (past ``timeout`` seconds
        it is ended: git removes its own temporary files)."""
        child, self._repacking = self._repacking, None
        if child is None:
            return
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.terminate()
            child.wait()
        self._stale = True

    def close(self) -> None:
        self.wait_for_repack(REPACK_WAIT_S)
        self._odb = None
        self._trees.clear()
        self._commit_trees.clear()
