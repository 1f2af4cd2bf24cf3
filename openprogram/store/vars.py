"""The one owner of the per-turn ContextVars.

* ``_store`` — the node writer of the current turn;
* ``_current_turn_id`` — the turn's id;
* ``_current_runtime`` — the ambient :class:`~openprogram.agentic_programming.runtime.Runtime`
  (injected into a ``runtime`` parameter);
* ``_call_id`` / ``_depth`` — the node of the agentic frame running now and how deep it is
  nested (nested calls carry ``caller``);
* ``_ask_handler`` — who answers ``ask_user`` in this context.

Nobody outside this module calls ``.set()`` on them: use the scoped setters below (reset in
``finally``), :func:`enter_frame` / :func:`leave_frame` for an agentic call, or, for a
whole turn, :func:`openprogram.store.session.context.session_context`.  The seed's import
paths (``openprogram.agentic_programming.function._call_id``...) re-export these objects.

A turn entered without a runtime gets :func:`default_runtime`: what the environment
configures.  Building it needs the providers, which sit above this layer, so
:mod:`openprogram.providers` installs the factory when it is imported (importing any
``openprogram`` module imports it first, through the package ``__init__``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram.store.session.writer import SessionNodeWriter

T = TypeVar("T")
AskHandler = Callable[[str, list[str] | None], str | None]

_store: ContextVar[SessionNodeWriter | None] = ContextVar("openprogram_store", default=None)
_current_turn_id: ContextVar[str | None] = ContextVar("openprogram_turn_id", default=None)
_current_runtime: ContextVar[Runtime | None] = ContextVar("openprogram_runtime", default=None)
_call_id: ContextVar[str | None] = ContextVar("openprogram_call_id", default=None)
_depth: ContextVar[int] = ContextVar("openprogram_depth", default=0)
_ask_handler: ContextVar[AskHandler | None] = ContextVar("openprogram_ask_handler", default=None)

_runtime_factory: Callable[[], Runtime] | None = None


def reset_token(var: ContextVar[Any], token: Token[Any]) -> None:
    """Reset ``var``; a token made in another Context is dropped silently.

    That happens when a notebook cell with top-level ``await`` ran in a copy of the
    kernel's Context: the copy (and the value set in it) is already gone.
    """
    try:
        var.reset(token)
    except ValueError:
        pass


@contextmanager
def scoped(var: ContextVar[T], value: T) -> Iterator[None]:
    """Set ``var`` for the ``with`` block and reset it after, also when the block raises."""
    token = var.set(value)
    try:
        yield
    finally:
        reset_token(var, token)


# -- getters ---------------------------------------------------------------------------------
def get_store() -> SessionNodeWriter | None:
    """The node writer of the current turn, or None outside any session."""
    return _store.get()


def get_turn_id() -> str | None:
    return _current_turn_id.get()


def get_current_runtime() -> Runtime | None:
    return _current_runtime.get()


def get_call_id() -> str | None:
    return _call_id.get()


def get_depth() -> int:
    return _depth.get()


def get_ask_handler() -> AskHandler | None:
    return _ask_handler.get()


# -- scoped setters --------------------------------------------------------------------------
def using_store(writer: SessionNodeWriter | None) -> AbstractContextManager[None]:
    return scoped(_store, writer)


def using_turn_id(turn_id: str | None) -> AbstractContextManager[None]:
    return scoped(_current_turn_id, turn_id)


def using_runtime(runtime: Runtime | None) -> AbstractContextManager[None]:
    """Install ``runtime`` as the ambient runtime; ``None`` keeps the current one."""
    return nullcontext() if runtime is None else scoped(_current_runtime, runtime)


def using_call_id(call_id: str | None) -> AbstractContextManager[None]:
    return scoped(_call_id, call_id)


def using_ask_handler(handler: AskHandler | None) -> AbstractContextManager[None]:
    return scoped(_ask_handler, handler)


FrameTokens = tuple[Token[str | None], Token[int]]


def enter_frame(call_id: str, depth: int) -> FrameTokens:
    """Make ``call_id`` the running frame at ``depth``; undo with :func:`leave_frame`.

    Not a context manager: an agentic call records its outcome between the body and the
    reset, and the async wrapper spans an ``await``.
    """
    return _call_id.set(call_id), _depth.set(depth)


def leave_frame(tokens: FrameTokens) -> None:
    _depth.reset(tokens[1])
    _call_id.reset(tokens[0])


# -- the runtime of a turn entered without one ------------------------------------------------
def set_runtime_factory(factory: Callable[[], Runtime] | None) -> None:
    """Install what :func:`default_runtime` calls (done by :mod:`openprogram.providers`)."""
    global _runtime_factory
    _runtime_factory = factory


def default_runtime() -> Runtime | None:
    """The runtime the environment configures (unconfigured if none; None if no factory)."""
    return _runtime_factory() if _runtime_factory is not None else None
