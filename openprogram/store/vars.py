"""The per-turn state: one frozen :class:`TurnState` in the engine's one ContextVar
(decision 0016).  :func:`current` reads it; :func:`using_turn` installs one for a ``with``
block and :func:`using` a replaced copy, the previous state back after, also when the block
raises.  The seed's ContextVar names stay importable as :class:`StateView` views of it.

A turn entered without a runtime gets :func:`default_runtime`: what a host offers
(:func:`register_default_runtime`), else the factory the composition root installs
(:func:`set_runtime_factory`: building it needs the providers, a layer above this one).
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from contextvars import ContextVar, Token
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from openprogram.store.memory import MemoryRecorder
    from openprogram.store.session.context import SessionNodeWriter

T = TypeVar("T")
AskHandler = Callable[[str, list[str] | None], str | None]


@dataclass(frozen=True)
class TurnState:
    """What code running in a turn may know about it (frozen: change it with ``replace``).
    ``runtime`` and ``echo`` belong to a layer above this one: typed loosely.  No
    ``__slots__``: :meth:`nested` copies ``__dict__`` in one step."""

    writer: SessionNodeWriter | MemoryRecorder | None = None  # on disk, in memory, or None
    turn_id: str | None = None
    runtime: Any = None
    call_id: str | None = None  # the agentic frame running now (a nested call's caller)
    depth: int = 0  # how many agentic frames are open
    ask: AskHandler | None = None  # who answers ask_user (None: the process default)
    echo: Any = None  # where a plain exec in the frame ``echo.frame_id`` streams
    stop: threading.Event | None = None  # set: the run stops before its next LLM call
    kill: threading.Event | None = None  # set: a call in flight is abandoned at once

    @property
    def session_id(self) -> str | None:
        return self.writer.session_id if self.writer is not None else None

    def nested(self, call_id: str, depth: int) -> TurnState:
        """``replace(self, call_id=call_id, depth=depth)`` without ``__init__`` (the hot
        path of every agentic call; no field validates itself)."""
        new = _new_object(TurnState)
        fields = new.__dict__
        fields.update(self.__dict__)
        fields["call_id"] = call_id
        fields["depth"] = depth
        return new


_new_object = object.__new__
EMPTY = TurnState()
_turn: ContextVar[TurnState] = ContextVar("openprogram_turn", default=EMPTY)
_runtime_factory: Callable[[], Any] | None = None


def current() -> TurnState:
    """The state of the turn this code runs in (:data:`EMPTY` outside any turn)."""
    return _turn.get()


@contextmanager
def using_turn(state: TurnState) -> Iterator[TurnState]:
    """Install ``state`` for the ``with`` block; the previous state is back after it."""
    token = _turn.set(state)
    try:
        yield state
    finally:
        # a token of another Context (a cell with top-level ``await`` ran in a copy): dropped
        with suppress(ValueError):
            _turn.reset(token)


@contextmanager
def using(**changes: Any) -> Iterator[TurnState]:
    """The current state *when the block is entered* with ``changes`` (field names of
    :class:`TurnState`): a context manager made before another was entered must not undo it."""
    with using_turn(replace(_turn.get(), **changes)) as state:
        yield state


# an agentic frame: not a context manager (the outcome is recorded between the body and the
# reset, and the async wrapper spans an ``await``)
def enter_frame(call_id: str, depth: int, state: TurnState | None = None) -> Token[TurnState]:
    """Make ``call_id`` the running frame at ``depth`` (``state``: the current one, if just
    read); undo with :func:`leave_frame`."""
    return _turn.set((state if state is not None else _turn.get()).nested(call_id, depth))


def leave_frame(token: Token[TurnState]) -> None:
    _turn.reset(token)


def get_store() -> SessionNodeWriter | None:
    """The node writer of the current turn (typed as the disk writer, whose surface a
    :class:`~openprogram.store.memory.MemoryRecorder` offers too), or None."""
    return _turn.get().writer  # type: ignore[return-value]


def get_turn_id() -> str | None:
    return _turn.get().turn_id


def get_call_id() -> str | None:
    return _turn.get().call_id


def using_runtime(runtime: Any) -> AbstractContextManager[Any]:
    """Install ``runtime`` as the ambient runtime; ``None`` keeps the current one."""
    return nullcontext() if runtime is None else using(runtime=runtime)


def using_call_id(call_id: str | None) -> AbstractContextManager[TurnState]:
    return using(call_id=call_id)


def using_ask_handler(handler: AskHandler | None) -> AbstractContextManager[TurnState]:
    return using(ask=handler)


class StateView(Generic[T]):
    """One field of the turn state under the name a ContextVar of the seed had: ``get()``;
    ``set(value)`` installs a replaced state and returns the token ``reset`` undoes."""

    __slots__ = ("field",)

    def __init__(self, field: str) -> None:
        self.field = field

    def get(self) -> T:
        return getattr(_turn.get(), self.field)  # type: ignore[no-any-return]

    def set(self, value: T) -> Token[TurnState]:
        changes: dict[str, Any] = {self.field: value}
        return _turn.set(replace(_turn.get(), **changes))

    def reset(self, token: Token[TurnState]) -> None:
        _turn.reset(token)


_store: StateView[SessionNodeWriter | MemoryRecorder | None] = StateView("writer")
_current_turn_id: StateView[str | None] = StateView("turn_id")
_current_runtime: StateView[Any] = StateView("runtime")
_call_id: StateView[str | None] = StateView("call_id")
_depth: StateView[int] = StateView("depth")
_ask_handler: StateView[AskHandler | None] = StateView("ask")


class Registry(Generic[T]):
    """Callables hosts register, asked latest first; a bound method is held weakly (its
    host gone, it drops out), one registered twice is kept once."""

    def __init__(self) -> None:
        self._items: list[Callable[[], T | None]] = []  # each returns the callable or None
        self._lock = threading.Lock()

    def add(self, item: T) -> None:
        with self._lock:
            if item in self._live():
                return
            if inspect.ismethod(item):
                self._items.append(weakref.WeakMethod(item))
            else:
                self._items.append(lambda item=item: item)  # type: ignore[misc]

    def remove(self, item: T) -> None:
        with self._lock:
            self._items = [ref for ref in self._items if ref() not in (None, item)]

    def latest_first(self) -> list[T]:
        with self._lock:
            return list(reversed(self._live()))

    def _live(self) -> list[T]:
        return [item for item in (ref() for ref in self._items) if item is not None]


_runtime_sources: Registry[Callable[[], Any]] = Registry()


def register_default_runtime(source: Callable[[], Any]) -> None:
    """Let a host say which runtime a turn entered without one gets: ``source()`` returns
    it, or None to leave the choice to the next host and finally to the environment."""
    _runtime_sources.add(source)


def unregister_default_runtime(source: Callable[[], Any]) -> None:
    _runtime_sources.remove(source)


def set_runtime_factory(factory: Callable[[], Any] | None) -> None:
    """Install what :func:`default_runtime` falls back to (``openprogram/__init__.py``)."""
    global _runtime_factory
    _runtime_factory = factory


def default_runtime() -> Any:
    """The runtime a host offers, else the one the environment configures (None if no
    factory was installed)."""
    for source in _runtime_sources.latest_first():
        runtime = source()
        if runtime is not None:
            return runtime
    return _runtime_factory() if _runtime_factory is not None else None
