"""The per-turn state: one frozen :class:`TurnState` in the one ContextVar of the engine.

A turn is one value: the node writer, the turn's id, the ambient runtime, the agentic frame
running now and how deep it is nested, who answers ``ask_user``, where a reply streams to,
and the flag that stops the run.  Nothing else in ``openprogram/`` or
``openprogram_magics/`` declares a ContextVar (``tests/test_turn_state.py`` checks).

* :func:`current` reads it (a default, empty state outside any turn);
* :func:`using_turn` installs a state for a ``with`` block and puts the previous one back
  after, also when the block raises (the shape of pydantic-ai's ``_run_context.py``);
  every entry point -- ``session_context``, the notebook's turn, a map worker, the
  dispatcher, the subprocess runner -- goes through it;
* :func:`using` is ``using_turn(replace(current(), **changes))``: a nested call is a
  replaced copy (``caller``/``depth`` for an agentic frame, ``ask`` for a questioner...).

The seed's names stay importable as views of that value: ``_store``, ``_current_turn_id``,
``_current_runtime``, ``_call_id``, ``_depth``, ``_ask_handler`` (here, re-exported from
``openprogram.store`` and ``openprogram.agentic_programming.function``).  Each has
``.get()``; ``.set(value)`` installs a replaced state and returns a token for ``.reset``,
for code written against the seed's ContextVars -- prefer the scoped setters.

A turn entered without a runtime gets :func:`default_runtime`: the one a host offers
(:func:`register_default_runtime`: the notebook offers the runtime of the provider chosen
in it), else what the environment configures.  Building that needs the providers, a layer
above this one, so the package's composition root (``openprogram/__init__.py``) installs
the factory with :func:`set_runtime_factory`; a host that knows its runtime (the
notebook's cell turns) passes it as a value and nothing is asked.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar, Token
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from openprogram.store.nodewriter import NodeWriter
    from openprogram.store.session.writer import SessionNodeWriter

T = TypeVar("T")
AskHandler = Callable[[str, list[str] | None], str | None]


@dataclass(frozen=True)
class TurnState:
    """What code running in a turn may know about it (frozen: change it with ``replace``).

    ``runtime`` is the agentic layer's ``Runtime`` and ``echo`` its ``Echo``; they are
    typed loosely here because this layer sits below the one that defines them (their
    owners' getters give them their types).  No ``__slots__``: :meth:`nested` (every
    agentic call) copies the instance's ``__dict__`` in one step, where a frozen
    dataclass's ``__init__`` pays an ``object.__setattr__`` per field.
    """

    writer: NodeWriter | None = None  # the store of the turn: None outside any turn
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
        """This state inside the agentic frame ``call_id`` at ``depth``: what
        ``replace(self, call_id=call_id, depth=depth)`` gives, built without ``__init__``
        (the hot path of every agentic call; no field of the class validates itself)."""
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


def reset_token(token: Token[TurnState]) -> None:
    """Put back the state ``token`` replaced; a token made in another Context is dropped.

    That happens when a notebook cell with top-level ``await`` ran in a copy of the
    kernel's Context: the copy (and the state set in it) is already gone.
    """
    try:
        _turn.reset(token)
    except ValueError:
        pass


@contextmanager
def using_turn(state: TurnState) -> Iterator[TurnState]:
    """Install ``state`` for the ``with`` block; the previous state is back after it."""
    token = _turn.set(state)
    try:
        yield state
    finally:
        reset_token(token)


@contextmanager
def using(**changes: Any) -> Iterator[TurnState]:
    """The current state *when the block is entered* with ``changes`` (field names of
    :class:`TurnState`), scoped.  Read at entry, not when ``using(...)`` is called: a
    context manager made before another one was entered must not undo that one."""
    with using_turn(replace(_turn.get(), **changes)) as state:
        yield state


# -- an agentic frame: not a context manager (the outcome is recorded between the body and
# the reset, and the async wrapper spans an ``await``) -------------------------------------
def enter_frame(call_id: str, depth: int, state: TurnState | None = None) -> Token[TurnState]:
    """Make ``call_id`` the running frame at ``depth``; undo with :func:`leave_frame`.
    ``state``: the current state when the caller has just read it (saves a read)."""
    return _turn.set((state if state is not None else _turn.get()).nested(call_id, depth))


def leave_frame(token: Token[TurnState]) -> None:
    _turn.reset(token)


# -- getters and scoped setters by field (the names the engine has always used) ---------------
def get_store() -> SessionNodeWriter | None:
    """The node writer of the current turn, or None outside any session.

    Typed as the disk writer, whose surface agentic code uses; a map worker's
    :class:`~openprogram.store.memory.MemoryRecorder` offers the same (see
    :class:`~openprogram.store.nodewriter.NodeWriter`).
    """
    return _turn.get().writer  # type: ignore[return-value]


def get_turn_id() -> str | None:
    return _turn.get().turn_id


def get_call_id() -> str | None:
    return _turn.get().call_id


def get_ask_handler() -> AskHandler | None:
    return _turn.get().ask


def using_store(writer: NodeWriter | None) -> AbstractContextManager[TurnState]:
    return using(writer=writer)


def using_turn_id(turn_id: str | None) -> AbstractContextManager[TurnState]:
    return using(turn_id=turn_id)


def using_runtime(runtime: Any) -> AbstractContextManager[Any]:
    """Install ``runtime`` as the ambient runtime; ``None`` keeps the current one."""
    return nullcontext() if runtime is None else using(runtime=runtime)


def using_call_id(call_id: str | None) -> AbstractContextManager[TurnState]:
    return using(call_id=call_id)


def using_ask_handler(handler: AskHandler | None) -> AbstractContextManager[TurnState]:
    return using(ask=handler)


# -- the seed's ContextVar names, as views of the one state --------------------------------------
class StateView(Generic[T]):
    """One field of the turn state under the name a ContextVar of the seed had.

    ``get()`` reads the field; ``set(value)`` installs the current state with the field
    replaced and returns the token that ``reset(token)`` undoes (use them in pairs, last
    set first reset, as with a ContextVar; the scoped setters above do it for you).
    """

    __slots__ = ("field", "name")

    def __init__(self, name: str, field: str) -> None:
        self.name = name
        self.field = field

    def get(self) -> T:
        return getattr(_turn.get(), self.field)  # type: ignore[no-any-return]

    def set(self, value: T) -> Token[TurnState]:
        changes: dict[str, Any] = {self.field: value}
        return _turn.set(replace(_turn.get(), **changes))

    def reset(self, token: Token[TurnState]) -> None:
        _turn.reset(token)

    def __repr__(self) -> str:
        return f"<view {self.name} of the turn state: {self.field}={self.get()!r}>"


_store: StateView[NodeWriter | None] = StateView("_store", "writer")
_current_turn_id: StateView[str | None] = StateView("_current_turn_id", "turn_id")
_current_runtime: StateView[Any] = StateView("_current_runtime", "runtime")
_call_id: StateView[str | None] = StateView("_call_id", "call_id")
_depth: StateView[int] = StateView("_depth", "depth")
_ask_handler: StateView[AskHandler | None] = StateView("_ask_handler", "ask")


# -- hosts: what the environment running the engine registers ---------------------------------
class Registry(Generic[T]):
    """Callables registered by hosts, asked latest first.  A bound method is held weakly
    (a host object that is gone -- a notebook shell discarded -- drops out by itself);
    registering one twice keeps it once."""

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
    it, or None to leave the choice to the next host and finally to the environment (the
    notebook returns the runtime of the provider chosen in it)."""
    _runtime_sources.add(source)


def unregister_default_runtime(source: Callable[[], Any]) -> None:
    _runtime_sources.remove(source)


# -- the runtime of a turn entered without one ------------------------------------------------
def set_runtime_factory(factory: Callable[[], Any] | None) -> None:
    """Install what :func:`default_runtime` falls back to (``openprogram/__init__.py``)."""
    global _runtime_factory
    _runtime_factory = factory


def default_runtime() -> Any:
    """The runtime a host offers, else the one the environment configures (unconfigured if
    none; None if no factory was installed)."""
    for source in _runtime_sources.latest_first():
        runtime = source()
        if runtime is not None:
            return runtime
    return _runtime_factory() if _runtime_factory is not None else None
