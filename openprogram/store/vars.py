"""Owner of two of the per-turn ContextVars: ``_store`` and ``_current_turn_id``.

Nobody outside this module calls ``.set()`` on them: use :func:`using_store` /
:func:`using_turn_id` (scoped, reset in ``finally``) or, for a whole turn,
:func:`openprogram.store.session.context.session_context`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from openprogram.store.session.writer import SessionNodeWriter

T = TypeVar("T")

_store: ContextVar[SessionNodeWriter | None] = ContextVar("openprogram_store", default=None)
_current_turn_id: ContextVar[str | None] = ContextVar("openprogram_turn_id", default=None)


def reset_token(var: ContextVar[Any], token: Token[Any]) -> None:
    """Reset ``var``; a token made in another Context is dropped silently.

    That happens when a notebook cell with top-level ``await`` ran in a copy of the
    kernel's Context: the copy (and the value set in it) is already gone.
    """
    try:
        var.reset(token)
    except ValueError:
        pass


def get_store() -> SessionNodeWriter | None:
    """The node writer of the current turn, or None outside any session."""
    return _store.get()


def get_turn_id() -> str | None:
    return _current_turn_id.get()


@contextmanager
def scoped(var: ContextVar[T], value: T) -> Iterator[None]:
    """Set ``var`` for the ``with`` block and reset it after, also when the block raises.
    Only a var's owner module uses this on its own vars (the scoped setters below)."""
    token = var.set(value)
    try:
        yield
    finally:
        reset_token(var, token)


def using_store(writer: SessionNodeWriter | None) -> AbstractContextManager[None]:
    return scoped(_store, writer)


def using_turn_id(turn_id: str | None) -> AbstractContextManager[None]:
    return scoped(_current_turn_id, turn_id)
