"""Stopping a run between calls: a per-run flag the Runtime checks before each LLM call."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from contextvars import ContextVar

from openprogram.store.vars import scoped


class RunStopped(KeyboardInterrupt):
    """The run was asked to stop; raised before its next LLM call.  A KeyboardInterrupt,
    so open nodes end ``cancelled`` and ``except Exception`` in user code lets it pass."""


class RunKilled(RunStopped):
    """The run was stopped a second time; raised in its thread at once."""


_stop_flag: ContextVar[threading.Event | None] = ContextVar("openprogram_stop", default=None)


def using_stop_flag(flag: threading.Event | None) -> AbstractContextManager[None]:
    return scoped(_stop_flag, flag)


def stop_requested() -> bool:
    """Whether the run this code belongs to was asked to stop (``openprogram.map`` polls it)."""
    flag = _stop_flag.get()
    return flag is not None and flag.is_set()


def check_stop() -> None:
    """Raise :class:`RunStopped` if the run this code belongs to was asked to stop."""
    flag = _stop_flag.get()
    if flag is not None and flag.is_set():
        raise RunStopped("stopped by request (after the call in flight)")
