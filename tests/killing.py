"""Raising an exception into another thread, as ``BackgroundRun.stop()`` does on a second
stop — which can land in a thread being started by the run at that moment (CPython matches
thread states by ident).  The tests use it to kill a store's helper thread on purpose."""

from __future__ import annotations

import ctypes
import threading

from openprogram.errors import RunKilled


def kill_thread(thread: threading.Thread) -> None:
    """Raise ``RunKilled`` in ``thread`` at its next Python instruction."""
    assert thread.ident is not None
    hit = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread.ident), ctypes.py_object(RunKilled)
    )
    assert hit == 1


def named(name: str) -> threading.Thread:
    """This process's one live thread called ``name``."""
    (found,) = [t for t in threading.enumerate() if t.name == name]
    return found
