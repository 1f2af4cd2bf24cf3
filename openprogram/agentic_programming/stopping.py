"""Stopping a run between calls: a per-run flag the Runtime checks before each LLM call;
killing it during one (:func:`killable`)."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar, cast

from openprogram.errors import RunKilled as RunKilled
from openprogram.errors import RunStopped as RunStopped  # moved; old path kept
from openprogram.store.vars import current, using

T = TypeVar("T")
_KILL_POLL_S = 0.05  # how soon a kill lands while a provider call blocks


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


def killable(call: Callable[[], T]) -> T:
    """``call()``, made killable in a run that can be stopped: there it runs on a helper
    thread (in a copy of this context, so what it prints lands where this thread's would)
    while this thread waits in Python, so a second stop (``RunKilled``, raised in this
    thread) ends the wait at once even while the helper sits in a socket read.  The wait
    also ends when the run's kill flag is set: an exception raised into a thread can land
    in a thread being started at that moment instead (CPython matches thread states by
    ident, and a new one carries its starter's until it runs), so the flag is what a kill
    relies on here.  The abandoned helper finishes on its own (within the provider's
    timeout); its result is dropped.  Outside such a run: a plain call, no thread."""
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
