"""In-process notifications of node writes (the live DAG widget listens here)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

Listener = Callable[[str, dict[str, Any]], None]

_listeners: list[Listener] = []
_lock = threading.Lock()


def subscribe(listener: Listener) -> Callable[[], None]:
    """Call ``listener(session_id, node_dict)`` after every node write; returns unsubscribe."""
    with _lock:
        _listeners.append(listener)

    def unsubscribe() -> None:
        with _lock:
            if listener in _listeners:
                _listeners.remove(listener)

    return unsubscribe


def emit(session_id: str, node: dict[str, Any]) -> None:
    for listener in list(_listeners):
        try:
            listener(session_id, node)
        except Exception:  # a broken view must never break the agent
            pass
