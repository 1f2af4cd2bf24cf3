"""A session's live state: ``.state/live.db``, SQLite in WAL mode beside the repository,
never committed.  ``state(k, v)`` holds the counters (``seq``, ``turn``, ``head``), the
commit the ``nodes`` rows follow (``commit``) and the commits made (``commits``); ``rows``
the newest record of each node in flight with its writer (``host:pid:start time``);
``nodes`` and the totals are :mod:`index`'s.

Every change is one ``BEGIN IMMEDIATE`` transaction (:attr:`LiveState.lock`, re-entrant,
across threads and processes).  A row survives ``SIGKILL`` once the call that wrote it
returns; the next open commits dead writers' rows (``recovery``).  Nothing is
memory-mapped: a full disk is one :class:`StoreError`.  A process keeps its connection
across opens, never in a forked child nor past the file's replacement (decision 0061).
"""

from __future__ import annotations

import atexit
import os
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
from openprogram.store.session.safegit import remove

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
READ_COUNTERS = "SELECT " + ", ".join(  # three key lookups: cheaper than every row
    f"(SELECT v FROM state WHERE k = '{key}')" for key in ("seq", "turn", "head")
)
# an upsert changes the value in place (a REPLACE would rewrite the key's index page too)
PUT_VALUE = "INSERT INTO state (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
# Connections kept across opens (decision 0061): the idle ones by database (LRU), every one
# this process made and has not closed, and, in a forked child, the parent's (never used
# nor closed: that would act on the parent's SQLite locks).
MAX_IDLE = 8
Identity = tuple[int, int]  # (device, inode) of the file a connection opened
_IDLE: dict[Path, tuple[sqlite3.Connection, Identity]] = {}
_MADE: dict[int, sqlite3.Connection] = {}
_INHERITED: list[sqlite3.Connection] = []
_POOL, _POOL_PID = threading.Lock(), os.getpid()
_CLOSED = sqlite3.connect(":memory:")
_CLOSED.close()  # what a closed LiveState holds: any use raises


