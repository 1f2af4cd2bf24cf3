"""``@agentic_function``: a call of a decorated function is a ``function`` node.

The ambient runtime (injected into a ``runtime`` parameter) and the running frame's node id
(which makes nested calls carry ``caller``) are fields of the one turn state owned by
:mod:`openprogram.store.vars`; the seed's names (``_call_id``, ``_current_runtime``...)
are re-exported here as views of it.  A call outside any turn goes to the host that claims
it (:func:`register_bare_call_host`), else to the process's ad-hoc session.

A decorated call writes a ``function`` node on entry (``running``, the docstring, inputs
made JSON-safe), points ``_call_id`` at it, runs the body and writes output, status and
duration on every exit path: return, exception, KeyboardInterrupt, the recursion cap.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar, overload

from openprogram.context.nodes import KIND_ROLE, RUNNING, Call, new_id, sanitize
from openprogram.context.outcome import finish, is_cancellation
from openprogram.errors import AgenticRecursionError
from openprogram.settings import current as current_settings
from openprogram.store.session.context import session_context
from openprogram.store.session.files import mint_session_id, validate_session_id
from openprogram.store.vars import (  # re-exported: the seed's import paths
    Registry,
    TurnState,
    _call_id,
    _current_runtime,
    _depth,
    current,
    enter_frame,
    get_call_id,
    get_store,
    leave_frame,
    using_call_id,
    using_runtime,
)

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "AgenticRecursionError",
    "_call_id",
    "_current_runtime",
    "_depth",
    "adhoc_turn",
    "agentic_function",
    "current_node",
    "get_call_id",
    "get_current_runtime",
    "is_cancellation",
    "process_session_id",
    "register_bare_call_host",
    "run_in_session",
    "unregister_bare_call_host",
    "using_call_id",
    "using_runtime",
]

if TYPE_CHECKING:
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram.context.policy import ContextPolicy

DEFAULT_MAX_DEPTH = 64
_ROLE = KIND_ROLE["function"]  # a function node's role

F = TypeVar("F", bound=Callable[..., Any])


def get_current_runtime() -> Runtime | None:
    """The ambient runtime of the current turn (``TurnState.runtime``), if any."""
    return current().runtime  # type: ignore[no-any-return]


# -- the ad-hoc process session --------------------------------------------------------------
_process_session: str | None = None
_process_lock = threading.Lock()


def process_session_id() -> str:
    """The session bare calls of this process record into (``OPENPROGRAM_SESSION`` or new).

    Announced once on stderr with how to continue it; later bare calls continue it.
    """
    global _process_session
    with _process_lock:
        if _process_session is None:
            given = current_settings().session
            _process_session = validate_session_id(given) if given else mint_session_id("adhoc")
            if not given:
                print(
                    f"openprogram: recording to session {_process_session} "
                    f"(set OPENPROGRAM_SESSION={_process_session} to continue it)",
                    file=sys.stderr,
                )
        return _process_session


BareCallHost = Callable[[str], "AbstractContextManager[Any] | None"]
_hosts: Registry[BareCallHost] = Registry()


def register_bare_call_host(host: BareCallHost) -> None:
    """Let ``host`` claim calls made outside any turn (public as
    :func:`openprogram.hosts.register_bare_call_host`).

    ``host(label)`` returns the scope such a call runs in (a context manager that makes
    it part of a turn) or None to leave it; the latest host registered is asked first.
    The notebook extension is such a host: a plain cell's calls become a turn of the
    notebook's session rather than of the process's ad-hoc one.  Registering a host
    twice asks it once; a bound method is held weakly (its object gone: not asked).
    """
    _hosts.add(host)


def unregister_bare_call_host(host: BareCallHost) -> None:
    """Stop asking ``host`` (one not registered: nothing happens)."""
    _hosts.remove(host)


def host_turn(label: str) -> AbstractContextManager[Any] | None:
    """The turn a registered host gives a call made outside any turn, or None."""
    for host in _hosts.latest_first():
        scope = host(label)
        if scope is not None:
            return scope
    return None


def bare_call_turn(label: str) -> AbstractContextManager[Any]:
    """Where a call outside any turn records: the host's turn, else one turn of the
    process's ad-hoc session (named after the script that runs)."""
    scope = host_turn(label)
    return scope if scope is not None else adhoc_turn(label)


def adhoc_turn(label: str, runtime: Runtime | None = None) -> AbstractContextManager[Any]:
    """One turn of the process's ad-hoc session (named after the script that runs), with
    ``runtime`` (None: the environment's)."""
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return session_context(
        process_session_id(),
        source="script",
        title=f"script {script}",
        message=label,
        runtime=runtime,
    )


