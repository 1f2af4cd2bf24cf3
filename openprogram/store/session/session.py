"""One session opened by this process: opening, syncing with other writers, and the write
path (a node event is one row of the live database; a commit one pack, nothing on that
path grows with the session).  Its reads are :mod:`queries`, a base of :class:`Session`.
"""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from openprogram.context.nodes import (
    AWAITING,
    COMPLETED,
    INTERRUPTED,
    OPEN_STATUSES,
    RUNNING,
    UNANSWERED,
    Call,
)
from openprogram.context.secrets import redact_secrets, redact_shown, refresh_secrets
from openprogram.errors import CorruptedFile, CorruptedFileWarning, SessionError, StoreError
from openprogram.store.memory import chain_after_head
from openprogram.store.session import events
from openprogram.store.session.files import (
    atomic_write,
    ensure_dir,
    jsonable,
    read_bytes,
)
from openprogram.store.session.history import Repository
from openprogram.store.session.index import (
    NODE_FILE,
    counts_as_turn,
    derive,
    node_relpath,
    read_meta,
    row_of,
)
from openprogram.store.session.live import LiveState
from openprogram.store.session.queries import SessionQueries
from openprogram.store.session.records import author_record, current_author, node_record
from openprogram.store.session.safegit import make_safe

META_VERSION = 1
# seqs a process leases at once, then hands out without the lock (seqs are unique and
# ordered, not contiguous: a block left unused is a gap)
SEQ_BLOCK = 64
PLACE_FILE = "place"  # .state/place: where this machine last used the session
MAX_PLACE_BYTES = 4096


