"""Replacing a file by rename without paying, on the caller's path, for the file replaced.

A commit replaces two small files by ``rename``: the ref (git's lock protocol) and
``meta.json``.  On ext4 the rename that drops a file's last link also frees that file's
blocks, inside the ``rename`` call; on this project's machines (ext4 mounted with
``discard``, a virtual disk) that costs ~150-500 µs, several times the rename itself, and
more the busier the disk is — and the file replaced always has blocks, because the rename
that put it there made ext4 allocate them (``auto_da_alloc``).  A file that is still open
somewhere is not freed by the rename, only at its last ``close``.  So :func:`replace` opens
the file about to be replaced, renames over it, and hands the descriptor to a thread that
closes it: the freeing happens there, beside the writer, not in its commit.  Readers see
exactly what a plain ``os.replace`` gives them (the old file or the new one).

Measured on the home folder's disk (``benchmarks/bench_store_disk.py`` prints it as "a
replace"): a 41-byte replace ~190-260 µs plain, ~70-100 µs this way (open + rename +
hand-over); on tmpfs ~20-30 µs either way (the extra open).
"""

from __future__ import annotations

import os
import threading

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _Closer:
    """Descriptors closed by one daemon thread, started at the first one handed over."""

    def __init__(self) -> None:
        self._fds: list[int] = []
        self._ready = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._closing = False  # the thread holds descriptors taken from _fds

    def close_later(self, fd: int) -> None:
        with self._ready:
            if self._thread is None:
                try:
                    thread = threading.Thread(target=self._run, name="op-close", daemon=True)
                    thread.start()
                except RuntimeError:  # no new thread now (the interpreter exiting)
                    os.close(fd)
                    return
                self._thread = thread
            self._fds.append(fd)
            self._ready.notify_all()

    def wait(self) -> None:
        """Return once every descriptor handed over so far is closed."""
        with self._ready:
            while self._fds or self._closing:
                self._ready.wait()

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._fds:
                    self._ready.wait()
                fds, self._fds = self._fds, []
                self._closing = True
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            with self._ready:
                self._closing = False
                self._ready.notify_all()

    def before_fork(self) -> None:
        """Before ``fork``: no descriptor is being closed while the process is copied
        (the lock is held through the fork), so the child knows which it holds."""
        self._ready.acquire()
        while self._closing:
            self._ready.wait()

    def after_fork_in_parent(self) -> None:
        self._ready.release()

    def after_fork_in_child(self) -> None:
        """The parent's thread is not here: the copies of its pending descriptors are
        closed now (the parent still holds the files: nothing is freed here)."""
        fds, self._fds = self._fds, []
        self._ready = threading.Condition(threading.Lock())
        self._thread = None
        self._closing = False
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


_closer = _Closer()
os.register_at_fork(
    before=_closer.before_fork,
    after_in_parent=_closer.after_fork_in_parent,
    after_in_child=_closer.after_fork_in_child,
)
wait_closed = _closer.wait  # (tests, benchmarks: every replaced file released)


def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """``os.replace(src, dst)``, the replaced file's storage freed off the caller's path.

    Nothing is followed: a symlink at ``dst`` is replaced as ``os.replace`` does (it is not
    opened), and a FIFO there does not block the open."""
    try:
        old: int | None = os.open(dst, _FLAGS)
    except OSError:  # none there (or a symlink, a socket): nothing to keep
        old = None
    try:
        os.replace(src, dst)
    finally:
        if old is not None:
            _closer.close_later(old)