def run_in_session(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` inside the current turn, or as a turn of its own if none (see
    :func:`bare_call_turn`)."""
    __tracebackhide__ = True  # IPython leaves the library's frames out of a traceback
    if get_store() is not None:
        return fn(*args, **kwargs)
    with bare_call_turn(_label(fn)):
        return fn(*args, **kwargs)


def _label(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", getattr(fn, "__name__", "call"))


# -- the decorator ---------------------------------------------------------------------------
class _Frame:
    """Entering and leaving one agentic call (shared by the sync and async wrappers)."""

    __slots__ = ("node", "started", "token", "writer")

    def __init__(
        self,
        name: str,
        meta: dict[str, Any],
        inputs: dict[str, Any],
        max_depth: int,
        state: TurnState,
    ) -> None:
        """``meta``: the metadata every node of the function starts with (see
        :func:`start_metadata`), copied; ``state``: the current turn state (a writer in it)."""
        writer = state.writer
        assert writer is not None
        depth, caller = state.depth, state.call_id
        node = Call(
            new_id(), _ROLE, name, input=sanitize(inputs), caller=caller, metadata=meta.copy()
        )
        self.writer = writer
        self.node = writer.append(node, turn_level=caller is None)
        self.started = time.perf_counter()
        if depth >= max_depth:
            err = AgenticRecursionError(
                f"agentic calls nested deeper than {max_depth} (raise max_depth= if intended)"
            )
            self.finish(exc=err)
            raise err
        self.token = enter_frame(node.id, depth + 1, state)

    def finish(self, result: Any = None, exc: BaseException | None = None) -> None:
        if exc is None:
            finish(self.node, output=result, started=self.started)
        else:
            finish(self.node, exc=exc, with_traceback=True, started=self.started)
        self.writer.update(self.node)

    # ``with _Frame(...) as frame: result = body()`` then ``return frame.done(result)``:
    # an exception is recorded before the frame's ContextVars are reset, a result after.
    def __enter__(self) -> _Frame:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            if exc is not None:
                self.finish(exc=exc)
        finally:
            leave_frame(self.token)

    def done(self, result: Any) -> Any:
        self.finish(result)
        return result


@overload
def agentic_function(fn: F) -> F: ...
@overload
def agentic_function(
    fn: None = None,
    *,
    name: str | None = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
    context: ContextPolicy | None = None,
) -> Callable[[F], F]: ...
def agentic_function(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
    context: ContextPolicy | None = None,
) -> Any:
    """Make ``fn`` an agent: its docstring is the instruction its ``runtime.exec`` calls send.

    Usable bare (``@agentic_function``) or configured (``@agentic_function(name=...)``).
    A parameter named ``runtime`` is filled from the ambient runtime when not passed.
    ``context``: what earlier turns the calls made inside it see
    (``ContextPolicy(turns=0)``: none; see :mod:`openprogram.context.policy`).
    """
    policy = context.to_dict() if context is not None else None

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(func)
        params = list(signature.parameters)
        runtime_index = params.index("runtime") if "runtime" in params else -1
        label = name or func.__name__
        doc = inspect.getdoc(func) or ""
        hashes = function_hashes(func, doc)  # what `diff` and stale turns compare
        meta = start_metadata(doc, hashes, policy)

        # Plain signatures (no *args/**kwargs/positional-only) are bound by zipping names
        # with the arguments: ``Signature.bind_partial`` is a large share of the overhead.
        simple = all(
            p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            for p in signature.parameters.values()
        )
        positional = [
            n for n, p in signature.parameters.items() if p.kind == p.POSITIONAL_OR_KEYWORD
        ]

        def prepare(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            if runtime_index >= 0 and len(args) <= runtime_index and kwargs.get("runtime") is None:
                # a getter, not the ContextVar: a wrapper must pickle (openprogram.map)
                kwargs["runtime"] = get_current_runtime()
            if simple and len(args) <= len(positional):
                inputs = dict(zip(positional, args, strict=False)) if args else {}
                inputs.update(kwargs)
                inputs.pop("runtime", None)
                return inputs
            try:
                bound = signature.bind_partial(*args, **kwargs).arguments
            except TypeError:
                bound = {"args": args, "kwargs": kwargs}
            return {k: v for k, v in bound.items() if k != "runtime"}

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                __tracebackhide__ = True
                state = current()
                if state.writer is None:
                    with bare_call_turn(label):
                        return await async_wrapper(*args, **kwargs)
                with _Frame(label, meta, prepare(args, kwargs), max_depth, state) as frame:
                    result = await func(*args, **kwargs)
                return frame.done(result)

            wrapper: Callable[..., Any] = async_wrapper
        else:

            @functools.wraps(func)
            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                __tracebackhide__ = True
                state = current()
                if state.writer is None:
                    return run_in_session(sync_wrapper, *args, **kwargs)
                with _Frame(label, meta, prepare(args, kwargs), max_depth, state) as frame:
                    result = func(*args, **kwargs)
                return frame.done(result)

            wrapper = sync_wrapper
        wrapper.__agentic__ = True  # type: ignore[attr-defined]
        wrapper.__agentic_hashes__ = hashes  # type: ignore[attr-defined]
        wrapper.__agentic_name__ = label  # type: ignore[attr-defined]  # its nodes' name
        return wrapper

    return decorate(fn) if fn is not None else decorate


def start_metadata(
    doc: str, hashes: dict[str, str], context: dict[str, Any] | None
) -> dict[str, Any]:
    """The metadata a ``function`` node starts with (what ``make_call("function", ...)``
    gives, built once per decorated function): running, the docstring, its hashes and the
    function's context policy (read by the execs made inside it)."""
    meta: dict[str, Any] = {"kind": "function", "status": RUNNING, "doc": doc, **hashes}
    if context:
        meta["context"] = context
    return meta


def function_hashes(func: Callable[..., Any], doc: str) -> dict[str, str]:
    """``doc_hash`` (the docstring as the prompt uses it) and ``source_hash`` (the source
    as written, else the compiled code when there is no source) of ``func``: 16 hex digits
    of SHA-256 each, recorded on every ``function`` node."""
    try:
        source = inspect.getsource(func)
    except (OSError, TypeError):  # no file (exec, a REPL line): the code object instead
        code = getattr(func, "__code__", None)
        source = repr((code.co_code, code.co_consts)) if code is not None else repr(func)
    return {"doc_hash": short_hash(doc), "source_hash": short_hash(source)}


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def current_node() -> Call | None:
    """The node of the agentic call running now (None at the top of a turn)."""
    writer = get_store()
    call_id = get_call_id()
    if writer is None or call_id is None:
        return None
    return writer.get(call_id)
