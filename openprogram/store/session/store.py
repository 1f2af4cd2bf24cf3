"""The git-backed session store: one git repository per session.

::

    $OPENPROGRAM_HOME/sessions/<session_id>/
      .git/          one commit per turn
      .gitignore     .state/ and workdir/ are never committed
      meta.json      id, title, agent_id, source, created_at, updated_at, head_id, turns, v
      history/<bucket>/<turn>/<seq>-<role letter>-<id>.json   one file per node
      workdir/       per-session scratch space
      .state/        lock, counters (seq, turn, HEAD), journals, index cache

Writes are cheap (:meth:`Session.append` journals one line); :meth:`Session.commit`
materialises the turn's node files and makes one commit.  A process killed mid-turn
leaves its journal behind; the next :meth:`SessionStore.open` replays it, marks its
``running`` nodes ``interrupted`` and commits that as a recovery.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import shutil
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from openprogram.context import graph
from openprogram.context.nodes import (
    AWAITING,
    INTERRUPTED,
    OPEN_STATUSES,
    UNANSWERED,
    Call,
    NodeFormatError,
    make_call,
)
from openprogram.errors import CorruptedFile, SessionNotFound
from openprogram.store.session import events
from openprogram.store.session.files import (
    Counters,
    Journal,
    SessionLock,
    atomic_write,
    claim_dead_journals,
    dumps,
    loads,
    read_bytes,
    read_journal,
)
from openprogram.store.session.gitrepo import (
    TREE_MODE,
    GitWriter,
    init_repo,
    maintain,
    object_sha,
    refresh_index,
    tree_sha,
)
from openprogram.store.session.ids import validate_session_id
from openprogram.store.session.index import (
    BUCKET_INDEX,
    BUCKET_INDEX_VERSION,
    BUCKET_NAME,
    ENTRY_FIELDS,
    F_CALLER,
    F_KIND,
    F_PATH,
    F_SEQ,
    F_TURN,
    SEALS_PER_MAINTENANCE,
    TURN_DIR_NAME,
    Entry,
    entry_of,
    node_relpath,
    valid_columns,
)
from openprogram.store.session.safegit import make_safe

META_VERSION = 1
MAINTAIN_EVERY = 50  # commits between packing + index refresh
INDEX_VERSION = 4
INDEX_FILE = "index.json"  # JSON, not pickle: a session folder may come from someone else
GITIGNORE = b".state/\nworkdir/\n.*.tmp\n"


class CorruptedFileWarning(UserWarning):
    """A session file could not be read; the rest of the session is still available."""


class Session:
    """One session opened by this process.  Thread-safe; other processes may write too."""

    def __init__(self, session_id: str, path: Path) -> None:
        self.id = session_id
        self.path = path
        self.pid = os.getpid()
        make_safe(path / ".git")  # before anything reads the repository
        state = path / ".state"
        state.mkdir(exist_ok=True)
        (path / "workdir").mkdir(exist_ok=True)
        self._state = state
        self.lock = SessionLock(state / "lock")
        self.counters = Counters(state / "counters")
        self.git = GitWriter(path)
        self.meta: dict[str, Any] = {}
        self.problems: list[str] = []
        self._mu = threading.RLock()
        self._nodes: dict[str, Call] = {}
        self._index: dict[str, Entry] = {}
        self._dir_mtimes: dict[str, int] = {}
        # bucket name -> its tree sha in HEAD when this process found it sealed (or unsealable)
        self._sealed: dict[str, bytes] = {}
        # bucket -> (tree, turn folders) taken from its committed index, folders not stat-ed
        self._unstatted: dict[str, tuple[bytes, set[str]]] = {}
        self._children: dict[str | None, list[str]] | None = None
        self._dirty: dict[str, Call] = {}
        self._open: set[str] = set()
        self._journal: Journal | None = None
        self._meta_changes: dict[str, Any] = {}  # set by this process, kept over disk's
        self._synced_seq = -1  # the shared seq counter when this view was last complete
        with self.lock:
            self._load_meta()
            self._load_index()
            self._ensure_counters()
            self._recover()
            self._synced_seq = self._counters()[0]

    # -- reading -------------------------------------------------------------------------
    def _load_meta(self, *, quiet: bool = False) -> None:
        meta_path = self.path / "meta.json"
        try:
            meta = json.loads(meta_path.read_bytes())
            if not isinstance(meta, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            if quiet and self.meta:  # already reported at open; keep what we have
                return
            self._problem(str(meta_path), str(exc))
            meta = {"id": self.id, "title": self.id, "created_at": time.time()}
        meta["id"] = self.id
        self.meta = meta

    def _problem(self, path: str, reason: str) -> None:
        message = str(CorruptedFile(path, reason))
        self.problems.append(message)
        warnings.warn(message, CorruptedFileWarning, stacklevel=3)

    def _load_index(self) -> None:
        # ~25,000 entries at 5,000 turns: the cyclic GC would walk them again and again
        # while they are built (a tenth of an open); nothing here makes reference cycles
        paused = gc.isenabled()
        gc.disable()
        try:
            self._load_index_entries()
        finally:
            if paused:
                gc.enable()

    def _load_index_entries(self) -> None:
        cache_path = self._state / INDEX_FILE
        try:
            cache = loads(read_bytes(str(cache_path)))
            if cache.get("v") != INDEX_VERSION:
                raise ValueError("old index")
            entries: dict[str, Entry] = {k: tuple(v) for k, v in cache["entries"].items()}
            dirs: dict[str, int] = cache["dirs"]
            by_dir: dict[str, list[str]] = cache["by_dir"]
        except Exception:
            entries, dirs, by_dir = {}, {}, {}
        if not dirs:  # no usable cache
            self._load_cold(entries)
            return
        seen: dict[str, int] = {}
        for rel, mtime in self._turn_dirs():
            seen[rel] = mtime
            if dirs.get(rel) == mtime:
                continue
            for node_id in by_dir.pop(rel, []):
                entries.pop(node_id, None)
            self._scan_dir(rel, entries)
        for rel in set(by_dir) - set(seen):  # turn folders that disappeared
            for node_id in by_dir[rel]:
                entries.pop(node_id, None)
        self._index = entries
        self._dir_mtimes = seen

    def _load_cold(self, entries: dict[str, Entry]) -> None:
        """The index without the cache: sealed buckets from their committed index, the
        other turn folders scanned.  The folders of sealed buckets are not stat-ed now
        (5,000 stats at 5,000 turns) but when first needed (:meth:`_stat_sealed_dirs`)."""
        on_disk = self._turn_dir_names()
        sealed = self._load_sealed(on_disk, entries)
        seen: dict[str, int] = {}
        for bucket, turns in on_disk.items():
            if bucket in sealed:
                self._unstatted[bucket] = (sealed[bucket], turns)
                continue
            for turn in turns:
                rel = f"history/{bucket}/{turn}"
                seen[rel] = os.stat(f"{self.path}/{rel}").st_mtime_ns
                self._scan_dir(rel, entries)
        self._index = entries
        self._dir_mtimes = seen

    def _turn_dir_names(self) -> dict[str, set[str]]:
        """Bucket name -> the names of its turn folders on disk."""
        names: dict[str, set[str]] = {}
        history = f"{self.path}/history"
        if not os.path.isdir(history):
            return names
        for bucket in sorted(os.scandir(history), key=lambda e: e.name):
            if bucket.is_dir():
                names[bucket.name] = {t.name for t in os.scandir(bucket.path) if t.is_dir()}
        return names

    def _stat_sealed_dirs(self) -> None:
        """Record the mtimes of the turn folders of the buckets a cold open took from their
        committed index, if HEAD still has the tree they were taken from; a bucket whose
        tree changed since is left out, so it is scanned (refresh, or the next open)."""
        if not self._unstatted:
            return
        try:
            trees = self._bucket_trees()
        except Exception:
            trees = {}
        for bucket, (tree, turns) in self._unstatted.items():
            if trees.get(bucket) != tree:
                continue
            for turn in turns:
                rel = f"history/{bucket}/{turn}"
                try:
                    self._dir_mtimes.setdefault(rel, os.stat(f"{self.path}/{rel}").st_mtime_ns)
                except OSError:
                    pass
        self._unstatted.clear()

    def _load_sealed(
        self, on_disk: dict[str, set[str]], entries: dict[str, Entry]
    ) -> dict[str, bytes]:
        """Put the entries of every sealed bucket of HEAD into ``entries``; returns those
        buckets with their trees.  A bucket counts as sealed when its committed index is
        well-formed and records the tree sha its contents have now, and its turn folders
        on disk are those of the tree; the newest bucket is always scanned."""
        try:
            history = self.git.head_tree().get("history")
            if history is None or history[1] != TREE_MODE:
                return {}
            buckets = {
                name: sha
                for name, (sha, mode) in self.git.read_tree(history[0]).items()
                if mode == TREE_MODE and BUCKET_NAME.fullmatch(name)
            }
        except Exception:  # no commit yet, or objects gitdb cannot read: scan everything
            return {}
        taken: dict[str, bytes] = {}
        for name in sorted(buckets, key=int)[:-1]:
            tree = buckets[name]
            columns = self._sealed_columns(name, tree, on_disk.get(name, set()))
            if columns is None:
                continue
            entries.update(zip(columns[0], zip(*columns, strict=True), strict=True))
            taken[name] = tree
            self._sealed[name] = tree
        return taken

    def _sealed_columns(
        self, bucket: str, tree: bytes, turns_on_disk: set[str] | None
    ) -> list[list[Any]] | None:
        """The entries (columns) of the committed index of ``bucket`` (tree ``tree``), or
        None when there is none, it is malformed, or it does not match the tree (or, unless
        ``turns_on_disk`` is None, the turn folders on disk)."""
        try:
            contents = self.git.read_tree(tree)
            index = contents.pop(BUCKET_INDEX, None)
            if index is None or index[1] == TREE_MODE:
                return None
            if turns_on_disk is not None and set(contents) != turns_on_disk:
                return None
            try:  # the checked-out copy when it is the committed blob: no inflating
                data = read_bytes(f"{self.path}/history/{bucket}/{BUCKET_INDEX}")
            except OSError:
                data = b""
            if object_sha(b"blob", data) != index[0]:
                data = self.git.read_blob(index[0])
            head, _, body = data.partition(b"\n")
            header = loads(head)
            if (
                type(header) is not dict
                or header.get("v") != BUCKET_INDEX_VERSION
                or header.get("fields") != list(ENTRY_FIELDS)
                or header.get("tree") != tree_sha(contents, ordered=True).hex()
            ):
                return None
            if turns_on_disk is None:  # only checking that the bucket is sealed
                return []
            columns = loads(body)
        except Exception:  # unreadable objects, bad JSON: scan the bucket instead
            return None
        return columns if valid_columns(bucket, columns) else None

    def _seal(self, bucket: str, tree: bytes) -> bytes | None:
        """The committed index for ``bucket`` whose tree in HEAD is ``tree`` — the light
        entries of its node files as committed (the file on disk when it is the committed
        blob, else the blob) — or None when it has a valid one already or cannot have one
        (a node that does not parse, an unexpected name: it stays scanned)."""
        if self._sealed_columns(bucket, tree, None) is not None:
            return None
        contents = self.git.read_tree(tree)
        contents.pop(BUCKET_INDEX, None)
        rows: list[Entry] = []
        for turn, (turn_tree, mode) in contents.items():
            if mode != TREE_MODE or not TURN_DIR_NAME.fullmatch(turn):
                return None
            for name, (blob, blob_mode) in self.git.read_tree(turn_tree).items():
                if not name.endswith(".json") or name.startswith("."):
                    continue  # what _scan_dir skips
                if blob_mode == TREE_MODE:
                    return None
                rel = f"history/{bucket}/{turn}/{name}"
                try:
                    data = read_bytes(f"{self.path}/{rel}")
                except OSError:
                    data = b""
                if object_sha(b"blob", data) != blob:
                    data = self.git.read_blob(blob)
                try:
                    call = Call.from_dict(loads(data))
                except (ValueError, NodeFormatError):
                    return None
                rows.append(entry_of(call, rel))
        rows.sort(key=lambda e: e[F_SEQ])
        columns = [list(column) for column in zip(*rows, strict=True)]
        if not valid_columns(bucket, columns):
            return None
        header = {"v": BUCKET_INDEX_VERSION, "tree": tree_sha(contents).hex()}
        header["fields"] = list(ENTRY_FIELDS)  # type: ignore[assignment]
        return dumps(header) + b"\n" + dumps(columns) + b"\n"

    def _bucket_trees(self) -> dict[str, bytes]:
        """Bucket name -> tree sha in HEAD."""
        history = self.git.head_tree().get("history")
        if history is None or history[1] != TREE_MODE:
            return {}
        return {
            name: sha
            for name, (sha, mode) in self.git.read_tree(history[0]).items()
            if mode == TREE_MODE and BUCKET_NAME.fullmatch(name)
        }

    def _seal_buckets(self, names: list[str]) -> dict[str, bytes]:
        """Committed indexes (path -> content, also written to disk) for the buckets of
        ``names`` that lack a valid one; at most ``SEALS_PER_MAINTENANCE``."""
        files: dict[str, bytes] = {}
        try:
            trees = self._bucket_trees()
            for name in names:
                tree = trees.get(name)
                if tree is None or self._sealed.get(name) == tree:
                    continue
                self._sealed[name] = tree  # checked at this tree (updated after the commit)
                payload = self._seal(name, tree)
                if payload is None:
                    continue
                rel = f"history/{name}/{BUCKET_INDEX}"
                atomic_write(self.path / rel, payload)
                files[rel] = payload
                if len(files) >= SEALS_PER_MAINTENANCE:
                    break
        except Exception:  # an optimisation: never let it fail a commit
            return files
        return files

    def _sealed_after_commit(self, files: dict[str, bytes]) -> None:
        trees = self._bucket_trees()
        for rel in files:
            name = rel.split("/")[1]
            if name in trees:
                self._sealed[name] = trees[name]

    def _turn_dirs(self) -> Iterator[tuple[str, int]]:
        """Every ``history/<bucket>/<turn>`` folder with its mtime (changes on any write)."""
        history = self.path / "history"
        if not history.is_dir():
            return
        for bucket in sorted(os.scandir(history), key=lambda e: e.name):
            if not bucket.is_dir():
                continue
            for turn_dir in os.scandir(bucket.path):
                if turn_dir.is_dir():
                    yield f"history/{bucket.name}/{turn_dir.name}", turn_dir.stat().st_mtime_ns

    def _scan_dir(self, rel: str, entries: dict[str, Entry]) -> None:
        base = f"{self.path}/{rel}"  # plain strings: pathlib was a third of a cold open
        for name in os.listdir(base):
            if not name.endswith(".json") or name.startswith("."):
                continue
            call = self._parse(f"{base}/{name}")
            if call is not None:
                entries[call.id] = entry_of(call, f"{rel}/{name}")
                self._nodes.pop(call.id, None)

    def _parse(self, path: str) -> Call | None:
        try:
            return Call.from_dict(loads(read_bytes(path)))
        except (OSError, ValueError, NodeFormatError) as exc:
            self._problem(path, str(exc))
            return None

    def save_index(self) -> None:
        with self._mu:
            self._stat_sealed_dirs()
            by_dir: dict[str, list[str]] = {}
            for node_id, entry in self._index.items():
                by_dir.setdefault(entry[F_PATH].rsplit("/", 1)[0], []).append(node_id)
            data = {
                "v": INDEX_VERSION,
                "entries": self._index,
                "dirs": dict(self._dir_mtimes),
                "by_dir": by_dir,
            }
            payload = dumps(data)
        atomic_write(self._state / INDEX_FILE, payload)

    def _ensure_counters(self) -> None:
        if self.counters.read() is not None:
            return
        seqs = [e[F_SEQ] for e in self._index.values()]
        turns = [e[F_TURN] for e in self._index.values()]
        head = self.meta.get("head_id")
        if not isinstance(head, str) or head not in self._index:
            roots = [e for e in self._index.values() if e[F_KIND] == "root"]
            head = roots[0][0] if roots else None
        self.counters.write(max(seqs, default=-1) + 1, max(turns, default=0) + 1, head)

    # -- recovery ------------------------------------------------------------------------
    def _recover(self) -> None:
        """Replay journals left by dead processes; their open nodes become interrupted."""
        own = self._journal.path if self._journal else None
        claimed = claim_dead_journals(self._state / "journal", own)
        if not claimed:
            return
        recovered: dict[str, Call] = {}
        for _path, fd in claimed:
            try:
                for record in read_journal(fd):
                    try:
                        call = Call.from_dict(record)
                    except NodeFormatError:
                        continue
                    recovered[call.id] = call
            finally:
                os.close(fd)
        for call in recovered.values():
            if call.status in OPEN_STATUSES:
                call.metadata["status"] = UNANSWERED if call.status == AWAITING else INTERRUPTED
                call.metadata["recovered"] = True
        with self._mu:
            for call in recovered.values():
                self._put(call)
                self._dirty[call.id] = call
            self._commit_locked(f"recovery: {len(recovered)} nodes left by a stopped process")
        for path, _fd in claimed:
            path.unlink(missing_ok=True)

    def sync(self) -> None:
        """Refresh this view if another process wrote to the session since (one read of the
        shared counter when nothing changed).  Called when a turn begins."""
        with self.lock:
            seq = self._counters()[0]
            if seq != self._synced_seq:
                self.refresh()
                self._synced_seq = seq

    def set_meta(self, **fields: Any) -> None:
        """Change ``meta.json`` fields (title…); written at the next commit, over whatever
        other processes wrote meanwhile."""
        with self._mu:
            self._meta_changes.update(fields)
            self.meta.update(fields)

    def refresh(self) -> None:
        """Pick up what other processes wrote since this process opened the session: turn
        folders they committed, ``meta.json``, and the journals of writers that died
        (recovered as usual).  This process's own unsaved writes are kept."""
        with self.lock, self._mu:
            self._load_meta(quiet=True)  # title etc. from disk, then our unsaved changes
            self.meta.update(self._meta_changes)
            self._stat_sealed_dirs()
            for rel, mtime in self._turn_dirs():
                if self._dir_mtimes.get(rel) != mtime:
                    self._scan_dir(rel, self._index)
                    self._dir_mtimes[rel] = mtime
            for call in self._dirty.values():  # ours, newer than any file
                self._put(call)
            self._children = None
            self._recover()

    # -- writing -------------------------------------------------------------------------
    def begin_turn(self) -> int:
        """Allocate the next turn number (the storage shard of the nodes of one turn)."""
        with self.lock:
            seq, turn, head = self._counters()
            self.counters.write(seq, turn + 1, head)
        return turn

    def _counters(self) -> tuple[int, int, str | None]:
        state = self.counters.read()
        assert state is not None
        return state

    @property
    def head_id(self) -> str | None:
        return self._counters()[2]

    def append(self, call: Call, *, turn: int, advance_head: bool = False) -> Call:
        """Give ``call`` a seq and record it.  A turn-level write (``advance_head``) links
        the call after HEAD (unless a predecessor is given) and moves HEAD to it, atomically.
        """
        with self.lock:
            seq, next_turn, head = self._counters()
            if seq == self._synced_seq:  # nobody else wrote since: our view stays complete
                self._synced_seq = seq + 1
            call.seq = seq
            call.turn = turn
            if advance_head:
                if call.predecessor is None:
                    call.predecessor = head
                elif call.predecessor != head:  # a branch: the chain had moved on
                    call.metadata["forked_from_head"] = head
                head = call.id
            self.counters.write(seq + 1, next_turn, head)
        self._record(call)
        return call

    def append_many(self, calls: Sequence[Call], *, turn: int) -> list[Call]:
        """Append ``calls`` (nested nodes: none moves HEAD) in one go: consecutive seqs in
        their order under one hold of the lock, and one journal write for all of them.
        What :meth:`append` costs per node, paid once per batch (a map's returned nodes)."""
        if not calls:
            return []
        with self.lock:
            seq, next_turn, head = self._counters()
            if seq == self._synced_seq:
                self._synced_seq = seq + len(calls)
            for offset, call in enumerate(calls):
                call.seq = seq + offset
                call.turn = turn
            self.counters.write(seq + len(calls), next_turn, head)
        self._record(*calls)
        return list(calls)

    def update(self, call: Call) -> None:
        """Record a new state of a node already appended (output, status...)."""
        self._record(call)

    def _record(self, *calls: Call) -> None:
        records = b"\n".join(dumps(call.to_dict()) for call in calls)
        with self._mu:
            for call in calls:
                self._put(call)
                self._dirty[call.id] = call
                if call.is_open:
                    self._open.add(call.id)
                else:
                    self._open.discard(call.id)
            if self._journal is None:
                self._journal = Journal(self._state / "journal")
            self._journal.append(records)
        if events.has_listeners():
            for call in calls:
                events.emit(self.id, call.to_dict())

    def _put(self, call: Call) -> None:
        self._nodes[call.id] = call
        is_new = call.id not in self._index
        self._index[call.id] = entry_of(call, node_relpath(call))
        if is_new and self._children is not None:
            self._children.setdefault(call.caller, []).append(call.id)

    def commit(self, message: str) -> str | None:
        """Write this process's changed nodes and ``meta.json``, and make one commit."""
        with self.lock, self._mu:
            return self._commit_locked(message)

    def _commit_locked(self, message: str) -> str | None:
        if not self._dirty:
            return None
        files: dict[str, bytes | None] = {}
        made: set[str] = set()
        for call in sorted(self._dirty.values(), key=lambda c: c.seq):
            rel = node_relpath(call)
            data = dumps(call.to_dict())
            target = self.path / rel
            rel_dir = rel.rsplit("/", 1)[0]
            if rel_dir not in made and rel_dir not in self._dir_mtimes:  # a new turn folder
                target.parent.mkdir(parents=True, exist_ok=True)
                made.add(rel_dir)
            atomic_write(target, data)
            files[rel] = data
        for rel_dir in {rel.rsplit("/", 1)[0] for rel in files}:
            self._dir_mtimes[rel_dir] = (self.path / rel_dir).stat().st_mtime_ns
        written = {rel.split("/", 2)[1] for rel in files}
        for name in written:
            self._sealed.pop(name, None)  # its tree changes with this commit
        top = max(map(int, written))
        previous = f"{top - 1:04d}"
        # the first commit into bucket b+1 seals bucket b (one small blob every 100 turns)
        seals = self._seal_buckets([previous]) if top and previous not in written else {}
        files.update(seals)
        _seq, next_turn, head = self._counters()
        self._load_meta(quiet=True)  # what other processes wrote (a title…), then ours
        self.meta.update(self._meta_changes)
        self.meta.update(
            {
                "v": META_VERSION,
                "id": self.id,
                "head_id": head,
                "turns": next_turn - 1,
                "updated_at": time.time(),
            }
        )
        meta = json.dumps(self.meta, indent=1, ensure_ascii=False).encode()
        atomic_write(self.path / "meta.json", meta)
        files["meta.json"] = meta
        sha = self.git.commit(files, message)
        if seals:
            self._sealed_after_commit(seals)
        self._dirty.clear()
        self._meta_changes.clear()
        if not self._open and self._journal is not None:
            self._journal.truncate()
        commits, maintained = self.counters.bump_commits()  # counted across processes
        if commits - maintained >= MAINTAIN_EVERY:
            self.maintain(wait=False)
        return sha.hex()

    def maintain(self, *, wait: bool = True) -> None:
        """Pack loose objects, refresh git's index and save the index cache.

        Automatic maintenance (every ``MAINTAIN_EVERY`` commits, counted across processes)
        runs git in the background (``wait=False``) so no turn waits for it.
        """
        with self.lock:
            with self._mu:  # older buckets still unsealed (HEAD changed elsewhere, or old session)
                names = sorted(self._bucket_trees(), key=int)[:-1]
                seals = self._seal_buckets(names)
                if seals:
                    buckets = ", ".join(rel.split("/")[1] for rel in seals)
                    self.git.commit(seals, f"index of history bucket(s) {buckets}")
                    self._sealed_after_commit(seals)
            maintain(self.path, self._state / "maintain.lock", wait=wait)
            self.git.refresh()
            self.counters.set_maintained()
        self.save_index()

    # -- queries -------------------------------------------------------------------------
    def get(self, node_id: str) -> Call:
        with self._mu:
            call = self._nodes.get(node_id)
            if call is not None:
                return call
            entry = self._index.get(node_id)
        if entry is None:
            raise KeyError(f"no node {node_id!r} in session {self.id}")
        path = self.path / entry[F_PATH]
        try:
            call = Call.from_dict(json.loads(path.read_bytes()))
        except (OSError, ValueError, NodeFormatError) as exc:
            raise CorruptedFile(str(path), str(exc)) from exc
        with self._mu:
            self._nodes[node_id] = call
        return call

    def index(self) -> list[dict[str, Any]]:
        """Light entries of every node (``ENTRY_FIELDS``, no input/output), in seq order."""
        with self._mu:
            entries = sorted(self._index.values(), key=lambda e: e[F_SEQ])
        return [dict(zip(ENTRY_FIELDS, e, strict=True)) for e in entries]

    def nodes(self) -> list[Call]:
        """Every readable node in seq order (corrupted ones are listed in ``problems``)."""
        out = []
        with self._mu:
            ids = [e[0] for e in sorted(self._index.values(), key=lambda e: e[F_SEQ])]
        for node_id in ids:
            try:
                out.append(self.get(node_id))
            except CorruptedFile as exc:
                if str(exc) not in self.problems:
                    self.problems.append(str(exc))
        return out

    def children(self, caller: str | None) -> list[str]:
        """Ids of the nodes ``caller`` made, in seq order."""
        with self._mu:
            if self._children is None:
                kids: dict[str | None, list[str]] = {}
                for entry in sorted(self._index.values(), key=lambda e: e[F_SEQ]):
                    kids.setdefault(entry[F_CALLER], []).append(entry[0])
                self._children = kids
            return list(self._children.get(caller, ()))

    def chain(self, start: str | None, limit: int) -> list[Call]:
        """Up to ``limit`` nodes of the conversation chain ending at ``start``, oldest first."""
        return graph.chain(self._readable, start, limit)

    def _readable(self, node_id: str) -> Call | None:
        try:
            return self.get(node_id)
        except (KeyError, CorruptedFile):
            return None

    def close(self) -> None:
        with self._mu:
            if self._dirty:
                self.commit("flush on close")
            try:
                self.save_index()
            except OSError:
                pass
            if self._journal is not None:
                self._journal.close(remove=not self._open)
                self._journal = None
                refresh_index(self.path)
            self.git.close()
            self.lock.close()
            self.counters.close()


