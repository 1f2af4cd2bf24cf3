"""The session's own state files under ``.state/`` (never committed, never shared): the
session lock, the shared counters, and each process's journal of node events (and
claiming and reading the journals of writers that died).

Everything here survives ``SIGKILL`` of the writing process: the counters live in one
small file updated in place under an ``flock`` (through a shared memory map: the page
cache, no system call per read or write), and each process appends node events to
its own journal, each event copied into a shared memory map of the file before the call
that made it goes on: the page cache holds it even if the process dies right after, as
it would after a ``write()``, without a system call per event.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import threading
from pathlib import Path
from typing import Any

from openprogram.context.nodes import MAX_COUNT
from openprogram.store.session.files import (
    RefusedFile,
    ensure_dir,
    is_real_dir,
    loads,
    open_regular,
    open_state_file,
)

MAX_JOURNAL_BYTES = 256 << 20  # a dead writer's journal is read up to this
JOURNAL_MAP_BYTES = 256 << 10  # a journal's first map (doubled when full)
_ZERO_CHUNK = 4096
_ZEROS = bytes(_ZERO_CHUNK)


class SessionLock:
    """A cross-process (``flock``) and cross-thread (``RLock``) re-entrant lock."""

    def __init__(self, path: Path) -> None:
        self._fd = open_state_file(path, os.O_RDWR)
        self._rlock = threading.RLock()
        self._depth = 0

    def __enter__(self) -> SessionLock:
        self._rlock.acquire()
        if self._depth == 0:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            except BaseException:
                self._rlock.release()
                raise
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._rlock.release()

    def close(self) -> None:
        os.close(self._fd)


_STATE = struct.Struct("<qq48s")  # next seq, next turn, head id
_MAINT = struct.Struct("<qq")  # after _STATE: commits made, commits at the last maintenance


_SIZE = _STATE.size + _MAINT.size


class Counters:
    """``next seq``, ``next turn`` and HEAD, shared by every process writing a session.

    Read and written in place while the session lock is held, through a shared map of the
    file (the file is first grown to its full size with zeros, which read as missing: a new
    file reads as before, ``None``).  ``next seq`` is the end of the last block of seqs a
    process leased (see ``Session``), not the next seq handed out.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = open_state_file(path, os.O_RDWR)
        if os.fstat(self._fd).st_size < _SIZE:  # never shrinks: grows what another wrote
            os.ftruncate(self._fd, _SIZE)
        self._map = mmap.mmap(self._fd, _SIZE)

    def read(self) -> tuple[int, int, str | None] | None:
        seq, turn, head = _STATE.unpack_from(self._map, 0)
        try:
            head_id = head.rstrip(b"\0").decode() or None
        except UnicodeDecodeError:
            return None
        if not (0 <= seq < MAX_COUNT and 1 <= turn < MAX_COUNT):  # damaged: recomputed
            return None
        return seq, turn, head_id

    def write(self, seq: int, turn: int, head_id: str | None) -> None:
        _STATE.pack_into(self._map, 0, seq, turn, (head_id or "").encode()[:48])

    def stamp(self) -> tuple[int, int]:
        """(next seq, commits made): what moves when any process leases seqs or commits."""
        return _STATE.unpack_from(self._map, 0)[0], _MAINT.unpack_from(self._map, _STATE.size)[0]

    def bump_commits(self) -> tuple[int, int]:
        """Count one more commit (by any process); returns (commits, commits at last maintain)."""
        commits, maintained = _MAINT.unpack_from(self._map, _STATE.size)
        _MAINT.pack_into(self._map, _STATE.size, commits + 1, maintained)
        return commits + 1, maintained

    def commits(self) -> int:
        """Commits made so far (by any process)."""
        return int(_MAINT.unpack_from(self._map, _STATE.size)[0])

    def set_maintained(self) -> None:
        commits = _MAINT.unpack_from(self._map, _STATE.size)[0]
        _MAINT.pack_into(self._map, _STATE.size, commits, commits)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)