class Session(SessionQueries):
    """One session opened by this process.  Thread-safe; other processes may write too."""

    def __init__(self, session_id: str, path: Path) -> None:
        self.id = session_id
        self.path = path
        self.pid = os.getpid()
        make_safe(path / ".git")  # before anything reads the repository
        self._state = ensure_dir(path, ".state")  # a symlink there is removed, not followed
        ensure_dir(path, "workdir")
        self.live = LiveState(self._state, session_id)
        self.lock = self.live.lock  # the session's write lock: SQLite's (BEGIN IMMEDIATE)
        self.git = Repository(path)
        self.git.lock_held = self.lock.held  # a ref lock found under it: a dead writer's
        self.meta: dict[str, Any] = {}
        self.problems: list[str] = []
        self._mu = threading.RLock()
        self._nodes: dict[str, Call] = {}  # parsed nodes (bounded), ours included
        self._unindexed: dict[str, Call] = {}  # states whose ``nodes`` row waits for a read
        self._dirty: dict[str, Call] = {}  # states not committed yet
        self._open: set[str] = set()
        self._unsaved: dict[str, Call] = {}  # states whose row failed (disk full): written
        # before the commit, so an open node reaches git only once a recovery can close it
        self._meta_changes: dict[str, Any] = {}  # set by this process, kept over disk's
        self._new_turns: set[str] = set()  # turns of this process not committed yet
        self._synced = (-1, -1)  # (seq counter, commits) when this view was last complete
        self._lease_mu = threading.Lock()
        self._lease = [0, 0]  # [next, end): seqs leased by this process, not handed out yet
        with self.lock:
            self._load_meta()
            self._follow_git()
            self._counters()
            self._recover()
            self._synced = self.live.stamp()

    def _load_meta(self, *, quiet: bool = False) -> None:
        meta_path = self.path / "meta.json"
        try:
            meta, dropped = read_meta(meta_path)
        except (OSError, ValueError) as exc:
            if quiet and self.meta:  # already reported at open; keep what we have
                return
            self._problem(str(meta_path), str(exc))
            meta, dropped = {"id": self.id, "title": self.id, "created_at": time.time()}, []
        if dropped and not quiet:
            self._problem(str(meta_path), "fields of the wrong type ignored: " + ", ".join(dropped))
        meta["id"] = self.id
        self.meta = meta
        meta.update(self._meta_changes)  # this process's changes, over disk's

    def _problem(self, path: str, reason: str) -> None:
        message = str(CorruptedFile(path, reason))
        self.problems.append(message)
        warnings.warn(message, CorruptedFileWarning, stacklevel=3)

    def _follow_git(self) -> None:
        """Derive the ``nodes`` rows from git when the ref moved from the commit they
        follow (a clone, ``live.db`` deleted, a pull, a writer killed between the ref and
        its transaction)."""
        with self.lock:
            ref = self.git.read_ref()
            since = self.live.derived()
            if ref is None or ref.hex() == since:
                return
            rows, removed = derive(self.path, since, ref.hex(), self._problem)
            self.live.follow(ref.hex(), rows, removed)
            with self._mu:
                for node_id in list(self._nodes):
                    if node_id not in self._dirty:
                        del self._nodes[node_id]

    def _recover(self) -> None:
        """Commit what writers that died mid-turn left in the live database (their open
        nodes end ``interrupted``) as one ``recovery`` commit."""
        with self.lock:
            calls, owners, skipped = self.live.dead_rows()
            for where, reason in skipped:
                self._problem(where, reason)
            if not owners:
                return
            with self._mu:
                for call in calls:
                    if counts_as_turn(call.caller, call.kind) and not self._committed(call):
                        self._new_turns.add(call.id)
                    self._dirty[call.id] = call
                    self._unindexed[call.id] = call
                    self._cache(call)
                self._commit_locked(f"recovery: {len(calls)} nodes left by a stopped process")
            self.live.drop_owners(owners)

    def sync(self) -> None:
        """Refresh this view if another process leased seqs or committed since (one read
        when nothing changed).  Called when a turn begins."""
        with self.lock:
            stamp = self.live.stamp()
            if stamp != self._synced:
                self.refresh()
                self._synced = stamp

    def refresh(self) -> None:
        """Pick up ``meta.json`` (this process's changes kept over it), a ref moved
        without the ``nodes`` rows (a pull's), and the rows of writers that died."""
        with self.lock, self._mu:
            self._load_meta(quiet=True)  # title etc. from disk, then our unsaved changes
            self._follow_git()
            self._recover()

    def set_meta(self, **fields: Any) -> None:
        """Change ``meta.json`` fields (title…) at the next commit, over other writers'."""
        with self._mu:
            self._meta_changes.update(fields)
            self.meta.update(fields)

    def note_place(self, place: str) -> None:
        """Note where this machine uses the session (``notebook <path>``) in ``.state``
        (never committed: another machine has other paths); a failure never stops a turn."""
        data = " ".join(place.split()).encode()[:MAX_PLACE_BYTES]
        target = self._state / PLACE_FILE
        with suppress(OSError):
            if read_bytes(str(target), MAX_PLACE_BYTES) == data:
                return
        with suppress(OSError):
            atomic_write(target, data)

    def begin_turn(self) -> int:
        """Allocate the next turn number."""
        refresh_secrets()  # credential variables set since: redacted from this turn on
        with self.lock:
            seq, turn, head = state = self._counters()
            self.live.write(seq, turn + 1, head, was=state)
        return turn

    def _counters(self) -> tuple[int, int, str | None]:
        """(next seq, next turn, HEAD), rebuilt when missing or damaged (a clone, ``live.db``
        deleted) from the ``nodes`` rows and ``meta.json``'s HEAD."""
        state = self.live.read()
        if state is None:
            head = self.meta.get("head_id")
            seq, turn, known, root = self.live.query(
                "SELECT max(seq), max(turn), (SELECT id FROM nodes WHERE id = ?),"
                " (SELECT id FROM nodes WHERE kind = 'root' ORDER BY seq LIMIT 1) FROM nodes",
                (head if isinstance(head, str) else None,),
            )[0]
            self.live.write((seq if seq is not None else -1) + 1, (turn or 0) + 1, known or root)
            state = self.live.read()
            assert state is not None
        return state

    @property
    def head_id(self) -> str | None:
        return self._counters()[2]

    def append(self, call: Call, *, turn: int, advance_head: bool = False) -> Call:
        """Give ``call`` a seq and record it; ``advance_head``: link it after HEAD (unless
        it has a predecessor) and move HEAD to it, in one transaction."""
        call.turn = turn
        if not advance_head:
            call.seq = self._take_seqs(1)
            self._record(call, new=True)
            return call
        is_turn = counts_as_turn(call.caller, call.kind)
        if is_turn:
            call.metadata.setdefault("author", author_record())
        lease, synced = list(self._lease), self._synced
        try:  # its row and HEAD moving to it: one transaction
            with self.lock:
                counter, next_turn, head = state = self._counters()
                call.seq, counter = self._lease_locked(1, counter)
                head = chain_after_head(call, head)  # the one rule, shared with memory.py
                self.live.put_rows([(call.id, node_record(call))])
                self.live.write(counter, next_turn, head, was=state)
        except BaseException:  # rolled back: the seqs leased in it were never handed out
            with self._lease_mu:
                self._lease, self._synced = lease, synced
            raise
        if is_turn:
            self._new_turns.add(call.id)
        self._record(call, new=True, written=True)
        return call

    def append_many(self, calls: Sequence[Call], *, turn: int) -> list[Call]:
        """Append nested ``calls`` (a map's) with consecutive seqs and one row write."""
        if not calls:
            return []
        seq = self._take_seqs(len(calls))
        for offset, call in enumerate(calls):
            call.seq = seq + offset
            call.turn = turn
        self._record(*calls, new=True)
        return list(calls)

    def _take_seqs(self, count: int) -> int:
        """The first of ``count`` consecutive seqs, from the leased block (no lock) or a new one."""
        with self._lease_mu:
            start, end = self._lease
            if end - start >= count:
                self._lease[0] = start + count
                return start
        with self.lock:
            counter, next_turn, head = self._counters()
            start, moved = self._lease_locked(count, counter)
            if moved != counter:
                self.live.write(moved, next_turn, head)
        return start

    def _lease_locked(self, count: int, counter: int) -> tuple[int, int]:
        """(The lock held.)  The first of ``count`` seqs and the shared counter after: a
        new block once another process leased after ours (a turn-level node's seq is above
        every seq handed out before)."""
        with self._lease_mu:
            start, end = self._lease
            if counter != end or end - start < count:
                start, end = counter, counter + max(SEQ_BLOCK, count)
                seq, commits = self._synced
                if seq == counter:  # nobody else wrote since: our view stays complete
                    self._synced = (end, commits)
            self._lease = [start + count, end]
            return start, end

    def _return_lease(self) -> None:
        """Give the unused part of the leased block back if still the newest (no gap)."""
        with self.lock, self._lease_mu:
            start, end = self._lease
            self._lease = [0, 0]
            state = self.live.read()
            if state is None or start >= end or state[0] != end:
                return
            self.live.write(start, state[1], state[2])
            seq, commits = self._synced
            if seq == end:
                self._synced = (start, commits)

    def update(self, call: Call) -> None:
        """Record a new state of a node already appended (output, status...)."""
        self._record(call)

    def _record(self, *calls: Call, new: bool = False, written: bool = False) -> None:
        """Record the states of ``calls`` (a row each, durable before this returns;
        ``written``: by the caller) and hold them for the commit; ``new``: just appended.
        A failed write (disk full) raises one :class:`StoreError`, the states kept."""
        rows = [] if written else [(call.id, node_record(call)) for call in calls]
        with self._mu:
            unindexed = self._unindexed
            for call in calls:
                node_id = call.id
                if new or self._nodes.get(node_id) is call:  # (no LRU move: never dropped)
                    self._nodes[node_id] = call
                else:
                    self._cache(call)
                unindexed[node_id] = call
                self._dirty[node_id] = call
                if call.metadata.get("status", COMPLETED) in OPEN_STATUSES:  # is_open
                    self._open.add(node_id)
                else:
                    self._open.discard(node_id)
        try:  # (outside _mu: the write lock is always taken first)
            if rows:
                self.live.put_rows(rows)
        except BaseException:  # (a full disk, a Ctrl-C) held: the commit writes them first
            with self._mu:
                self._unsaved.update((call.id, call) for call in calls)
            raise
        if self._unsaved:
            with self._mu:
                for call in calls:
                    self._unsaved.pop(call.id, None)
        if events._listeners:  # (read inline: the hot path)
            for call in calls:
                events.emit(self.id, call.to_dict())

    def commit(self, message: str) -> str | None:
        """Commit this process's changed nodes and ``meta.json`` (one commit, one pack)."""
        try:
            if self._unsaved:  # the rows a failed write left out, before the commit's
                put = self.live.put_rows
                self._flush(
                    self._unsaved, lambda calls: put([(c.id, node_record(c)) for c in calls])
                )
            with self.lock, self._mu:
                sha = self._commit_locked(message)
        except OSError as exc:  # disk full, read-only, ulimit -f: one line, nothing lost
            if isinstance(exc, SessionError):
                raise
            reason = exc.strerror or str(exc)
            where = f" ({exc.filename})" if exc.filename else ""
            raise StoreError(f"session {self.id}: commit failed: {reason}{where}") from exc
        return sha

    def _commit_locked(self, message: str) -> str | None:
        """The commit (the caller holds the lock); returns its sha."""
        if not self._dirty:
            return None
        files: dict[str, bytes | None] = {}
        for call in self._dirty.values():
            if call.is_open:  # (again: an interrupt inside _record can leave it behind)
                self._open.add(call.id)
            else:
                self._open.discard(call.id)
            files[self._path_of(call)] = node_record(call)
        self.live.put_index([row_of(call) for call in self._dirty.values()])
        _seq, _turn, head = self._counters()
        self._load_meta(quiet=True)  # what other processes wrote (a title…), then ours
        self.meta.update({"v": META_VERSION, "id": self.id, "head_id": head})
        turns = self.meta.get("turns")  # every turn committed so far, other lines' too
        turns = (turns if type(turns) is int else 0) + len(self._new_turns)
        self.meta.update({"turns": turns, "updated_at": time.time()})
        meta = json.dumps(redact_shown(jsonable(self.meta)), indent=1, ensure_ascii=False)
        atomic_write(self.path / "meta.json", meta.encode())
        files["meta.json"] = meta.encode()
        parent = self.git.read_ref()  # (the ref is read once a commit, not at every step)
        if parent is not None and parent.hex() != self.live.derived():
            self._follow_git()  # moved without the rows (a killed writer's last commit)
        sha = self.git.commit_on(
            parent, files, redact_secrets(message), author=current_author().ident
        )
        for node_id in self._dirty:
            self._unindexed.pop(node_id, None)
        self._dirty.clear()
        self._trim()  # the turn's new nodes are saved now: the cache's bound holds again
        self._new_turns.clear()
        self._meta_changes.clear()
        # the rows follow the commit; an open node's record stays for recovery
        commits = self.live.drop_rows(keep=self._open, commit=sha.hex())
        seq, synced_commits = self._synced
        if synced_commits == commits - 1:  # only ours since the view was complete
            self._synced = (seq, commits)
        return sha.hex()

    def _path_of(self, call: Call) -> str:
        """The file of ``call`` in git: its row's (arrived under another name) if a node
        file of that id (``live.db`` may come from elsewhere), else the usual one."""
        found = self.live.query("SELECT path FROM nodes WHERE id = ?", (call.id,))
        path = found[0][0] if found else None
        if (
            isinstance(path, str)
            and NODE_FILE.fullmatch(path)
            and path.endswith(f"-{call.id}.json")
        ):
            return path
        return node_relpath(call)

    def _committed(self, call: Call) -> bool:
        """Whether ``call``'s node file is in HEAD (a dead writer's nodes committed open)."""
        folder, _, name = node_relpath(call).rpartition("/")
        return name in self.git.tree_at(folder)

    def end_turn(self, turn: int) -> None:
        """Close the nodes of ``turn`` left ``running`` (abandoned by an interrupt, a
        second Ctrl-C in a ``finally``): they end ``interrupted``."""
        self._close_open(lambda call: call.turn == turn and call.status == RUNNING)

    def _close_open(self, which: Callable[[Call], bool]) -> None:
        with self._mu:
            ids = list(self._open)
        for node_id in ids:
            call = self._readable(node_id)
            if call is not None and call.is_open and which(call):
                status = UNANSWERED if call.status == AWAITING else INTERRUPTED
                call.metadata.update(status=status, abandoned=True)
                self._record(call)

    def close(self) -> None:
        with self._mu:
            self._close_open(lambda _call: True)  # this process will not finish them
            if self._dirty:
                self.commit("flush on close")
            with suppress(OSError):
                self._return_lease()
            self.git.close()  # a roll-up running is waited for a few seconds, then ended
            self.live.close()
