"""The light index of a session's nodes, loaded one history bucket at a time, newest first.

Opening a session loads only its newest bucket; an older one is loaded when a query needs
it (a node not found yet, the children of an old node, the whole DAG).  Loaded buckets are
always the newest ones, contiguously, so "every node from bucket b on" is known once b is.

The buckets are those in HEAD and those on disk: a committed bucket may be left out of the
working tree (:mod:`checkout`), a new one is on disk before its first commit.  A bucket is
loaded from, in order:

1. its committed index (:mod:`buckets`), when it is sealed at its tree in HEAD and every
   turn folder on disk is one of the tree's (folders left out are fine) — no node file
   read, no stat of its folders;
2. its local cache ``.state/index/<bucket>.json`` (:mod:`indexcache`; the header holding each
   turn's key: its tree sha in HEAD once committed, with its folder's mtime while checked
   out, else the mtime alone): turns whose key changed are scanned again — except a turn
   whose folder was only left out of the working tree since (same tree);
3. a scan of its turns: the node files on disk, and the blobs of committed files that are
   not (left out of the working tree, :mod:`checkout`).

Buckets loaded from 2 or 3 are *tracked* by those keys (and saved to the local cache);
:meth:`refresh` re-checks a loaded bucket only when its tree in HEAD moved, so another
writer costs O(one bucket) per turn, not O(session).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from openprogram.context.nodes import Call, NodeFormatError
from openprogram.store.session.buckets import bucket_trees, sealed_columns
from openprogram.store.session.files import (
    MAX_FILE_BYTES,
    is_real_dir,
    loads,
    read_bytes,
)
from openprogram.store.session.history import TREE_MODE, Repository, cat_file_batch
from openprogram.store.session.index import (
    BUCKET_INDEX,
    BUCKET_NAME,
    F_CALLER,
    F_PATH,
    F_SEQ,
    F_TURN,
    TURN_DIR_NAME,
    TURNS_PER_BUCKET,
    Entry,
    compact_columns,
    compact_entry,
    entry_bucket,
    entry_of,
    full_entry,
)
from openprogram.store.session.indexcache import TurnKey, read_cache, same_turn, write_cache
from openprogram.store.session.indextotals import (
    Totals,
    add,
    empty,
    read_totals,
    totals_of,
    write_totals,
)

PREFETCH_MIN = 4  # buckets about to load whose committed indexes are read by one git run
KIDS_BUCKETS = 4  # buckets whose caller -> children maps are kept (the most recently asked)


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
        self.entries: dict[str, Entry] = {}  # compact entries (see index.compact_entry)
        self._ids: dict[str, set[str]] = {}  # loaded bucket -> ids of its nodes
        self._pending: list[str] = []  # buckets not loaded yet, oldest first
        self._trees: dict[str, bytes | None] = {}  # loaded bucket -> tree in HEAD then
        self._mtimes: dict[str, dict[str, TurnKey]] = {}  # tracked bucket -> turn -> key
        self._unsaved: set[str] = set()  # tracked buckets changed since the cache was saved
        self._early: dict[str, dict[str, Entry]] = {}  # put into a bucket before it loaded
        self._sealed: set[str] = set()  # loaded buckets taken from their committed index
        self._fetched: dict[str, bytes] = {}  # committed indexes read ahead (_prefetch)
        self.generation = 0  # bumped whenever loading changed which nodes are known
        self._reported: set[str] = set()  # symlinks already reported
        # bucket -> caller -> its children's ids in seq order, for the few buckets asked
        # last (not a list per node: the index stays its entries)
        self._kids: dict[str, dict[str | None, list[str]]] = {}
        self._kids_gen = -1
        # loaded bucket -> caller -> ids of its nodes called from outside the bucket (a
        # background run's), in seq order; only buckets that have some
        self._foreign: dict[str, dict[str, list[str]]] = {}

    # -- loading -----------------------------------------------------------------------
    def open(self) -> None:
        """Forget everything, list the buckets (in HEAD and on disk), load the newest one."""
        self.entries.clear()
        self._ids.clear()
        self._sealed.clear()
        self._trees.clear()
        self._mtimes.clear()
        trees = self._head_trees()
        self._pending = self._bucket_names(trees)
        self.load_next(trees)

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
            early = self._early.pop(bucket, {})
            for entry in early.values():  # ours: newer than the files
                self.put(entry)
            if early:
                self._note_foreign(bucket)
        finally:
            if paused:
                gc.enable()
        self.generation += 1
        return True

    def load_all(self) -> None:
        if not self._pending:
            return
        trees = self._head_trees()
        self._prefetch(self._pending)
        paused = gc.isenabled()
        gc.disable()
        try:
            while self.load_next(trees):
                pass
        finally:
            if paused:
                gc.enable()

    def _prefetch(self, buckets: list[str], least: int = PREFETCH_MIN) -> None:
        """Read the committed indexes of many buckets about to load (at least ``least``) in
        one go: git inflates them (gitdb resolves a packed delta in Python: 0.2 s an
        index)."""
        commit = self.repo.read_ref()
        if len(buckets) < least or commit is None:
            return
        names = [
            b"%s:history/%s/%s" % (commit.hex().encode(), b.encode(), BUCKET_INDEX.encode())
            for b in buckets
        ]
        for bucket, got in zip(buckets, cat_file_batch(self.root, names), strict=True):
            if got is not None and got[1] == b"blob" and len(got[2]) <= MAX_FILE_BYTES:
                self._fetched[bucket] = got[2]  # (one git cannot read: read by itself)

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

    def _bucket_names(self, trees: dict[str, bytes]) -> list[str]:
        """The buckets on disk and in HEAD (``trees``), oldest first."""
        names = set(trees)
        if not is_real_dir(f"{self.root}/history"):  # missing, or a link: never followed
            return sorted(names, key=int)
        try:
            names.update(
                e.name
                for e in os.scandir(f"{self.root}/history")
                if BUCKET_NAME.fullmatch(e.name) and self._real_dir(e)
            )
        except FileNotFoundError:
            pass
        return sorted(names, key=int)

    def _turn_keys(self, bucket: str, tree: bytes | None) -> dict[str, TurnKey]:
        """Turn folder name -> key (see :data:`TurnKey`): the tree sha of each turn of
        ``tree`` (the bucket in HEAD), checked out or not, and the mtime of each folder on
        disk that is not committed yet."""
        keys: dict[str, TurnKey] = {}
        if tree is not None:
            for name, (sha, mode) in self.repo.read_tree(tree).items():
                if mode == TREE_MODE and TURN_DIR_NAME.fullmatch(name):
                    keys[name] = sha.hex()
        for name, entry in self._turns_on_disk(bucket).items():
            try:
                mtime = entry.stat(follow_symlinks=False).st_mtime_ns
            except FileNotFoundError:  # left out meanwhile (a maintenance)
                continue
            keys[name] = f"{keys[name]}@{mtime}" if name in keys else mtime
        return keys

    def _turns_on_disk(self, bucket: str) -> dict[str, os.DirEntry[str]]:
        """The turn folders of ``bucket`` on disk."""
        turns: dict[str, os.DirEntry[str]] = {}
        if not is_real_dir(f"{self.root}/history/{bucket}"):  # left out, or a link (reported)
            return turns
        try:
            for e in os.scandir(f"{self.root}/history/{bucket}"):
                if TURN_DIR_NAME.fullmatch(e.name) and self._real_dir(e):
                    turns[e.name] = e
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
        columns = None
        if tree is not None:
            names = self._turn_names(bucket)
            fetched = self._fetched.pop(bucket, None)
            columns = sealed_columns(self.repo, self.root, bucket, tree, names, fetched)
        if columns is not None:
            self._add(bucket, compact_columns(columns, self.entries))
            self._sealed.add(bucket)
        else:
            self._load_tracked(bucket, tree)
        self._note_foreign(bucket)

    def _note_foreign(self, bucket: str) -> None:
        """Find the nodes of ``bucket`` called from outside it (see ``_foreign``)."""
        ids = self._ids.get(bucket, set())
        rows = [self.entries[i] for i in ids if i in self.entries]
        outside = {row[F_CALLER] for row in rows} - ids - {None}
        self._foreign.pop(bucket, None)
        if outside:
            found: dict[str, list[str]] = {}
            for row in sorted(rows, key=lambda e: e[F_SEQ]):
                if row[F_CALLER] in outside:
                    found.setdefault(row[F_CALLER], []).append(row[0])
            self._foreign[bucket] = found

    def _turn_names(self, bucket: str) -> set[str]:
        """What a sealed bucket's folder holds besides its index (its turn folders)."""
        if not is_real_dir(f"{self.root}/history/{bucket}"):
            return set()
        try:
            return set(os.listdir(f"{self.root}/history/{bucket}")) - {BUCKET_INDEX}
        except FileNotFoundError:
            return set()

    def _load_tracked(self, bucket: str, tree: bytes | None) -> None:
        """From the local cache where the turn keys match, else by scanning."""
        keys = self._turn_keys(bucket, tree)
        cached_keys, cached = read_cache(self.root, bucket)
        by_turn: dict[str, list[Entry]] = {}
        for entry in cached:
            by_turn.setdefault(entry[F_PATH].split("/")[2], []).append(entry)
        self._mtimes[bucket] = {}
        kept: list[Entry] = []
        for turn, key in keys.items():
            if same_turn(cached_keys.get(turn), key):
                kept += by_turn.get(turn, [])
            else:
                self.scan(bucket, turn, key)
            self._mtimes[bucket][turn] = key
        if kept:
            self._add(bucket, compact_columns(list(zip(*kept, strict=True)), self.entries))
        if cached_keys != keys:
            self._unsaved.add(bucket)

    def scan(self, bucket: str, turn: str, key: TurnKey = 0) -> None:
        """Read every node of one turn: its files on disk, and when ``key`` is the turn's
        committed tree, the blobs of the files not on disk (left out of the working tree)."""
        rel = f"history/{bucket}/{turn}"
        base = f"{self.root}/{rel}"
        names: list[str] = []
        if is_real_dir(f"{self.root}/history/{bucket}") and is_real_dir(base):  # no link
            try:
                names = sorted(os.listdir(base))  # seq order: callers before their calls
            except OSError:
                pass
        for name in names:
            if not name.endswith(".json") or name.startswith("."):
                continue
            path = f"{base}/{name}"
            try:
                call = Call.from_dict(loads(read_bytes(path)))
            except (OSError, ValueError, NodeFormatError) as exc:
                self._problem(path, str(exc))
                continue
            self._found(call, f"{rel}/{name}")
        if isinstance(key, str):
            self._scan_committed(rel, key[:40], set(names))
        self._unsaved.add(bucket)

    def _scan_committed(self, rel: str, tree_hex: str, on_disk: set[str]) -> None:
        try:
            files = self.repo.read_tree(bytes.fromhex(tree_hex))
        except Exception as exc:  # objects gitdb cannot read
            self._problem(f"{self.root}/{rel}", f"not readable from git: {exc}")
            return
        for name, (blob, mode) in files.items():
            if name in on_disk:
                continue
            if mode == TREE_MODE or not name.endswith(".json") or name.startswith("."):
                continue
            try:
                call = Call.from_dict(loads(self.repo.read(blob, MAX_FILE_BYTES)))
            except Exception as exc:  # bad JSON, a bad node, an unreadable object
                self._problem(f"{self.root}/{rel}/{name}", str(exc))
                continue
            self._found(call, f"{rel}/{name}")

    def _found(self, call: Call, rel: str) -> None:
        self._forget(call.id)
        self.put(entry_of(call, rel), tracked=False)

    def save(self, newest: int | None = None) -> None:
        """Write the local cache of every tracked bucket changed since it was last saved
        (``newest``: of the newest that many only; the others wait for the next save)."""
        buckets = sorted(self._unsaved, key=int)
        for bucket in buckets if newest is None else buckets[-newest:]:
            self._unsaved.discard(bucket)
            mtimes = self._mtimes.get(bucket)
            if mtimes is None:
                continue
            rows = sorted((self.entries[i] for i in self._ids.get(bucket, ())), key=lambda e: e[1])
            rows = [full_entry(row) for row in rows]
            write_cache(self.root, bucket, mtimes, rows)

    # -- changes -----------------------------------------------------------------------
    def _add(self, bucket: str, rows: list[Entry]) -> None:
        """Compact entries of a bucket being loaded (no checks: they come from one bucket)."""
        self.entries.update((row[0], row) for row in rows)
        self._ids[bucket].update(row[0] for row in rows)

    def put(self, entry: Entry, *, tracked: bool = True) -> bool:
        """Add or replace an entry (full or compact); True when the node is new to this
        index."""
        entry = compact_entry(entry, self.entries)
        node_id = entry[0]
        bucket = entry_bucket(entry)
        is_new = node_id not in self.entries
        self.entries[node_id] = entry
        if is_new and bucket in self._kids:
            self._kids[bucket].setdefault(entry[F_CALLER], []).append(node_id)
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
        caller = entry[F_CALLER]
        if is_new and caller is not None and caller not in self._ids.get(bucket, (caller,)):
            self._foreign.setdefault(bucket, {}).setdefault(caller, []).append(node_id)
        if tracked:
            self._unsaved.add(bucket)
        return is_new

    def written(self, rel_dirs: set[str], commit: bytes | None = None) -> None:
        """This process wrote the node files of these turn folders, committed in ``commit``
        (HEAD's when None)."""
        for rel in rel_dirs:
            _history, bucket, turn = rel.split("/")
            mtimes = self._mtimes.get(bucket)
            if mtimes is not None:
                found = self.repo.tree_at(f"history/{bucket}", commit=commit).get(turn)
                if found is None:
                    mtimes.pop(turn, None)
                    self._unsaved.add(bucket)
                    continue
                key = found[0].hex()
                try:
                    key += f"@{os.stat(f'{self.root}/{rel}').st_mtime_ns}"
                except FileNotFoundError:  # left out: written to git only
                    pass
                mtimes[turn] = key
                self._unsaved.add(bucket)

    def refresh(self) -> bool:
        """See what other processes committed: new buckets, and loaded buckets whose tree
        in HEAD moved (their changed turn folders scanned).  True when anything changed."""
        changed = False
        trees = self._head_trees()
        known = set(self._ids) | set(self._pending)
        for bucket in self._bucket_names(trees):
            if bucket not in known:  # newer than anything loaded: load it now
                self._load(bucket, trees.get(bucket))
                changed = True
        for bucket in list(self._ids):
            tree = trees.get(bucket)
            if tree == self._trees.get(bucket):
                continue
            changed = True
            sealed = tree is not None and sealed_columns(self.repo, self.root, bucket, tree, None)
            if bucket in self._mtimes and sealed is None:
                self._rescan_changed(bucket, tree)
                self._trees[bucket] = tree
            else:  # sealed now (its files may be leaving the disk), or taken sealed before
                self._sealed.discard(bucket)
                for node_id in self._ids.pop(bucket):
                    self.entries.pop(node_id, None)
                self._foreign.pop(bucket, None)
                self._mtimes.pop(bucket, None)
                self._unsaved.discard(bucket)
                self._load(bucket, tree)
        if changed:
            self.generation += 1
        return changed

    def _rescan_changed(self, bucket: str, tree: bytes | None) -> None:
        mtimes = self._mtimes[bucket]
        keys = self._turn_keys(bucket, tree)
        for turn, key in keys.items():
            if not same_turn(mtimes.get(turn), key):
                if turn in mtimes:  # what it holds now (a pull that joined two roots drops one)
                    self._drop_turn(bucket, turn)
                self.scan(bucket, turn, key)
                mtimes[turn] = key
        for turn in set(mtimes) - set(keys):  # turns neither on disk nor committed
            del mtimes[turn]
            self._drop_turn(bucket, turn)
            self._unsaved.add(bucket)
        self._note_foreign(bucket)

    def _drop_turn(self, bucket: str, turn: str) -> None:
        prefix, number = f"history/{bucket}/{turn}/", int(turn)
        ids, entries = self._ids[bucket], self.entries

        def in_turn(entry: Entry) -> bool:  # a compact entry's folder is its turn's number
            path = entry[F_PATH]
            return entry[F_TURN] == number if path is None else path.startswith(prefix)

        for node_id in [i for i in ids if in_turn(entries[i])]:
            ids.discard(node_id)
            del self.entries[node_id]

    # -- windows and totals ----------------------------------------------------------------
    def window(self, tops: int) -> list[Entry]:
        """The entries of the newest buckets, loaded until they hold at least ``tops``
        turn-level nodes (or the whole session), in seq order: what a view of the newest
        rows lays out."""
        count = sum(1 for e in self.entries.values() if e[F_CALLER] is None)
        if count < tops:  # the buckets it will load (~one turn-level node a turn), in one go
            need = -(-(tops - count) // TURNS_PER_BUCKET) + 1
            self._prefetch([b for b in self._pending[-need:] if b not in self._fetched], 2)
        while count < tops:
            before = set(self._ids)
            if not self.load_next():
                break
            for bucket in set(self._ids) - before:
                count += sum(1 for i in self._ids[bucket] if self.entries[i][F_CALLER] is None)
        return sorted(self.entries.values(), key=lambda e: e[F_SEQ])

    def older_nodes(self) -> int:
        """How many nodes the buckets not loaded yet hold (from their totals)."""
        if not self._pending:
            return 0
        oldest_loaded = min(self._ids, key=int) if self._ids else None
        return int(self.bucket_totals(oldest_loaded)["nodes"])

    def bucket_totals(self, older_than: str | None = None) -> Totals:
        """The totals (:mod:`indextotals`) of the session's buckets — of those older than
        ``older_than`` only, when given — from the loaded entries, else the cached totals
        of a sealed bucket at its tree in HEAD, else its committed index; a bucket that is
        none of these is loaded."""
        trees = self._head_trees()
        cached = read_totals(self.root)
        changed = False
        total = empty()
        names = self._bucket_names(trees)
        if older_than is not None:
            names = [b for b in names if int(b) < int(older_than)]
        self._prefetch(
            [
                b
                for b in names
                if b not in self._ids
                and b in trees
                and cached.get(b, {}).get("tree") != trees[b].hex()
            ]
        )
        for bucket in names:
            tree = trees.get(bucket)
            hit = cached.get(bucket)
            if (
                hit is not None
                and tree is not None
                and hit["tree"] == tree.hex()
                and (
                    bucket not in self._ids
                    or (bucket in self._sealed and self._trees[bucket] == tree)
                )
            ):
                add(total, hit)
                continue
            part: Totals | None = None
            if bucket not in self._ids and tree is not None:
                fetched = self._fetched.pop(bucket, None)
                columns = sealed_columns(self.repo, self.root, bucket, tree, set(), fetched)
                if columns is not None:
                    part = totals_of(zip(*columns, strict=True))
            if part is None:
                while bucket not in self._ids and self.load_next(trees):
                    pass
                part = totals_of(self.entries[i] for i in self._ids.get(bucket, ()))
                sealed = bucket in self._sealed and self._trees.get(bucket) == tree
            else:
                sealed = True
            if sealed and tree is not None:
                cached[bucket] = {**part, "tree": tree.hex()}
                changed = True
            add(total, part)
        if changed:
            try:
                write_totals(self.root, cached)
            except OSError:  # a cache: summed again next time
                pass
        return total

    def children(self, caller: str | None) -> list[str]:
        """Ids of the loaded nodes ``caller`` made, in seq order: from the caller's bucket's
        caller -> children map (built when asked, kept for the ``KIDS_BUCKETS`` buckets asked
        last) and the nodes other buckets hold called from outside them."""
        if self._kids_gen != self.generation:  # loading changed which nodes are known
            self._kids.clear()
            self._kids_gen = self.generation
        entry = self.entries.get(caller) if caller is not None else None
        if entry is None:  # the turn-level nodes, or an unknown caller's: every entry
            found = [e for e in self.entries.values() if e[F_CALLER] == caller]
            return [e[0] for e in sorted(found, key=lambda e: e[F_SEQ])]
        bucket = entry_bucket(entry)
        kids = self._kids.pop(bucket, None)
        if kids is None:
            kids = {}
            rows = sorted((self.entries[i] for i in self._ids[bucket]), key=lambda e: e[1])
            for row in rows:
                if entry_bucket(row) == bucket:  # (an id found in two buckets: once)
                    kids.setdefault(row[F_CALLER], []).append(row[0])
        self._kids[bucket] = kids  # the most recently asked last
        while len(self._kids) > KIDS_BUCKETS:
            del self._kids[next(iter(self._kids))]
        out = list(kids.get(caller, ()))
        more = [
            node_id
            for other, called in self._foreign.items()
            if other != bucket and caller in called
            for node_id in called[caller]
        ]
        if more:  # called from an older bucket (a background run's nodes)
            out = sorted({*out, *more}, key=lambda i: self.entries[i][F_SEQ])
        return out

    def loaded_entries(self) -> Iterator[Entry]:
        return iter(self.entries.values())

    def max_turn_and_seq(self) -> tuple[int, int]:
        """The highest turn and seq known (counters rebuilt after a clone)."""
        turns = [e[2] for e in self.entries.values()]
        seqs = [e[1] for e in self.entries.values()]
        return max(turns, default=0), max(seqs, default=-1)
