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


def using_stop_flag(flag: threading.Event | None) -> AbstractContextManager[Any]:
    """Install the run's stop flag in the turn state (``TurnState.stop``)."""
    return using(stop=flag)


def stop_requested() -> bool:
    """Whether the run this code belongs to was asked to stop (``openprogram.map`` polls it)."""
    flag = current().stop
    return flag is not None and flag.is_set()


def check_stop() -> None:
    """Raise :class:`RunStopped` if the run this code belongs to was asked to stop."""
    flag = current().stop
    if flag is not None and flag.is_set():
        raise RunStopped("stopped by request (after the call in flight)")


def killable(call: Callable[[], T]) -> T:
    """``call()``, made killable in a run that can be stopped: there it runs on a helper
    thread (in a copy of this context, so what it prints lands where this thread's would)
    while this thread waits in Python, so a second stop (``RunKilled``, raised in this
    thread) ends the wait at once even while the helper sits in a socket read.  The
    abandoned helper finishes on its own (within the provider's timeout); its result is
    dropped.  Outside such a run: a plain call, no thread."""
    if current().stop is None:
        return call()
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
        pass
    ok, value = box[0]
    if ok:
        return cast(T, value)
    raise value
