"""Refs of a session repository: reading one (loose, else ``packed-refs``) and moving one by
compare-and-swap under git's own lock protocol (``<ref>.lock`` created exclusively, the old
value checked under it, renamed over the ref), so ``git`` itself and other processes see a
ref either before or after, never torn.  :class:`repository.Repository` reads and moves its
refs through these functions.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from openprogram.errors import CorruptedFile
from openprogram.errors import RefChanged as RefChanged  # moved; old path kept
from openprogram.errors import RefLocked as RefLocked
from openprogram.store.session.files import ensure_dir, read_bytes
from openprogram.store.session.replaced import replace
from openprogram.store.session.safegit import BRANCH

MAIN_REF = f"refs/heads/{BRANCH}"
STALE_LOCK_S = 60.0  # a ref lock older than this was left by a dead process


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Run the block with Ctrl-C held back until it ends (then delivered as usual), so a
    lock taken in it is always released.  Only the main thread gets KeyboardInterrupt, so
    elsewhere (or where Python does not own SIGINT) the block just runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:
        yield
        return
    signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            signal.raise_signal(signal.SIGINT)


def _sha(path: Path, hexsha: bytes) -> bytes:
    try:
        if len(hexsha) == 40:
            return bytes.fromhex(hexsha.decode("ascii"))
    except ValueError:
        pass
    raise CorruptedFile(str(path), f"not an object name: {hexsha[:60]!r}")


def read_ref(git_dir: Path, name: str = MAIN_REF) -> bytes | None:
    """The binary sha ``name`` points to (loose, else ``packed-refs``), or None."""
    loose = git_dir / name
    try:  # never through a symlink, never more than a ref's size
        return _sha(loose, read_bytes(str(loose), 4096)[:41].strip())
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise CorruptedFile(str(loose), str(exc)) from exc
    suffix = b" " + name.encode()
    packed = git_dir / "packed-refs"
    try:
        for line in read_bytes(str(packed)).splitlines():
            if line.endswith(suffix) and not line.startswith(b"#"):
                return _sha(packed, line.split(b" ", 1)[0])
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise CorruptedFile(str(packed), str(exc)) from exc
    return None


def update_ref(
    git_dir: Path,
    name: str,
    new: bytes,
    expected: bytes | None,
    *,
    wait_s: float = 2.0,
    take_over: bool = False,
) -> None:
    """Point ``name`` at ``new`` if it still points at ``expected`` (None: does not
    exist), under git's lock protocol; raises :class:`RefChanged` otherwise, or
    :class:`RefLocked` if another writer keeps ``<name>.lock`` past ``wait_s``.

    ``take_over``: the caller holds the session's write lock (:mod:`live`), under which
    every writer of the session moves this ref, and which the kernel releases when its
    holder dies: so a ``<name>.lock`` found is a dead writer's (its owner checked by that
    lock) and is removed at once, not after ``STALE_LOCK_S``."""
    if not name.startswith("refs/") or ".." in name or name.endswith(".lock"):
        raise ValueError(f"not a ref name: {name!r}")
    path = git_dir / name
    lock = f"{path}.lock"
    ensure_dir(git_dir, name.rsplit("/", 1)[0])  # a symlinked refs/heads: replaced
    with interrupts_deferred():  # a Ctrl-C here would leave the lock behind
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                if take_over:  # once: a lock made again is someone else's, waited for
                    take_over = False
                    try:
                        os.unlink(lock)
                    except FileNotFoundError:
                        pass
                    continue
                try:
                    if time.time() - os.stat(lock).st_mtime > STALE_LOCK_S:
                        os.unlink(lock)  # left by a process killed while holding it
                        continue
                except FileNotFoundError:
                    continue
                if time.monotonic() > deadline:
                    raise RefLocked(f"{lock} is held by another writer") from None
                time.sleep(0.005)
        try:
            try:
                os.write(fd, new.hex().encode() + b"\n")
            finally:
                os.close(fd)
            current = read_ref(git_dir, name)
            if current != expected:
                raise RefChanged(
                    f"{name} is at {current.hex() if current else None}, "
                    f"not {expected.hex() if expected else None}"
                )
            replace(lock, path)  # (the old ref file is freed off this path)
        except BaseException:
            try:
                os.unlink(lock)
            except FileNotFoundError:
                pass
            raise
