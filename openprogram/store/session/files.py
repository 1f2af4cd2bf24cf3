"""What comes from outside this process, taken without trusting it: files someone else may
have written (never through a symlink, never a FIFO or device, bounded), atomic writes,
JSON that holds anything, session ids (they become folder names) and the person running the
process: their own git identity, found as git would but trusting nothing a session brings
(the committer of every session commit stays :data:`safegit.ACTOR_NAME`).
"""

from __future__ import annotations

import errno
import json
import os
import queue
import re
import secrets
import signal
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import orjson

from openprogram.errors import InvalidSessionId, RefusedFile, StoreError

# A file of a session folder (a node, meta.json, an index; a dead writer's row) is refused
# above MAX_FILE_BYTES, here and by an import or pull (incoming.check_history): one rule.
MAX_FILE_BYTES = 64 << 20
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
_KINDS = {
    stat.S_IFREG: "a file",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
}


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def ensure_dir(root: Path, rel: str) -> Path:
    """``root/rel`` as a real directory, made if missing: a symlink on the way is removed
    (never followed for a write), a file there is :class:`RefusedFile`."""
    path = root
    for part in rel.split("/"):
        path = path / part
        try:
            os.mkdir(path)
            continue
        except FileExistsError:  # there already (or made meanwhile by another process)
            st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            os.unlink(path)
            os.mkdir(path)
        elif not stat.S_ISDIR(st.st_mode):
            raise RefusedFile(errno.ENOTDIR, f"{_kind(st.st_mode)}, not a directory", str(path))
    return path


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (a reader sees the old or the new file); a
    symlink at the temporary file or at ``path`` is not followed (the rename replaces it),
    a folder there is :class:`StoreError`; the temporary file never left behind."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
    try:
        fd = os.open(tmp, flags, 0o644)
    except FileExistsError:  # debris of a dead process with our pid, or planted: not ours
        os.unlink(tmp)
        fd = os.open(tmp, flags, 0o644)
    try:
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        try:
            replace(tmp, path)
        except OSError as exc:  # (a folder, a mount point at ``path``)
            raise StoreError(f"{path}: cannot be replaced ({exc.strerror})") from exc
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Run the block with Ctrl-C held back until it ends, so a lock taken in it is released."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            signal.raise_signal(signal.SIGINT)


class _Closer:
    """Replaced files' descriptors, closed by one daemon thread: a rename dropping a file's
    last link frees its blocks in the call (0.1-12 ms on ext4 with ``discard``, decision
    0046), an open file at its last close.  A fork waits until every one handed over is
    closed, holding the queue's lock through it (the child starts with an empty queue)."""

    def __init__(self) -> None:
        self.queue: queue.Queue[int] = queue.Queue()
        self.thread: threading.Thread | None = None

    def close_later(self, fd: int) -> None:
        if self.thread is None:  # (two started at once: both close what they are given)
            try:
                self.thread = threading.Thread(target=self._run, name="op-close", daemon=True)
                self.thread.start()
            except RuntimeError:  # no new thread now (the interpreter exiting)
                self.thread = None
                return os.close(fd)
        self.queue.put(fd)

    def wait(self) -> None:  # every descriptor handed over so far closed
        self.queue.join()

    def _run(self) -> None:
        while True:
            fd = self.queue.get()
            with suppress(OSError):
                os.close(fd)
            self.queue.task_done()

    def before_fork(self) -> None:
        self.queue.mutex.acquire()
        while self.queue.unfinished_tasks:
            self.queue.all_tasks_done.wait()

    def after_fork_in_child(self) -> None:
        self.queue, self.thread = queue.Queue(), None


_closer = _Closer()
os.register_at_fork(
    before=_closer.before_fork,
    after_in_parent=lambda: _closer.queue.mutex.release(),
    after_in_child=_closer.after_fork_in_child,
)
wait_closed = _closer.wait  # (tests, benchmarks)


def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """``os.replace``, the replaced file freed off this path; nothing at ``dst`` followed."""
    old = None
    with suppress(OSError):  # none there (or a symlink, a socket): nothing to keep
        old = os.open(dst, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK)
    try:
        os.replace(src, dst)
    finally:
        if old is not None:
            _closer.close_later(old)