def _remove_if_not_regular(path: Path) -> None:
    """A symlink, FIFO or directory where a database file goes is removed, never followed
    (what cannot be removed is left for SQLite to refuse in one line)."""
    with suppress(OSError):
        if not stat.S_ISREG(os.lstat(path).st_mode):
            remove(path)


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
    """The idle connection to ``path`` if the file is still the one it opened."""
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
    kept = _take(state_dir / DB_NAME)
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
        """A new connection (a link or FIFO in the way removed first) and its file."""
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
        if str(exc).startswith("user-defined function raised") and ctrl_c_landed():
            return KeyboardInterrupt()  # in a totals function (SQLite kept only that it failed)
        text = " ".join(str(exc).split()) or type(exc).__name__
        name = getattr(exc, "sqlite_errorname", "")
        if name.startswith(("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_CANTOPEN")):
            text += " (is the disk full, the folder read-only, or a file size limit set?)"
        return StoreError(f"session {self.label}: live state {self.path}: {text}")

    def _begin(self) -> None:
        if _identity(self._file) != self._inode:  # deleted or replaced: never write to it
            _release(self._db)
            self._db, self._inode = self._connect()
        self._autocommit("BEGIN IMMEDIATE")

    def _end(self, *, commit: bool) -> None:
        db = self._db
        if not db.in_transaction:  # (SQLite rolled back a failed statement's transaction)
            return
        try:
            db.execute("COMMIT" if commit else "ROLLBACK")
        except sqlite3.Error as exc:
            if db.in_transaction:
                with suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise self._error(exc) from exc

    def _autocommit(self, sql: str, args: tuple[Any, ...] = ()) -> None:
        """Run ``sql`` (a transaction an interrupt left open finished first), again while
        another process's transaction holds the database."""
        if self._db.in_transaction:
            self._end(commit=True)
        while True:
            try:
                self._db.execute(sql, args)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise self._error(exc) from exc
            except sqlite3.Error as exc:
                raise self._error(exc) from exc

    def query(self, sql: str, args: Iterable[Any] = ()) -> list[Any]:
        """The rows of ``sql`` (WAL: other writers never block a read), one thread at a
        time (one waiting with the GIL deadlocks with one in a totals function)."""
        with self.lock._rlock:
            try:
                return self._db.execute(sql, tuple(args)).fetchall()
            except sqlite3.Error as exc:
                raise self._error(exc) from exc

    def _values(self) -> dict[str, Any]:
        return dict(self.query("SELECT k, v FROM state"))

    def _many(self, sql: str, rows: list[Any]) -> None:
        """``sql`` once per row, in one transaction (the calling thread's, if held)."""
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

    # -- counters ----------------------------------------------------------------------
    def read(self) -> tuple[int, int, str | None] | None:
        """(next seq, next turn, HEAD id); None when missing or damaged (rebuilt then)."""
        seq, turn, head = self.query(READ_COUNTERS)[0]
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
        """Set the counters; those equal to ``was`` (:meth:`read`'s, this transaction) stay."""
        values = [("seq", seq), ("turn", turn), ("head", head_id)]
        if was is not None:
            values = [item for item, old in zip(values, was, strict=True) if item[1] != old]
        if values:
            self._many(PUT_VALUE, values)

    def stamp(self) -> tuple[int, int]:
        """(next seq, commits made): what moves when any process leases seqs or commits."""
        values = self._values()
        return _int(values.get("seq")), _int(values.get("commits"))

    # -- rows ---------------------------------------------------------------------------
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

    def drop_rows(self, keep: Iterable[str] = (), commit: str | None = None) -> int:
        """Forget this process's rows but those of ``keep`` (still open); ``commit``: made
        (the ``nodes`` rows follow it, one more commit counted).  The commits made."""
        keep_ids = list(keep)
        with self.lock:
            marks = ",".join("?" * len(keep_ids))
            sql = f"DELETE FROM rows WHERE owner = ? AND id NOT IN ({marks})"
            self.query(sql, (own_owner(), *keep_ids))
            commits = _int(self._values().get("commits"))
            if commit is not None:
                commits += 1
                self._many(PUT_VALUE, [("commit", commit), ("commits", commits)])
            return commits

    def drop_owners(self, owners: Iterable[str]) -> None:
        self._many("DELETE FROM rows WHERE owner = ?", [(owner,) for owner in owners])

    def put_index(self, rows: list[Row]) -> None:
        """Put the ``nodes`` rows of nodes this process recorded (one transaction)."""
        self._many(PUT_STATE, rows)

    def derived(self) -> str | None:
        """The commit the ``nodes`` rows follow (None: a new database)."""
        value = self._values().get("commit")
        return value if type(value) is str else None

    def follow(self, commit: str, rows: list[Row], removed: list[str] | None) -> None:
        """The ``nodes`` rows now follow ``commit``: ``rows`` put, the ids ``removed``
        dropped (None: every row first), never the row of a node in flight."""
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
            self._many(PUT_VALUE, [("commit", commit)])

    def _others(self, *, alive: bool) -> Iterator[tuple[str, list[dict[str, Any]], int]]:
        """(owner, its records, its rows not JSON objects) of each other process with rows
        that is ``alive`` (or gone)."""
        found = self.query("SELECT DISTINCT owner FROM rows ORDER BY owner")
        for owner in (str(owner) for (owner,) in found):  # a planted BLOB owner: dead
            if owner != own_owner() and owner_alive(owner) == alive:  # bodies of these only
                rows = self.query("SELECT body FROM rows WHERE owner = ? ORDER BY id", (owner,))
                yield owner, *parsed(body for (body,) in rows)

    def live_rows(self) -> list[tuple[str, list[dict[str, Any]]]]:
        """(pid, records) of the other processes alive with rows (their turns in flight)."""
        return [(owner.rsplit(":", 2)[-2], found) for owner, found, _ in self._others(alive=True)]

    def dead_rows(self) -> tuple[list[Call], list[str], list[tuple[str, str]]]:
        """The nodes of processes that are gone (open ones closed,
        :func:`records.recovered`), their owners, and (where, reason) of records skipped."""
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
    """The live state of a session folder for one short use (not ``keep``: about to move)."""
    live = LiveState(state_dir)
    try:
        yield live
    finally:
        live.close(keep=keep)
