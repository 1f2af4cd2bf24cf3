"""Stopping a run between calls: a per-run flag the Runtime checks before each LLM call;
killing it during one (:func:`killable`)."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar, cast

from openprogram.errors import RunKilled, RunStopped
from openprogram.store.vars import current, using

T = TypeVar("T")
_KILL_POLL_S = 0.05  # how soon a kill lands while a provider call blocks
_SAFE_RAISE_S = 2.0  # how long a kill waits for thread starts in progress to end


def using_stop_flag(
    flag: threading.Event | None, kill: threading.Event | None = None
) -> AbstractContextManager[Any]:
    """Install the run's stop flag (``TurnState.stop``) and its kill flag
    (``TurnState.kill``: set, a call waiting in :func:`killable` ends with ``RunKilled``)."""
    return using(stop=flag, kill=kill)


def stop_requested() -> bool:
    """Whether the run this code belongs to was asked to stop (``openprogram.map`` polls it)."""
    flag = current().stop
    return flag is not None and flag.is_set()


def check_stop() -> None:
    """Raise :class:`RunStopped` if the run this code belongs to was asked to stop
    (:class:`RunKilled` if it was killed and is still here: the exception the kill raised
    went to another thread)."""
    state = current()
    if state.kill is not None and state.kill.is_set():
        raise RunKilled("killed by request")
    if state.stop is not None and state.stop.is_set():
        raise RunStopped("stopped by request (after the call in flight)")


def raise_in_thread(thread: threading.Thread, error: type[BaseException]) -> bool:
    """Raise ``error`` in ``thread`` at its next Python instruction; False if it could not
    be done safely (the thread gone, or a thread start that would not end).

    CPython gives the exception to the first thread state carrying ``thread``'s ident, and
    a thread being started carries its starter's ident until it runs: had ``thread`` been
    starting one, the exception would hit that new thread before it signals it started,
    and ``thread`` would wait in ``Thread.start()`` for good.  Every thread being started
    through ``threading`` is listed in ``threading._limbo`` until it has run, and entering
    the list takes ``_active_limbo_lock``: so the exception is raised while that lock is
    held and the list is empty (waiting, briefly, while a start is in progress)."""
    import ctypes
    import time

    limbo: dict[Any, Any] = getattr(threading, "_limbo", {})
    lock = getattr(threading, "_active_limbo_lock", None)
    ident = thread.ident
    if lock is None or ident is None:
        return False  # (not CPython's threading: the caller's kill flag ends the run)
    deadline = time.monotonic() + _SAFE_RAISE_S
    while thread.is_alive() and time.monotonic() < deadline:
        with lock:
            if not limbo:
                exc = ctypes.py_object(error)
                return bool(ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), exc))
        time.sleep(0.001)  # a thread start in progress: it ends within microseconds
    return False


def killable(call: Callable[[], T]) -> T:
    """``call()``, made killable in a run that can be stopped: there it runs on a helper
    thread (in a copy of this context, so what it prints lands where this thread's would)
    while this thread waits in Python, so a second stop (``RunKilled``, raised in this
    thread: :func:`raise_in_thread`) ends the wait at once even while the helper sits in a
    socket read; so does the run's kill flag, which a kill sets too (its exception cannot
    always be raised: see there).  The abandoned helper finishes on its own (within the
    provider's timeout); its result is dropped.  Outside such a run: a plain call, no
    thread."""
    state = current()
    if state.stop is None:
        return call()
    kill = state.kill
    done = threading.Event()
    box: list[Any] = []

    def run() -> None:
        try:
            box.append((True, call()))
        except BaseException as exc:  # handed to the waiting thread as it is
            box.append((False, exc))
        finally:
            done.set()

    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(run,), name="openprogram-call", daemon=True).start()
    while not done.wait(_KILL_POLL_S):
        if kill is not None and kill.is_set():
            raise RunKilled("killed by request (the call in flight abandoned)")
    ok, value = box[0]
    if ok:
        return cast(T, value)
    raise value