# compact UTF-8 JSON, ~10x json's speed: TypeError on what JSON cannot hold as it is, and
# ValueError on bad input or nesting past 1,024 levels (orjson's errors subclass them)
strict_dumps = orjson.dumps
loads = orjson.loads


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON of anything: what JSON cannot hold as it is is made
    :func:`jsonable` first (only when the fast encoder refuses)."""
    try:
        return strict_dumps(obj)
    except (TypeError, ValueError):
        return strict_dumps(jsonable(obj))


_INT64 = 1 << 63
MAX_DEPTH = 200  # within orjson's limits (254 to write, 1,024 to read)
MAX_VALUES = 1_000_000  # values in one document made jsonable: shared subtrees are copied


def jsonable(value: Any) -> Any:
    """A faithful, escaped form of ``value`` that any JSON encoder accepts: lone surrogates
    as ``\\udcxx`` text, integers beyond 64 bits and non-finite floats as their text, keys as
    strings, other objects by ``repr`` (or a note when that raises); a container inside
    itself, levels past ``MAX_DEPTH`` and values past ``MAX_VALUES`` are cut with a note."""
    return _jsonable(value, 0, set(), [MAX_VALUES])


def _jsonable(value: Any, depth: int, path: set[int], budget: list[int]) -> Any:
    kind = type(value)
    if kind is str:
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if value is None or kind is bool:
        return value
    if kind is int:
        if -_INT64 <= value < _INT64:
            return value
        bits = value.bit_length()
        return str(value) if bits < 14_000 else f"<int of about {int(bits * 0.30103) + 1} digits>"
    if kind is float:
        return value if value - value == 0 else repr(value)  # NaN and infinities: text
    if kind is dict or kind is list or kind is tuple:
        budget[0] -= len(value)
        if depth >= MAX_DEPTH or budget[0] < 0:
            return "…[truncated]"
        if id(value) in path:
            return "…[recursive]"
        path.add(id(value))
        try:
            if kind is dict:
                return {_key(k): _jsonable(v, depth + 1, path, budget) for k, v in value.items()}
            return [_jsonable(v, depth + 1, path, budget) for v in value]
        finally:
            path.discard(id(value))
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<{kind.__qualname__} (repr failed: {type(exc).__name__})>"
    return _jsonable(text, depth, path, budget)


def _key(key: Any) -> str:
    text = jsonable(key)
    return text if type(text) is str else json.dumps(text)


def read_bytes(path: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """A whole small file with the fewest syscalls; :class:`RefusedFile` (an ``OSError``),
    without reading it, for a symlink, anything but a regular file, or over ``limit`` bytes
    (``O_NONBLOCK``: opening a FIFO never blocks)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RefusedFile(errno.ELOOP, "a symbolic link (not followed)", path) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFile(errno.EINVAL, f"{_kind(st.st_mode)}, not a regular file", path)
        if st.st_size > limit:
            raise _too_big(path, limit)
        want = min(1 << 16, limit + 1)  # a byte past the bound shows a file that grew
        first = os.read(fd, want)
        if len(first) < want:
            return first
        chunks = [first]
        size = len(first)
        while size <= limit and (chunk := os.read(fd, 1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # grew while read
            raise _too_big(path, limit)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _too_big(path: str, limit: int) -> RefusedFile:
    bound = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit:,}-byte"
    return RefusedFile(errno.EFBIG, f"larger than the {bound} bound", path)


# session ids: they become folder names (letters, digits, ``_`` and ``-``, at most 64)
MAX_ID_LENGTH = 64
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def validate_session_id(value: Any) -> str:
    """Return ``value`` if it is a safe session id, else raise :class:`InvalidSessionId`."""
    if not isinstance(value, str):
        raise InvalidSessionId(
            f"a session id must be a string, got {type(value).__name__}; "
            "start a fresh session with `%openprogram new` or session_context()"
        )
    if _ID_RE.fullmatch(value) is None:
        shown = value if len(value) <= 40 else value[:40] + f"… ({len(value)} chars)"
        raise InvalidSessionId(
            f"invalid session id {shown!r}: use 1-{MAX_ID_LENGTH} letters, digits, '_' or '-' "
            "(no '/', '.', spaces); start a fresh session with `%openprogram new` or "
            "session_context()"
        )
    return value


def mint_session_id(prefix: str = "session") -> str:
    """A new id like ``session_3f9c2a71d0``."""
    prefix = re.sub(r"[^A-Za-z0-9_-]", "", prefix)[:40] or "session"
    return validate_session_id(f"{prefix}_{secrets.token_hex(5)}")