class Journal:
    """This process's append-only log of node states for one session.

    JSON lines copied into a shared map of the file (sized ahead, zeros after the last
    line: a reader takes what ends in a newline, see :func:`read_journal`).  The journal
    is ``flock``-ed while its process lives: another process that can lock it knows its
    writer is gone and replays it (crash recovery).  The caller serialises appends.
    """

    def __init__(self, directory: Path) -> None:
        ensure_dir(directory.parent, directory.name)
        self.path = directory / f"{os.getpid()}-{os.urandom(4).hex()}.jsonl"
        self._fd = open_state_file(self.path, os.O_RDWR)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._used = 0
        self._map = self._mapped(JOURNAL_MAP_BYTES)

    def _mapped(self, size: int) -> mmap.mmap:
        try:  # blocks allocated now, not at the first write to each page
            os.posix_fallocate(self._fd, 0, size)
        except OSError:  # a file system without it: grown sparse
            os.ftruncate(self._fd, size)
        return mmap.mmap(self._fd, size)

    def append(self, record: bytes) -> None:
        end = self._used + len(record) + 1
        if end > len(self._map):  # full: a map twice as large (the lines stay in place)
            size = len(self._map)
            while size < end:
                size *= 2
            self._map.close()
            self._map = self._mapped(size)
        self._map[self._used : end - 1] = record
        self._map[end - 1] = 10  # b"\n": the line counts from here on
        self._used = end

    def truncate(self) -> None:
        """Forget every line: zeroed in place, the last page first (the pages stay mapped:
        no fault on the next turn's lines).  A kill meanwhile leaves whole older lines
        before the zeros, states already committed: replaying them changes nothing."""
        end = self._used
        while end > 0:
            start = max(0, end - _ZERO_CHUNK)
            self._map[start:end] = _ZEROS[: end - start]
            end = start
        self._used = 0

    def close(self, *, remove: bool) -> None:
        self._map.close()
        if remove:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
        else:  # kept for recovery: only its lines
            os.ftruncate(self._fd, self._used)
        os.close(self._fd)


def claim_dead_journals(directory: Path, own: Path | None) -> list[tuple[Path, int]]:
    """Journals whose writer is gone, each returned locked (fd) for the caller to replay."""
    claimed: list[tuple[Path, int]] = []
    if not is_real_dir(directory):
        return claimed
    for path in sorted(directory.glob("*.jsonl")):
        if own is not None and path == own:
            continue
        try:
            fd = open_regular(path)
        except FileNotFoundError:
            continue
        except RefusedFile:  # a symlink or FIFO in our own .state: debris, never read
            os.unlink(path)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # its writer is alive
            continue
        claimed.append((path, fd))
    return claimed


def live_journals(directory: Path) -> list[tuple[Path, list[dict[str, Any]]]]:
    """The records of the journals whose writer is alive (another process in the middle of
    a turn), read without taking them: what a view may show before that turn commits.  A
    journal whose writer is gone is left for the next open to recover."""
    found: list[tuple[Path, list[dict[str, Any]]]] = []
    if not is_real_dir(directory):
        return found
    for path in sorted(directory.glob("*.jsonl")):
        try:
            fd = open_regular(path)
        except (FileNotFoundError, RefusedFile):
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # its writer holds it: alive
                found.append((path, read_journal(fd)[0]))
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    return found


def read_journal(fd: int) -> tuple[list[dict[str, Any]], int]:
    """The records of a journal (its first ``MAX_JOURNAL_BYTES``), and how many lines were
    skipped: a torn last line (killed mid-write), bad JSON, not an object."""
    chunks = []
    size = 0
    while size < MAX_JOURNAL_BYTES:
        chunk = os.read(fd, min(1 << 20, MAX_JOURNAL_BYTES - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    records = []
    skipped = 0
    lines = b"".join(chunks).split(b"\n")
    for line in lines[:-1]:  # the last is empty, zeros, or torn by a kill: not damage
        try:
            record = loads(line)
        except ValueError:
            skipped += 1
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            skipped += 1
    return records, skipped
