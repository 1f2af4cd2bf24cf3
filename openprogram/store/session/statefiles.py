"""The session's own state files under ``.state/`` (never committed, never shared): the
session lock, the shared counters, and each process's journal of node events (and
claiming and reading the journals of writers that died).

Everything here survives ``SIGKILL`` of the writing process: the counters live in one
small file updated in place under an ``flock``, and each process appends node events to
its own journal with one ``write()`` per event, so the page cache holds them even if the
process dies right after.
"""

from __future__ import annotations

import fcntl
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


class Counters:
    """``next seq``, ``next turn`` and HEAD, shared by every process writing a session.

    Read and written in place (one ``pread``/``pwrite``) while the session lock is held.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = open_state_file(path, os.O_RDWR)

    def read(self) -> tuple[int, int, str | None] | None:
        raw = os.pread(self._fd, _STATE.size, 0)
        if len(raw) != _STATE.size:
            return None
        seq, turn, head = _STATE.unpack(raw)
        try:
            head_id = head.rstrip(b"\0").decode() or None
        except UnicodeDecodeError:
            return None
        if not (0 <= seq < MAX_COUNT and 1 <= turn < MAX_COUNT):  # damaged: recomputed
            return None
        return seq, turn, head_id

    def write(self, seq: int, turn: int, head_id: str | None) -> None:
        os.pwrite(self._fd, _STATE.pack(seq, turn, (head_id or "").encode()[:48]), 0)

    def bump_commits(self) -> tuple[int, int]:
        """Count one more commit (by any process); returns (commits, commits at last maintain)."""
        raw = os.pread(self._fd, _MAINT.size, _STATE.size)
        commits, maintained = _MAINT.unpack(raw) if len(raw) == _MAINT.size else (0, 0)
        os.pwrite(self._fd, _MAINT.pack(commits + 1, maintained), _STATE.size)
        return commits + 1, maintained

    def commits(self) -> int:
        """Commits made so far (by any process)."""
        raw = os.pread(self._fd, _MAINT.size, _STATE.size)
        return _MAINT.unpack(raw)[0] if len(raw) == _MAINT.size else 0

    def set_maintained(self) -> None:
        raw = os.pread(self._fd, _MAINT.size, _STATE.size)
        commits = _MAINT.unpack(raw)[0] if len(raw) == _MAINT.size else 0
        os.pwrite(self._fd, _MAINT.pack(commits, commits), _STATE.size)

    def close(self) -> None:
        os.close(self._fd)


class Journal:
    """This process's append-only log of node states for one session.

    The journal is ``flock``-ed while its process lives: another process that can lock it
    knows its writer is gone and replays it (crash recovery).
    """

    def __init__(self, directory: Path) -> None:
        ensure_dir(directory.parent, directory.name)
        self.path = directory / f"{os.getpid()}-{os.urandom(4).hex()}.jsonl"
        self._fd = open_state_file(self.path, os.O_WRONLY | os.O_APPEND)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def append(self, record: bytes) -> None:
        os.write(self._fd, record + b"\n")

    def truncate(self) -> None:
        os.ftruncate(self._fd, 0)

    def close(self, *, remove: bool) -> None:
        if remove:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
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
    for line in lines[:-1]:  # the last is empty, or torn by a kill mid-write: not damage
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
