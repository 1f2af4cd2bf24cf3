"""The light index of a session's nodes, loaded one history bucket at a time, newest first.

Opening a session loads only its newest bucket; an older one is loaded when a query needs
it (a node not found yet, the children of an old node, the whole DAG).  Loaded buckets are
always the newest ones, contiguously, so "every node from bucket b on" is known once b is.

A bucket is loaded from, in order:

1. its committed index (:mod:`buckets`), when it is sealed at its tree in HEAD and the turn
   folders on disk are the tree's — no node file read, no stat of its folders;
2. its local cache ``.state/index/<bucket>.json`` (same format, the header holding each turn
   folder's mtime): folders whose mtime changed are scanned again;
3. a scan of its node files.

Buckets loaded from 2 or 3 are *tracked* by folder mtimes (and saved to the local cache);
:meth:`refresh` re-checks a loaded bucket only when its tree in HEAD moved, so another
writer costs O(one bucket) per turn, not O(session).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from openprogram.context.nodes import Call, NodeFormatError
from openprogram.store.session.buckets import bucket_trees, sealed_columns
from openprogram.store.session.files import atomic_write, dumps, ensure_dir, loads, read_bytes
from openprogram.store.session.index import (
    BUCKET_INDEX,
    BUCKET_INDEX_VERSION,
    BUCKET_NAME,
    ENTRY_FIELDS,
    F_PATH,
    TURN_DIR_NAME,
    Entry,
    entry_of,
    valid_columns,
)
from openprogram.store.session.repository import Repository

CACHE_DIR = "index"  # under .state/


class NodeIndex:
    """Node id -> light entry, for the buckets loaded so far (see the module doc)."""

    def __init__(
        self,
        root: Path,
        repo: Repository,
        problem: Callable[[str, str], None],
        forget: Callable[[str], None],
    ) -> None:
        self.root = root
        self.repo = repo
        self._problem = problem  # (path, reason) of a node file that does not parse
        self._forget = forget  # a node re-read from disk: drop any cached copy
        self.entries: dict[str, Entry] = {}
        self._ids: dict[str, set[str]] = {}  # loaded bucket -> ids of its nodes
        self._pending: list[str] = []  # buckets on disk not loaded yet, oldest first
        self._trees: dict[str, bytes | None] = {}  # loaded bucket -> tree in HEAD then
        self._mtimes: dict[str, dict[str, int]] = {}  # tracked bucket -> turn -> mtime
        self._unsaved: set[str] = set()  # tracked buckets changed since the cache was saved
        self._early: dict[str, dict[str, Entry]] = {}  # put into a bucket before it loaded
        self.generation = 0  # bumped whenever loading changed which nodes are known
        self._reported: set[str] = set()  # symlinks already reported

    # -- loading -----------------------------------------------------------------------
    def open(self) -> None:
        """Forget everything, list the buckets on disk and load the newest one."""
        self.entries.clear()
        self._ids.clear()
        self._trees.clear()
        self._mtimes.clear()
        self._pending = self._buckets_on_disk()
        self.load_next()

    @property
    def complete(self) -> bool:
        return not self._pending

    def load_next(self, trees: dict[str, bytes] | None = None) -> bool:
        """Load the newest bucket not loaded yet; False when all are.  ``trees``: the
        bucket trees of HEAD, when the caller has them already."""
        if not self._pending:
            return False
        bucket = self._pending.pop()
        paused = gc.isenabled()
        gc.disable()  # thousands of tuples, no cycles: the cyclic GC would only slow it
        try:
            trees = self._head_trees() if trees is None else trees
            self._load(bucket, trees.get(bucket))
            for entry in self._early.pop(bucket, {}).values():  # ours: newer than the files
                self.put(entry)
        finally:
            if paused:
                gc.enable()
        self.generation += 1
        return True

    def load_all(self) -> None:
        if not self._pending:
            return
        trees = self._head_trees()
        paused = gc.isenabled()
        gc.disable()
        try:
            while self.load_next(trees):
                pass
        finally:
            if paused:
                gc.enable()

    def find(self, node_id: str) -> Entry | None:
        """The entry of ``node_id``, loading older buckets until it is found."""
        entry = self.entries.get(node_id)
        while entry is None and self.load_next():
            entry = self.entries.get(node_id)
        return entry

    def _head_trees(self) -> dict[str, bytes]:
        try:
            return bucket_trees(self.repo)
        except Exception:  # no commit yet, or objects gitdb cannot read: scan
            return {}

    def _buckets_on_disk(self) -> list[str]:
        try:
            names = [
                e.name
                for e in os.scandir(f"{self.root}/history")
                if BUCKET_NAME.fullmatch(e.name) and self._real_dir(e)
            ]
        except FileNotFoundError:
            return []
        return sorted(names, key=int)

    def _turns_on_disk(self, bucket: str) -> dict[str, int]:
        """Turn folder name -> mtime, in ``bucket`` on disk."""
        turns: dict[str, int] = {}
        try:
            for e in os.scandir(f"{self.root}/history/{bucket}"):
                if TURN_DIR_NAME.fullmatch(e.name) and self._real_dir(e):
                    turns[e.name] = e.stat(follow_symlinks=False).st_mtime_ns
        except FileNotFoundError:
            pass
        return turns

    def _real_dir(self, entry: os.DirEntry[str]) -> bool:
        """Whether a folder of ``history/`` is a directory; a symlink is reported (once),
        never followed: it could lead anywhere."""
        if entry.is_symlink():
            if entry.path not in self._reported:
                self._reported.add(entry.path)
                self._problem(entry.path, "a symbolic link (not followed)")
            return False
        return entry.is_dir(follow_symlinks=False)

    def _load(self, bucket: str, tree: bytes | None) -> None:
        self._ids[bucket] = set()
        self._trees[bucket] = tree
        if tree is not None:
            names = self._turn_names(bucket)
            columns = sealed_columns(self.repo, self.root, bucket, tree, names)
            if columns is not None:
                self._add(bucket, list(zip(*columns, strict=True)))
                return
        self._load_tracked(bucket)

    def _turn_names(self, bucket: str) -> set[str]:
        """What a sealed bucket's folder holds besides its index (its turn folders)."""
        try:
            return set(os.listdir(f"{self.root}/history/{bucket}")) - {BUCKET_INDEX}
        except FileNotFoundError:
            return set()

    def _load_tracked(self, bucket: str) -> None:
        """From the local cache where the folder mtimes match, else by scanning."""
        on_disk = self._turns_on_disk(bucket)
        cached_dirs, cached = self._read_cache(bucket)
        by_turn: dict[str, list[Entry]] = {}
        for entry in cached:
            by_turn.setdefault(entry[F_PATH].split("/")[2], []).append(entry)
        self._mtimes[bucket] = {}
        for turn, mtime in on_disk.items():
            if cached_dirs.get(turn) == mtime:
                self._add(bucket, by_turn.get(turn, []))
            else:
                self.scan(bucket, turn)
            self._mtimes[bucket][turn] = mtime
        if cached_dirs != on_disk:
            self._unsaved.add(bucket)

    def scan(self, bucket: str, turn: str) -> None:
        """Read every node file of one turn folder."""
        rel = f"history/{bucket}/{turn}"
        base = f"{self.root}/{rel}"
        try:
            names = os.listdir(base)
        except OSError:
            return
        for name in names:
            if not name.endswith(".json") or name.startswith("."):
                continue
            path = f"{base}/{name}"
            try:
                call = Call.from_dict(loads(read_bytes(path)))
            except (OSError, ValueError, NodeFormatError) as exc:
                self._problem(path, str(exc))
                continue
            self._forget(call.id)
            self.put(entry_of(call, f"{rel}/{name}"), tracked=False)
        self._unsaved.add(bucket)

    # -- the local cache ---------------------------------------------------------------
    def _cache_path(self, bucket: str) -> Path:
        return self.root / ".state" / CACHE_DIR / f"{bucket}.json"

    def _read_cache(self, bucket: str) -> tuple[dict[str, int], list[Entry]]:
        try:
            head, _, body = read_bytes(str(self._cache_path(bucket))).partition(b"\n")
            header = loads(head)
            dirs = header["dirs"]
            if (
                header.get("v") != BUCKET_INDEX_VERSION
                or header.get("fields") != list(ENTRY_FIELDS)
                or type(dirs) is not dict
                or not all(type(v) is int and TURN_DIR_NAME.fullmatch(k) for k, v in dirs.items())
            ):
                return {}, []
            columns = loads(body)
            if columns == [[] for _ in ENTRY_FIELDS]:
                return dirs, []
            if not valid_columns(bucket, columns):
                return {}, []
            return dirs, list(zip(*columns, strict=True))
        except Exception:  # missing, or not ours: the bucket is scanned
            return {}, []

    def save(self) -> None:
        """Write the local cache of every tracked bucket changed since it was last saved."""
        for bucket in sorted(self._unsaved):
            mtimes = self._mtimes.get(bucket)
            if mtimes is None:
                continue
            rows = sorted((self.entries[i] for i in self._ids.get(bucket, ())), key=lambda e: e[1])
            columns: list[list[Any]] = [list(c) for c in zip(*rows, strict=True)] or [
                [] for _ in ENTRY_FIELDS
            ]
            header: dict[str, Any] = {"v": BUCKET_INDEX_VERSION, "fields": list(ENTRY_FIELDS)}
            header["dirs"] = mtimes
            ensure_dir(self.root, f".state/{CACHE_DIR}")
            atomic_write(self._cache_path(bucket), dumps(header) + b"\n" + dumps(columns) + b"\n")
        self._unsaved.clear()

    # -- changes -----------------------------------------------------------------------
    def _add(self, bucket: str, rows: list[Entry]) -> None:
        """Entries of a bucket being loaded (no checks: they come from one bucket)."""
        self.entries.update((row[0], row) for row in rows)
        self._ids[bucket].update(row[0] for row in rows)

    def put(self, entry: Entry, *, tracked: bool = True) -> bool:
        """Add or replace an entry; True when the node is new to this index."""
        node_id = entry[0]
        bucket = entry[F_PATH].split("/", 2)[1]
        is_new = node_id not in self.entries
        self.entries[node_id] = entry
        ids = self._ids.get(bucket)
        if ids is None:
            if bucket in self._pending:  # not loaded yet: kept over what loading finds
                self._early.setdefault(bucket, {})[node_id] = entry
            else:  # a bucket this process is creating
                self._ids[bucket] = {node_id}
                self._trees[bucket] = None
                self._mtimes[bucket] = {}
        else:
            ids.add(node_id)
        if tracked:
            self._unsaved.add(bucket)
        return is_new

    def written(self, rel_dirs: set[str]) -> None:
        """This process wrote (and is committing) the node files of these turn folders."""
        for rel in rel_dirs:
            _history, bucket, turn = rel.split("/")
            mtimes = self._mtimes.get(bucket)
            if mtimes is not None:
                mtimes[turn] = os.stat(f"{self.root}/{rel}").st_mtime_ns
                self._unsaved.add(bucket)

    def refresh(self) -> bool:
        """See what other processes committed: new buckets, and loaded buckets whose tree
        in HEAD moved (their changed turn folders scanned).  True when anything changed."""
        changed = False
        known = set(self._ids) | set(self._pending)
        for bucket in self._buckets_on_disk():
            if bucket not in known:  # newer than anything loaded: load it now
                self._load(bucket, None)
                changed = True
        trees = self._head_trees()
        for bucket in list(self._ids):
            tree = trees.get(bucket)
            if tree == self._trees.get(bucket):
                continue
            changed = True
            if bucket in self._mtimes:
                self._rescan_changed(bucket)
                self._trees[bucket] = tree
            else:  # taken sealed: load it again (sealed again, or scanned)
                for node_id in self._ids.pop(bucket):
                    self.entries.pop(node_id, None)
                self._load(bucket, tree)
        if changed:
            self.generation += 1
        return changed

    def _rescan_changed(self, bucket: str) -> None:
        mtimes = self._mtimes[bucket]
        on_disk = self._turns_on_disk(bucket)
        for turn, mtime in on_disk.items():
            if mtimes.get(turn) != mtime:
                self.scan(bucket, turn)
                mtimes[turn] = mtime
        for turn in set(mtimes) - set(on_disk):  # turn folders that disappeared
            del mtimes[turn]
            prefix = f"history/{bucket}/{turn}/"
            ids = self._ids[bucket]
            for node_id in [i for i in ids if self.entries[i][F_PATH].startswith(prefix)]:
                ids.discard(node_id)
                del self.entries[node_id]
            self._unsaved.add(bucket)

    def loaded_entries(self) -> Iterator[Entry]:
        return iter(self.entries.values())

    def max_turn_and_seq(self) -> tuple[int, int]:
        """The highest turn and seq known (counters rebuilt after a clone)."""
        turns = [e[2] for e in self.entries.values()]
        seqs = [e[1] for e in self.entries.values()]
        return max(turns, default=0), max(seqs, default=-1)
