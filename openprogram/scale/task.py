"""The worker side of :func:`openprogram.map`: run one item, record its nodes in memory.

A :class:`Task` is what travels to a worker: the item, the function (pickled once by the
kernel with cloudpickle when it leaves the process), and the :class:`Shared` part of the
map (session, turn, the frame the items hang under, the nodes a prompt may show, how to
build the runtime).  :func:`run_task` runs the function in a fresh ``Context`` with a
:class:`~openprogram.store.memory.MemoryRecorder` as the store, so its nodes are the
nodes a local call would write; it returns an :class:`Outcome` with those nodes, the
value or the exception, and the worker's name.  No session on disk, no credential in the
task: a remote worker builds its provider from its own environment (offline providers,
which hold none, travel as they are).
"""

from __future__ import annotations

import contextvars
import copy
import os
import pickle
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from openprogram.context.nodes import CANCELLED, ERROR, UNANSWERED, Call, make_call
from openprogram.context.outcome import error_text, finish
from openprogram.errors import RemoteError
from openprogram.providers import create_runtime
from openprogram.store.memory import MemoryRecorder
from openprogram.store.session.files import dumps, loads
from openprogram.store.vars import TurnState, using_turn
from openprogram.usage.budget import Allowance
from openprogram.usage.prices import use_prices, user_prices

if TYPE_CHECKING:
    from openprogram.agentic_programming.runtime import Runtime

UNANSWERED_ON_WORKER = "asked on a worker of openprogram.map: questions are not forwarded"


@dataclass(frozen=True)
class RuntimeSpec:
    """How a remote worker builds its Runtime: ``offline`` (a test/function provider, which
    holds no credential) travels as it is; otherwise ``provider``/``model`` name what the
    worker builds from its own environment (``None``: whatever that environment says)."""

    provider: str | None = None
    model: str | None = None
    offline: Any = None
    settings: dict[str, Any] = field(default_factory=dict)
    # a picklable callable, worker's provider -> the provider the items use (a wrapper that
    # holds no credential: an evaluation's reuse of recorded answers)
    wrap: Any = None
    prices: dict[str, Any] = field(default_factory=user_prices)  # set_price's, where made


@dataclass(frozen=True)
class Shared:
    """What every task of one map has in common."""

    token: str  # names this map (worker-side caches, Dask keys)
    session_id: str
    turn: int
    turn_id: str | None
    anchor: str | None  # the frame the items hang under (the cell's turn node)
    head_id: str | None
    seen: bytes  # JSON list of the nodes a prompt may show (see scale.snapshot)
    label: str  # the function's name, for an error node when it never ran
    runtime: Any  # in process: the Runtime itself; remote: a RuntimeSpec
    remote: bool  # values, errors and the function cross a process boundary as pickles


@dataclass
class Task:
    index: int
    item: Any  # remote: cloudpickled bytes
    fn: Any  # remote: cloudpickled bytes
    shared: Shared
    allowance: Allowance | None = None  # remote: its share of the map's budget


@dataclass
class Outcome:
    index: int
    nodes: bytes  # JSON list of the nodes recorded, in the order they were written
    value: Any = None  # remote: pickled bytes
    error: Any = None  # an exception; remote: pickled bytes
    worker: str = ""
    worker_name: str | None = None


def run_task(task: Task) -> Outcome:
    """Run one item (in a fresh Context: nothing leaks between tasks of one worker; the
    item's turn state is installed with ``using_turn``, as every entry point does)."""
    worker = worker_identity()  # Dask finds its worker through the task's own Context
    return contextvars.Context().run(_run, task, worker)


def _run(task: Task, identity: tuple[str, str | None]) -> Outcome:

    shared = task.shared
    seen = _seen(shared)
    recorder = MemoryRecorder(shared.session_id, shared.turn, seen, shared.head_id)
    value: Any = None
    error: BaseException | None = None
    try:
        fn = _load(task.fn, shared.token) if shared.remote else task.fn
        item = pickle.loads(task.item) if shared.remote else task.item
        state = TurnState(  # the recorder stands where the kernel's writer would
            writer=recorder,
            turn_id=shared.turn_id,
            runtime=_runtime(shared, task.allowance),
            call_id=shared.anchor,
            ask=_nobody_answers,
        )
        with using_turn(state):
            value = fn(item)
    except BaseException as exc:  # recorded and sent back; the worker lives on
        error = exc
    if error is not None and not _recorded(recorder, shared.anchor):
        _error_node(recorder, shared, error)
    worker, name = identity
    for call in recorder.written:
        if call.kind == "ask_user" and call.status == UNANSWERED:
            call.metadata["note"] = UNANSWERED_ON_WORKER
    nodes = dumps([c.to_dict() for c in recorder.written])
    if shared.remote:
        return _portable(task.index, nodes, value, error, worker, name)
    return Outcome(task.index, nodes, value, error, worker, name)