class SessionStore:
    """All sessions under ``<home>/sessions``; hands out one :class:`Session` per id."""

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        default = os.environ.get("OPENPROGRAM_HOME") or Path.home() / ".openprogram"
        self.home = Path(home if home is not None else default).expanduser().resolve()
        self.root = self.home / "sessions"
        self._open: dict[str, Session] = {}
        self._mu = threading.Lock()
        atexit.register(self.close)

    def session_path(self, session_id: str) -> Path:
        return self.root / validate_session_id(session_id)

    def exists(self, session_id: str) -> bool:
        return (self.session_path(session_id) / "meta.json").exists() or (
            self.session_path(session_id) / ".git"
        ).is_dir()

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """The session's ``meta.json`` (as far as readable), or None if it does not exist."""
        if not self.exists(session_id):
            return None
        return dict(self.open(session_id).meta)

    def create_session(
        self,
        session_id: str,
        agent_id: str = "main",
        *,
        source: str = "python",
        title: str | None = None,
    ) -> Session:
        """Create ``session_id`` (or return it if another writer just created it)."""
        target = self.session_path(session_id)
        if self.exists(session_id):
            return self.open(session_id)
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".creating-{session_id}-{os.getpid()}-{os.urandom(3).hex()}"
        tmp.mkdir()
        try:
            init_repo(tmp)
            (tmp / ".gitignore").write_bytes(GITIGNORE)
            now = time.time()
            root = make_call("root", "root", status="completed")
            root.seq, root.turn = 0, 0
            meta = {
                "v": META_VERSION,
                "id": session_id,
                "title": title or session_id,
                "agent_id": agent_id,
                "source": source,
                "created_at": now,
                "updated_at": now,
                "head_id": root.id,
                "turns": 0,
            }
            rel = node_relpath(root)
            (tmp / rel).parent.mkdir(parents=True)
            files: dict[str, bytes | None] = {
                ".gitignore": GITIGNORE,
                "meta.json": json.dumps(meta, indent=1).encode(),
                rel: dumps(root.to_dict()),
            }
            for name, data in files.items():
                assert data is not None
                (tmp / name).write_bytes(data)
            writer = GitWriter(tmp)
            writer.commit(files, f"session {session_id} created")
            writer.close()
            refresh_index(tmp)
            (tmp / ".state").mkdir()
            Counters(tmp / ".state" / "counters").write(1, 1, root.id)
            try:
                os.rename(tmp, target)
            except OSError:  # somebody else created it first: theirs wins
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return self.open(session_id)

    def open(self, session_id: str) -> Session:
        """Open an existing session (recovering it if a writer died mid-turn)."""
        path = self.session_path(session_id)
        with self._mu:
            session = self._open.get(session_id)
            if session is not None and session.pid == os.getpid():
                return session
            if not (path / ".git").is_dir():
                raise SessionNotFound(
                    f"no session {session_id!r} under {self.root}; "
                    "`openprogram sessions list` shows the ones there are"
                )
            session = Session(session_id, path)
            self._open[session_id] = session
            return session

    def list_sessions(self) -> list[dict[str, Any]]:
        """``meta.json`` of every session, most recently updated first."""
        out: list[dict[str, Any]] = []
        if not self.root.is_dir():
            return out
        for item in self.root.iterdir():
            if item.name.startswith(".") or not (item / ".git").is_dir():
                continue
            try:
                meta = json.loads((item / "meta.json").read_bytes())
                if not isinstance(meta, dict):
                    raise ValueError("not an object")
            except (OSError, ValueError) as exc:
                meta = {"id": item.name, "problem": f"meta.json unreadable: {exc}"}
            meta["id"] = item.name
            out.append(meta)
        out.sort(key=lambda m: m.get("updated_at") or 0, reverse=True)
        return out

    def delete_session(self, session_id: str) -> None:
        path = self.session_path(session_id)
        with self._mu:
            session = self._open.pop(session_id, None)
        if session is not None:
            session._dirty.clear()
            session.close()
        if not path.is_dir():
            raise SessionNotFound(f"no session {session_id!r} under {self.root}")
        shutil.rmtree(path)

    def close(self) -> None:
        with self._mu:
            sessions = list(self._open.values())
            self._open.clear()
        for session in sessions:
            if session.pid == os.getpid():
                try:
                    session.close()
                except Exception:
                    pass
