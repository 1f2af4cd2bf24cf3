"""In-process notifications of node writes (the live DAG widget listens here)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import Any

Listener = Callable[[str, dict[str, Any]], None]
_listeners: list[Listener] = []  # (a list's append and remove are atomic: no lock)


def subscribe(listener: Listener) -> Callable[[], None]:
    """Call ``listener(session_id, node_dict)`` after every node write; returns unsubscribe."""
    _listeners.append(listener)

    def unsubscribe() -> None:
        with suppress(ValueError):  # (already unsubscribed)
            _listeners.remove(listener)

    return unsubscribe


def emit(session_id: str, node: dict[str, Any]) -> None:
    for listener in list(_listeners):
        with suppress(Exception):  # a broken view must never break the agent
            listener(session_id, node)