def _nobody_answers(question: str, choices: list[str] | None) -> str | None:
    return None  # a worker has no one to ask: the node ends ``unanswered`` at once


def _recorded(recorder: MemoryRecorder, anchor: str | None) -> bool:
    """Whether the failure is already on a node of the item (its agentic frame)."""
    return any(
        c.caller == anchor and c.status in (ERROR, CANCELLED) and c.kind != "llm"
        for c in recorder.written
    )


def _error_node(recorder: MemoryRecorder, shared: Shared, exc: BaseException) -> None:
    node = make_call("error", shared.label, caller=shared.anchor)
    finish(node, ERROR, exc=exc, with_traceback=True)
    recorder.append(node, turn_level=shared.anchor is None)


def worker_identity() -> tuple[str, str | None]:
    """(address, name) of the Dask worker running this, else (``host:pid``, None)."""
    distributed = sys.modules.get("distributed")
    if distributed is not None:
        try:
            worker = distributed.get_worker()
            return str(worker.address), str(worker.name)
        except ValueError:  # not inside a Dask task
            pass
    return f"{socket.gethostname()}:{os.getpid()}", None


# -- remote: pickles, caches -----------------------------------------------------------------
_cache: dict[tuple[str, str], Any] = {}  # (map token, what) -> loaded once per worker process
_cache_mu = threading.Lock()


def _cached(token: str, what: str, make: Callable[[], Any]) -> Any:
    key = (token, what)
    with _cache_mu:
        if key in _cache:
            return _cache[key]
    value = make()
    with _cache_mu:
        if len(_cache) > 32:  # earlier maps: drop them
            _cache.clear()
        return _cache.setdefault(key, value)


def _load(blob: bytes, token: str) -> Any:
    return _cached(token, "fn", lambda: pickle.loads(blob))


def _seen(shared: Shared) -> list[Call]:
    return _cached(shared.token, "seen", lambda: [Call.from_dict(d) for d in loads(shared.seen)])  # type: ignore[no-any-return]


def _runtime(shared: Shared, allowance: Allowance | None) -> Runtime | None:
    """The map's runtime (remote: built once per worker process), under the item's share of
    the budget when it has one (a copy: the worker's other items have theirs)."""
    if not shared.remote:
        return cast("Runtime | None", shared.runtime)
    runtime = _cached(shared.token, "runtime", lambda: build_runtime(shared.runtime))
    if allowance is not None:
        runtime = copy.copy(runtime)
        runtime.budget = allowance.budget()
    return cast("Runtime", runtime)


def build_runtime(spec: RuntimeSpec) -> Runtime:
    """The worker's Runtime for ``spec``: its credentials come from its own environment.
    Its rate is its share of the map's, which the kernel checked: a share may be slower than
    a rate a user may set (:data:`~openprogram.agentic_programming.ratelimit.MIN_RATE`).
    Its prices are the kernel's: a call is priced, and a dollar budget's share spent, at the
    price ``set_price`` gave there (over this process's table or ``prices.json``)."""
    use_prices(spec.prices)
    share = spec.settings.get("requests_per_minute")
    settings = {**spec.settings, "requests_per_minute": 0} if share else spec.settings
    if spec.offline is not None:
        runtime = create_runtime(spec.offline, spec.model, **settings)
    else:
        runtime = create_runtime(spec.provider, spec.model, required=False, **settings)
        if spec.wrap is not None and runtime.provider is not None:
            runtime.provider = spec.wrap(runtime.provider)
    if share:
        runtime.requests_per_minute = share
    return runtime


def _portable(
    index: int,
    nodes: bytes,
    value: Any,
    error: BaseException | None,
    worker: str,
    name: str | None,
) -> Outcome:
    """The outcome with its value and error pickled here, so that any executor can send it
    back (a class defined in the notebook travels by value, through cloudpickle)."""
    dump = _dumps()
    value_blob: bytes | None = None
    if error is None:
        try:
            value_blob = dump(value)
        except Exception as exc:
            error = RemoteError(f"the result ({type(value).__name__}) cannot be sent back: {exc}")
    error_blob: bytes | None = None
    if error is not None:
        try:
            error_blob = dump(error)
            pickle.loads(error_blob)  # some exceptions pickle but do not unpickle
        except Exception:
            error_blob = dump(RemoteError(error_text(error)))
    return Outcome(index, nodes, value_blob, error_blob, worker, name)


def _dumps() -> Callable[[Any], bytes]:
    try:
        import cloudpickle
    except ImportError:  # pragma: no cover - the dask extra brings it
        return pickle.dumps
    return cloudpickle.dumps  # type: ignore[no-any-return]
