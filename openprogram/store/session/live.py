"""A session's live state: ``.state/live.db``, a SQLite database in WAL mode (stdlib
``sqlite3``) beside the repository, never committed, never shared.  It holds what is not in
git yet and what every writing process of the session shares:

- ``state(k, v)``: ``seq`` (the end of the last block of seqs leased), ``turn`` (the next
  turn number), ``head`` (HEAD's node id), ``commit`` (the commit the ``nodes`` rows are
  derived to), ``commits`` (made, by any process);
- ``rows(id, owner, body)``: the newest state of each node of a turn in flight not yet
  committed, or still open, with the process that wrote it (``host:pid:start time``);
- ``nodes``: the one index (:mod:`index`), derived from git for every committed turn, with
  the rows a process put for its nodes in flight;
- ``counts``, ``usage``, ``llm_turns``: the session's totals, kept from the ``nodes`` rows
  by triggers (:func:`index.keep_totals`).

Every change is one ``BEGIN IMMEDIATE`` transaction: :attr:`LiveState.lock` is the
session's write lock (re-entrant, across threads and processes).  A row survives
``SIGKILL`` of its writer once the call that wrote it returns; the next open turns dead
owners' rows into a ``recovery`` commit.  Nothing is memory-mapped: a full disk ends a write
in one :class:`StoreError`.  A process keeps its connection across opens, never in a forked
child or past the file's replacement (decision 0061).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import stat
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from operator import itemgetter
from pathlib import Path
from typing import Any

from openprogram.context.nodes import MAX_COUNT, Call
from openprogram.errors import StoreError
from openprogram.store.session.index import (
    BULK_AFTER,
    BULK_BEFORE,
    PUT_COMMITTED,
    PUT_STATE,
    Row,
    ctrl_c_landed,
    keep_totals,
)
from openprogram.store.session.index import SCHEMA as NODES_SCHEMA
from openprogram.store.session.records import own_owner, owner_alive, parsed, recovered

DB_NAME = "live.db"
DB_FILES = (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"{DB_NAME}-journal")
BUSY_MS = 500  # one wait for another writer's transaction; waited again until it ends
PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL",
           f"PRAGMA journal_size_limit={4 << 20}")  # fmt: skip
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS state (k TEXT PRIMARY KEY, v)",
    "CREATE TABLE IF NOT EXISTS rows (id TEXT PRIMARY KEY, owner TEXT NOT NULL, body BLOB)"
    " WITHOUT ROWID",  # one b-tree: a row written is one page or two
    *NODES_SCHEMA,
)
PUT_ROW = "INSERT OR REPLACE INTO rows (id, owner, body) VALUES (?, ?, ?)"
# the three counters as one row (three key lookups: cheaper than fetching every row)
READ_COUNTERS = "SELECT " + ", ".join(
    f"(SELECT v FROM state WHERE k = '{key}')" for key in ("seq", "turn", "head")
)
# an upsert changes a value in place: a REPLACE would delete the row and insert it again,
# writing the key's index page too (one page more in the WAL at every HEAD move)
PUT_VALUE = "INSERT INTO state (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
# Connections kept across opens (decision 0061): the idle ones by database (LRU), every one
# this process made and has not closed, and, in a forked child, the parent's: kept unused
# and never closed (that would act on the parent's SQLite locks).
MAX_IDLE = 8
Identity = tuple[int, int]  # (device, inode) of the file a connection opened
_IDLE: dict[Path, tuple[sqlite3.Connection, Identity]] = {}
_MADE: dict[int, sqlite3.Connection] = {}
_INHERITED: list[sqlite3.Connection] = []
_POOL, _POOL_PID = threading.Lock(), os.getpid()
_CLOSED = sqlite3.connect(":memory:")
_CLOSED.close()  # what a closed LiveState holds: any use raises


def _remove_if_not_regular(path: Path) -> None:
    """A symlink, FIFO or directory where a database file goes is removed, never
    followed or opened (a folder someone else wrote; what of a folder cannot be removed
    is left for SQLite to refuse in one line)."""
    with suppress(FileNotFoundError):
        mode = os.lstat(path).st_mode
        if stat.S_ISDIR(mode):
            shutil.rmtree(path, ignore_errors=True)
        elif not stat.S_ISREG(mode):
            os.unlink(path)


def _identity(path: str | Path) -> Identity | None:
    with suppress(OSError):
        found = os.lstat(path)
        return found.st_dev, found.st_ino
    return None


def _after_fork() -> None:
    global _POOL, _POOL_PID
    _POOL, _POOL_PID = threading.Lock(), os.getpid()  # (a parent's thread may have held it)
    _INHERITED.extend(_MADE.values())
    _MADE.clear()
    _IDLE.clear()


def _take(path: Path) -> tuple[sqlite3.Connection, Identity] | None:
    """The idle connection kept to ``path``, if the file is still the one it opened (an
    open file's inode is never reused: a new file has another)."""
    if os.getpid() != _POOL_PID:  # (a fork that ran no hook)
        _after_fork()
    with _POOL:
        kept = _IDLE.pop(path, None)
    if kept is not None and kept[1] != _identity(path):  # deleted, moved or replaced
        _release(kept[0])
        return None
    return kept


def _keep(path: Path, db: sqlite3.Connection, identity: Identity) -> None:
    with _POOL:
        if _MADE.get(id(db)) is not db:  # a parent's (in a forked child)
            return
        stale = [_IDLE.pop(path)[0]] if path in _IDLE else []
        _IDLE[path] = (db, identity)
        while len(_IDLE) > MAX_IDLE:  # the least recently used is closed
            stale.append(_IDLE.pop(next(iter(_IDLE)))[0])
    for old in stale:
        _release(old)


def _release(db: sqlite3.Connection) -> None:
    """Close ``db`` for good (never a parent's, in a forked child)."""
    with _POOL:
        if _MADE.pop(id(db), None) is not db:
            return
    with suppress(sqlite3.Error):
        db.close()  # (rolls back a transaction left open)


def discard(state_dir: Path) -> None:
    """Close the connection kept to the database in ``state_dir`` (a session deleted)."""
    with _POOL:
        kept = _IDLE.pop(state_dir / DB_NAME, None)
    if kept is not None:
        _release(kept[0])


@atexit.register
def _close_idle() -> None:
    with _POOL:
        kept = list(_IDLE.values())
        _IDLE.clear()
    for db, _opened in kept:
        _release(db)


# closed before a fork too: a child's own connection to a file its parent has open shares
# the parent's SQLite lock records (copied), takes no lock of its own, and a close in the
# parent then checkpoints and deletes the WAL the child is writing (its writes lost)
os.register_at_fork(before=_close_idle, after_in_child=_after_fork)


class WriteLock:
    """The session's write lock: a ``BEGIN IMMEDIATE`` transaction on the live database,
    re-entrant (the outermost ``with`` begins and commits; an exception rolls back)."""

    def __init__(self, live: LiveState) -> None:
        self._live = live
        self._rlock = threading.RLock()
        self._depth = 0
        self._owner = 0

    def held(self) -> bool:
        """Whether the calling thread holds it."""
        return self._depth > 0 and self._owner == threading.get_ident()

    def __enter__(self) -> WriteLock:
        self._rlock.acquire()
        if self._depth == 0:
            try:
                self._live._begin()
            except BaseException:
                self._rlock.release()
                raise
            self._owner = threading.get_ident()
        self._depth += 1
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if self._depth == 1:
                self._live._end(commit=exc_type is None)
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._owner = 0
            self._rlock.release()


class LiveState:
    """The live database of one session, one connection per session per process."""

    def __init__(self, state_dir: Path, label: str = "") -> None:
        self.path = state_dir / DB_NAME
        self._file = str(self.path)  # (what every write's check stats: no Path to convert)
        self.label = label or state_dir.parent.name
        self.lock = WriteLock(self)
        self._db, self._inode = _take(self.path) or self._connect()

    def _connect(self) -> tuple[sqlite3.Connection, Identity]:
        """A connection to the database (made if missing; a link or FIFO in the way is
        removed first), and the inode it opened."""
        for name in DB_FILES:
            _remove_if_not_regular(self.path.parent / name)
        try:
            return self._open_db()
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorname", "") != "SQLITE_NOTADB":
                raise self._error(exc) from exc
        for name in DB_FILES:  # not a database (damaged, planted): derived again from git
            (self.path.parent / name).unlink(missing_ok=True)
        try:
            return self._open_db()
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    def _open_db(self) -> tuple[sqlite3.Connection, Identity]:
        db = sqlite3.connect(
            str(self.path), timeout=BUSY_MS / 1000, isolation_level=None,
            check_same_thread=False,
        )  # fmt: skip
        with _POOL:
            _MADE[id(db)] = db
        try:
            for statement in PRAGMAS + SCHEMA:
                db.execute(statement)
            keep_totals(db)
        except BaseException:
            _release(db)
            raise
        identity = _identity(self.path)
        if identity is None:
            _release(db)
            raise self._error(FileNotFoundError(f"{self.path} gone"))
        return db, identity

    # -- transactions ------------------------------------------------------------------
    def _error(self, exc: BaseException) -> BaseException:
        failed_in_function = str(exc).startswith("user-defined function raised")
        if failed_in_function and ctrl_c_landed():  # in a totals function (SQLite kept only
            return KeyboardInterrupt()  # that it failed): delivered here
        text = " ".join(str(exc).split()) or type(exc).__name__
        name = getattr(exc, "sqlite_errorname", "")
        if name.startswith(("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_CANTOPEN")):
            text += " (is the disk full, the folder read-only, or a file size limit set?)"
        return StoreError(f"session {self.label}: live state {self.path}: {text}")

    def _begin(self) -> None:
        if _identity(self._file) != self._inode:  # deleted (or replaced) since: never write
            _release(self._db)  # to a lost file
            self._db, self._inode = self._connect()
        db = self._db
        if db.in_transaction:  # left by an interrupt between BEGIN and COMMIT: finish it
            self._end(commit=True)
        self._waiting_out_others("BEGIN IMMEDIATE")

    def _end(self, *, commit: bool) -> None:
        db = self._db
        if not db.in_transaction:  # (SQLite rolled back a failed statement's transaction)
            return
        try:
            db.execute("COMMIT" if commit else "ROLLBACK")
        except sqlite3.Error as exc:
            if db.in_transaction:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise self._error(exc) from exc

    def _autocommit(self, sql: str, args: tuple[Any, ...]) -> None:
        """One statement in its own transaction (the caller holds the lock's ``RLock``),
        waiting for another process's transaction as :meth:`_begin` does."""
        if self._db.in_transaction:
            self._end(commit=True)
        self._waiting_out_others(sql, args)

    def _waiting_out_others(self, sql: str, args: tuple[Any, ...] = ()) -> None:
        """Run ``sql``; while another process's transaction holds the database (busy or
        locked: each try waits ``BUSY_MS``), try again; any other failure is one error."""
        while True:
            try:
                self._db.execute(sql, args)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise self._error(exc) from exc
            except sqlite3.Error as exc:
                raise self._error(exc) from exc

    def _execute(self, sql: str, args: Iterable[Any] = ()) -> list[Any]:
        """The rows of ``sql``, one thread at a time (one waiting with the GIL deadlocks
        with one whose statement calls the totals' functions, ``index.keep_totals``)."""
        with self.lock._rlock:
            try:
                return self._db.execute(sql, tuple(args)).fetchall()
            except sqlite3.Error as exc:
                raise self._error(exc) from exc

    def _values(self) -> dict[str, Any]:
        return dict(self._execute("SELECT k, v FROM state"))

    def _many(self, sql: str, rows: list[Any]) -> None:
        """``sql`` once per row, in one transaction (the calling thread's, if it holds the
        lock)."""
        if not self.lock.held():
            with self.lock:
                self._many(sql, rows)
            return
        try:
            if len(rows) == 1:  # (the hot path: ``executemany`` costs more for one)
                self._db.execute(sql, rows[0])
            else:
                self._db.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    def _set(self, **values: Any) -> None:
        self._many(PUT_VALUE, list(values.items()))

    # -- counters ----------------------------------------------------------------------
    def read(self) -> tuple[int, int, str | None] | None:
        """(next seq, next turn, HEAD id), or None when missing or damaged (the caller
        rebuilds them from git)."""
        seq, turn, head = self._execute(READ_COUNTERS)[0]
        if type(seq) is not int or type(turn) is not int:
            return None
        if not (0 <= seq < MAX_COUNT and 1 <= turn < MAX_COUNT):
            return None
        if head is not None and (type(head) is not str or not 0 < len(head) <= 48):
            return None
        return seq, turn, head

    def write(
        self, seq: int, turn: int, head_id: str | None,
        was: tuple[int, int, str | None] | None = None,
    ) -> None:  # fmt: skip
        """Set the counters; ``was``: what :meth:`read` gave in this transaction (the values
        that did not change are not written again)."""
        values = [("seq", seq), ("turn", turn), ("head", head_id)]
        if was is not None:
            values = [item for item, old in zip(values, was, strict=True) if item[1] != old]
        if values:
            self._many(PUT_VALUE, values)

    def stamp(self) -> tuple[int, int]:
        """(next seq, commits made): what moves when any process leases seqs or commits."""
        values = self._values()
        return _int(values.get("seq")), _int(values.get("commits"))

    def bump_commits(self) -> int:
        """Count one more commit; returns the commits made so far (by any process)."""
        with self.lock:
            commits = _int(self._values().get("commits")) + 1
            self._set(commits=commits)
            return commits

    # -- rows of turns in flight -------------------------------------------------------
    def put_rows(self, rows: Iterable[tuple[str, bytes]], owner: str | None = None) -> None:
        """Record the newest state of nodes (id, JSON body) for ``owner`` (this process)."""
        who = owner or own_owner()
        items = [(node_id, who, body) for node_id, body in rows]
        lock = self.lock
        if len(items) == 1 and not lock.held():  # the hot path: one statement, autocommit
            with lock._rlock:  # (not inside another thread's transaction)
                self._autocommit(PUT_ROW, items[0])
            return
        self._many(PUT_ROW, items)

    def drop_rows(self, keep: Iterable[str] = (), commit: str | None = None) -> None:
        """Forget this process's rows (committed, in ``commit``: the ``nodes`` rows follow
        it then), but those of the ids in ``keep`` (still open)."""
        keep_ids = list(keep)
        with self.lock:
            if commit is not None:
                self._set(commit=commit)
            if not keep_ids:
                self._execute("DELETE FROM rows WHERE owner = ?", (own_owner(),))
                return
            marks = ",".join("?" * len(keep_ids))
            self._execute(
                f"DELETE FROM rows WHERE owner = ? AND id NOT IN ({marks})",
                (own_owner(), *keep_ids),
            )

    def drop_owners(self, owners: Iterable[str]) -> None:
        with self.lock:
            for owner in owners:
                self._execute("DELETE FROM rows WHERE owner = ?", (owner,))

    # -- the nodes table ---------------------------------------------------------------
    def query(self, sql: str, args: Iterable[Any] = ()) -> list[Any]:
        """The rows ``sql`` selects: a read (WAL: other processes' writers never block it),
        one thread of this process at a time on the connection."""
        return self._execute(sql, args)

    def put_index(self, rows: list[Row]) -> None:
        """Put the index rows of nodes this process recorded (one transaction)."""
        self._many(PUT_STATE, rows)

    def derived(self) -> str | None:
        """The commit the ``nodes`` rows follow (None: none yet, a new database)."""
        value = self._values().get("commit")
        return value if type(value) is str else None

    def follow(self, commit: str, rows: list[Row], removed: list[str] | None) -> None:
        """The ``nodes`` rows now follow ``commit``: ``rows`` from it put, the ids
        ``removed`` dropped (None: every row first) — never the row of a node in flight."""
        with self.lock:
            try:
                if removed is None:  # every row: indexes and totals made after, in bulk
                    for statement in BULK_BEFORE:
                        self._db.execute(statement)
                    self._db.executemany(PUT_COMMITTED, sorted(rows, key=itemgetter(0)))
                    for statement in BULK_AFTER:
                        self._db.execute(statement)
                else:
                    self._db.executemany(
                        "DELETE FROM nodes WHERE id = ? AND id NOT IN (SELECT id FROM rows)",
                        [(node_id,) for node_id in removed],
                    )
                    self._db.executemany(PUT_COMMITTED, rows)
            except sqlite3.Error as exc:
                raise self._error(exc) from exc
            self._set(commit=commit)

    def _others(self, *, alive: bool) -> Iterator[tuple[str, list[dict[str, Any]], int]]:
        """(owner, its records, its rows not JSON objects) of each other process with rows
        that is ``alive`` (or gone)."""
        found = self._execute("SELECT DISTINCT owner FROM rows ORDER BY owner")
        for owner in (str(owner) for (owner,) in found):
            if owner != own_owner() and owner_alive(owner) == alive:
                rows = self._execute("SELECT body FROM rows WHERE owner = ? ORDER BY id", (owner,))
                yield owner, *parsed(body for (body,) in rows)

    def live_rows(self) -> list[tuple[str, list[dict[str, Any]]]]:
        """(owner pid, its records) of the other processes alive with rows: what a view
        may show of their turns before they commit."""
        return [(owner.rsplit(":", 2)[-2], found) for owner, found, _ in self._others(alive=True)]

    def dead_rows(self) -> tuple[list[Call], list[str], list[tuple[str, str]]]:
        """The nodes recorded by processes that are gone, open ones closed
        (:func:`records.recovered`), their owners (to drop once the nodes are committed),
        and (where, reason) for owners with records skipped."""
        found: dict[str, Call] = {}
        owners: list[str] = []
        skipped: list[tuple[str, str]] = []
        for owner, records, bad in self._others(alive=False):
            owners.append(owner)
            calls, reasons = recovered(records)
            found.update((call.id, call) for call in calls)
            reasons[:0] = [f"{bad} row(s) not JSON objects"] if bad else []
            if reasons:
                where = f"{self.path} (process {owner})"
                skipped.append((where, f"{len(reasons)} record(s) skipped: {reasons[0]}"))
        return list(found.values()), owners, skipped

    def changes(self) -> int:
        """Rows inserted, replaced or deleted through this connection (a benchmark's count)."""
        with self.lock._rlock:
            return self._db.total_changes

    def close(self, *, keep: bool = True) -> None:
        """Done: the connection is kept for the next open in this process, or closed."""
        db, self._db = self._db, _CLOSED
        if db is _CLOSED:
            return
        if keep and not db.in_transaction:
            _keep(self.path, db, self._inode)
        else:
            _release(db)


def _int(value: Any) -> int:
    return value if type(value) is int else 0


@contextmanager
def opened(state_dir: Path, *, keep: bool = True) -> Iterator[LiveState]:
    """The live state of a session folder for one short use (a CLI command, a child;
    not ``keep``: a folder about to move)."""
    live = LiveState(state_dir)
    try:
        yield live
    finally:
        live.close(keep=keep)
