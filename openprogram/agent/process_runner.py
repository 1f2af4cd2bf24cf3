"""Run an agentic function in a ``spawn``ed child process, attached to the caller's turn.

The child re-enters ``session_context`` with the parent's session id and sets its caller
anchor (the parent's current frame) through the owner's scoped setter, so its nodes hang
under the parent's frame exactly as an in-process call's would.  Node writes and
``ask_user`` questions flow back through queues: the parent re-emits the writes (live
views keep drawing) and answers questions with its own ambient handler (or leaves them
unanswered).  The result, or the exception, comes back at the end.

``stop()`` is graceful first (SIGINT: the child's frames end ``cancelled`` and its turn is
committed), then kills the child and every process under it; the parent's
``Session.refresh()`` then recovers what the killed child left (``running`` →
``interrupted``).

A child never outlives its owner (Linux; elsewhere the child's process group is killed):

- it is a *child subreaper*, so whatever it starts stays in its tree of processes however it
  detaches (``setsid``, a double fork), and it ends that tree when it ends (its function
  returned or raised, ``stop()``, ``SIGTERM``) — nothing the function started runs on;
- it watches its parent: the end of the pipe ``multiprocessing`` keeps open in the parent
  (EOF when the parent dies, however) in a thread, and ``PR_SET_PDEATHSIG`` (a real-time
  signal whose handler checks that the parent *process* is gone, not only the thread that
  started the child); either ends its tree and itself at once, writing nothing more;
- its node writer checks that the parent is alive before each write, so nothing lands in
  the session after the parent died (whose recovery closes the frames the child hangs
  under): the child's own open frames are recovered ``interrupted`` from its live rows;
- the parent ends the trees of the runs still going when its interpreter exits, before its
  store closes.

The child masks what the parent masks: the secret values the parent knows (keys passed to
a provider explicitly, credential variables) are registered in the child before it runs.

The function must be importable by module path (spawn starts a fresh interpreter): a
top-level function of a module, not one defined in ``__main__`` or a notebook cell.
"""

from __future__ import annotations

import atexit
import importlib
import os
import pickle
import queue
import signal
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from openprogram.agent import proctree
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.ask_user import current_ask_user_handler
from openprogram.agentic_programming.function import (
    get_call_id,
    get_current_runtime,
    is_cancellation,
    process_session_id,
)
from openprogram.context.nodes import Call
from openprogram.context.outcome import error_text, traceback_text
from openprogram.context.secrets import refresh_secrets, register_secret
from openprogram.errors import ProcessRunCancelled, ProcessRunError, UserError
from openprogram.providers import network
from openprogram.settings import Settings
from openprogram.settings import current as current_settings
from openprogram.settings import install as install_settings
from openprogram.store.session import events
from openprogram.store.session.context import SessionNodeWriter, session_context
from openprogram.store.vars import get_store, using

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from openprogram.agentic_programming.ask_user import AskHandler
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram.agentic_programming.tool_loop import EventCallback
    from openprogram.store.session.session import Session


@dataclass
class _Spec:
    """Everything the child needs; pickled by ``spawn``."""

    target: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    session_id: str
    call_id: str | None
    runtime: bytes | None  # a pickled Runtime, or None: the child configures its own
    settings: Settings  # the parent's, in force in the child (its home above all)
    allow_requests: bool
    parent_pid: int
    secrets: tuple[str, ...] = ()  # the values the parent masks: the child masks them too


def target_of(fn: Callable[..., Any] | str) -> str:
    """``"module:qualname"`` of ``fn``; refuses what a fresh interpreter cannot import."""
    if isinstance(fn, str):
        if ":" not in fn:
            raise UserError(f"a target is 'package.module:function', got {fn!r}")
        return fn
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<locals>" in qualname:
        raise UserError(
            f"{qualname or fn!r} cannot run in a child process: define it at the top level "
            "of an importable module (not in __main__, a notebook cell or another function)"
        )
    return f"{module}:{qualname}"


def _resolve(target: str) -> Callable[..., Any]:
    module_name, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[no-any-return]


class ProcessRun:
    """One function run in a child process: ``start()``, then ``wait()`` (or ``poll()``),
    ``stop()`` at any time."""

    def __init__(
        self,
        fn: Callable[..., Any] | str,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        session_id: str | None = None,
        runtime: Runtime | None = None,
        on_event: EventCallback | None = None,
        ask_handler: AskHandler | None = None,
    ) -> None:
        self.target = target_of(fn)
        writer = get_store()
        self.session_id = session_id or (writer.session_id if writer else process_session_id())
        in_turn = writer is not None and writer.session_id == self.session_id
        self.call_id = get_call_id() if in_turn else None
        self.args, self.kwargs = tuple(args), dict(kwargs or {})
        self.runtime = _pickled_runtime(runtime)
        self.on_event = on_event
        self.ask_handler = ask_handler or current_ask_user_handler()  # the caller's, now
        self.process: BaseProcess | None = None
        self.finished = False
        self._result: Any = None
        self._error: ProcessRunError | None = None
        self._stopping = False

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> ProcessRun:
        import multiprocessing

        writer = get_store()
        if writer is not None and writer.session_id == self.session_id:
            # the child opens the session from disk: let it see the frame it hangs under
            writer.session.commit("checkpoint: before a child process")
        spec = _Spec(
            target=self.target,
            args=self.args,
            kwargs=self.kwargs,
            session_id=self.session_id,
            call_id=self.call_id,
            runtime=self.runtime,
            settings=current_settings(),
            allow_requests=network.model_requests_allowed(),
            parent_pid=os.getpid(),
            secrets=tuple(sorted(refresh_secrets())),
        )
        ctx = multiprocessing.get_context("spawn")
        self._inbox: Any = ctx.Queue()
        self._outbox: Any = ctx.Queue()
        self.process = ctx.Process(
            target=_child_main, args=(spec, self._inbox, self._outbox), daemon=True
        )
        self.process.start()
        _live.add(self)
        # (again at each start: the handler runs before the store's close, registered earlier)
        atexit.unregister(_end_live_runs)
        atexit.register(_end_live_runs)
        return self

    def wait(self, timeout: float | None = None) -> Any:
        """The function's return value; raises :class:`ProcessRunError` if it raised.
        Ctrl-C here stops the child (gracefully first) and propagates."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not self.poll(0.1):
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"{self.target} still running after {timeout} s")
        except KeyboardInterrupt:
            self.stop()
            raise
        if self._error is not None:
            raise self._error
        return self._result

    def poll(self, timeout: float = 0.0) -> bool:
        """Handle what the child sent within ``timeout`` s; True once it has finished."""
        if self.finished:
            return True
        assert self.process is not None, "start() first"
        try:
            message = self._inbox.get(timeout=timeout) if timeout > 0 else self._inbox.get_nowait()
        except queue.Empty:
            if not self.process.is_alive():
                self._drain()
                if not self.finished:
                    code = self.process.exitcode
                    self._finish(error=(f"the child process died (exit code {code})", ""))
            return self.finished
        self._handle(message)
        return self.finished

    def stop(self, timeout: float = 5.0) -> None:
        """SIGINT the child (its frames end ``cancelled``; what it started ends with it),
        then kill it and every process under it after ``timeout`` s; the session is
        refreshed (and recovered) either way."""
        if self.finished or self.process is None:
            return
        self._stopping = True
        pid = self.process.pid
        assert pid is not None
        try:
            os.kill(pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while not self.poll(0.05) and time.monotonic() < deadline:
            pass
        if not self.finished:
            self._kill()
            self.process.join(5)
            self._drain()
            if not self.finished:
                self._finish(error=("killed after a graceful stop timed out", ""))

    def _kill(self) -> None:
        """Kill the child and every process under it (its group where there is no /proc)."""
        assert self.process is not None and self.process.pid is not None
        if self.process.exitcode is not None:  # reaped: its pid may be another process's now
            return
        pid = self.process.pid
        proctree.end_tree(pid, include_root=True)
        try:
            os.killpg(pid, signal.SIGKILL)  # the child leads its own group
        except (ProcessLookupError, PermissionError):
            self.process.kill()

    # -- messages from the child ------------------------------------------------------------
    def _drain(self) -> None:
        while not self.finished:
            try:
                self._handle(self._inbox.get_nowait())
            except queue.Empty:
                return

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "node":
            _kind, session_id, node = message
            events.emit(session_id, node)  # the parent's live views see the child's writes
            self._notify({"type": "node", "session_id": session_id, "node": node})
        elif kind == "ask":
            _kind, question, choices = message
            self._notify({"type": "ask_user", "question": question, "choices": choices})
            try:
                answer = self.ask_handler(question, choices)
            except Exception:
                answer = None
            self._outbox.put(answer)
        elif kind == "result":
            self._finish(result=message[1])
        elif kind == "error":
            _kind, error, tb, cancelled = message
            self._finish(error=(error, tb), cancelled=cancelled)

    def _notify(self, event: dict[str, Any]) -> None:
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:
                pass

    def _finish(
        self, *, result: Any = None, error: tuple[str, str] | None = None, cancelled: bool = False
    ) -> None:
        self.finished = True
        _live.discard(self)
        self._result = result
        if error is not None:
            kind = ProcessRunCancelled if cancelled or self._stopping else ProcessRunError
            self._error = kind(self.target, *error)
        if self.process is not None:
            self.process.join(5)
        self._refresh()
        self._notify({"type": "finished", "error": str(self._error) if self._error else None})

    def _refresh(self) -> None:
        """Let this process's Session see what the child wrote (and recover a killed one)."""
        writer = get_store()
        if writer is not None and writer.session_id == self.session_id:
            writer.session.refresh()
        else:
            default_db().open(self.session_id).refresh()


_live: weakref.WeakSet[ProcessRun] = weakref.WeakSet()  # started, not finished


def _end_live_runs() -> None:
    """(At exit.)  Kill the runs still going, and what they started, before this process's
    store closes the frames they hang under."""
    for run in list(_live):
        if run.process is not None and run.process.is_alive():
            run._kill()


def run_in_process(fn: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a child process, attached to the current frame."""
    return ProcessRun(fn, args, kwargs).start().wait()


def _pickled_runtime(runtime: Runtime | None) -> bytes | None:
    """The given (or ambient) runtime for the child; an ambient one that cannot be pickled
    (a ``function`` provider's closure) is left behind and the child configures its own."""
    chosen = runtime or get_current_runtime()
    if chosen is None:
        return None
    try:
        return pickle.dumps(chosen)
    except Exception as exc:
        if runtime is not None:
            raise UserError(f"the runtime cannot be sent to a child process: {exc}") from None
        return None


# -- the child ---------------------------------------------------------------------------------
PARENT_GONE_EXIT = 70  # the child's exit code when it ended because its parent had
_ending = threading.Lock()


def _end_now(code: int) -> NoReturn:
    """End this child at once: every process under it, then itself; nothing more is
    written or sent (its rows are left to the recovery: open frames end interrupted)."""
    _ending.acquire()  # a second caller (the watcher and the signal) waits for the exit
    try:
        proctree.end_tree(os.getpid(), include_root=False)
    finally:
        os._exit(code)


_parent_pipe: list[Any] = []  # a poll object on the parent's pipe, made once


def _parent_gone(parent_pid: int) -> bool:
    """Whether the process that started this child has ended: this process was
    re-parented, or the parent's end of the pipe was closed (one ``poll`` with no wait:
    cheap enough before every node write)."""
    if os.getppid() != parent_pid:
        return True
    if not _parent_pipe:
        import multiprocessing
        import select

        parent = multiprocessing.parent_process()
        if parent is None or not hasattr(select, "poll"):
            return False
        watch = select.poll()
        watch.register(parent.sentinel, select.POLLIN | select.POLLHUP)
        _parent_pipe.append(watch)
    return bool(_parent_pipe[0].poll(0))


def _tie_to_parent(parent_pid: int) -> None:
    """End this child (and what it started) as soon as its parent dies: a thread waits for
    EOF on the pipe the parent holds, and the kernel signals the parent's death."""
    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is not None:

        def watch() -> None:
            parent.join()  # returns when the parent's end of the pipe is closed: it died
            _end_now(PARENT_GONE_EXIT)

        threading.Thread(target=watch, name="openprogram-parent-watch", daemon=True).start()
    rt_signal = getattr(signal, "SIGRTMIN", None)
    if rt_signal is not None:
        death = rt_signal + 1

        def on_death(_signum: int, _frame: Any) -> None:
            if os.getppid() != parent_pid:  # the process, not only the thread that started us
                _end_now(PARENT_GONE_EXIT)

        signal.signal(death, on_death)
        proctree.signal_on_parent_death(death)
    if _parent_gone(parent_pid):  # died before any of this was in place
        _end_now(PARENT_GONE_EXIT)


def _child_main(spec: _Spec, outbox: Any, inbox: Any) -> None:
    """Entry point of the spawned interpreter (``outbox`` goes to the parent)."""
    try:
        os.setpgrp()  # stop() kills the group: whatever the function started dies with it
    except OSError:
        pass
    for value in spec.secrets:  # before anything can be written
        register_secret(value)
    proctree.become_subreaper()  # what the function starts stays under this process
    signal.signal(signal.SIGTERM, lambda _signum, _frame: _end_now(128 + signal.SIGTERM))
    _tie_to_parent(spec.parent_pid)
    install_settings(spec.settings)
    try:
        outcome: tuple[Any, ...] = ("result", _run_child(spec, outbox, inbox))
        try:
            pickle.dumps(outcome)
        except Exception as exc:
            outcome = ("error", f"the result cannot be sent back: {exc}", "", False)
    except BaseException as exc:
        outcome = ("error", error_text(exc), traceback_text(exc), is_cancellation(exc))
    proctree.end_tree(os.getpid(), include_root=False)  # nothing it started outlives it
    outbox.put(outcome)
    outbox.close()
    outbox.join_thread()


def _run_child(spec: _Spec, outbox: Any, inbox: Any) -> Any:
    network.set_model_requests_allowed(spec.allow_requests)
    fn = _resolve(spec.target)
    runtime = pickle.loads(spec.runtime) if spec.runtime is not None else None

    def forward(session_id: str, node: dict[str, Any]) -> None:
        outbox.put(("node", session_id, node))

    def ask_parent(question: str, choices: list[str] | None) -> str | None:
        outbox.put(("ask", question, choices))
        answer: str | None = inbox.get()
        return answer

    unsubscribe = events.subscribe(forward)
    try:  # session_context opens the session (a bare call's: created, as its rule says)
        with session_context(
            spec.session_id, runtime=runtime, source="process", message=spec.target
        ) as handle:
            writer = _ChildWriter(handle.writer, spec.parent_pid)
            try:
                # the nodes hang under the parent's frame; questions go to the parent
                with using(writer=writer, call_id=spec.call_id, ask=ask_parent):
                    return fn(*spec.args, **spec.kwargs)
            finally:
                writer.check()  # nor is the turn ended and committed once the parent is gone
    finally:
        unsubscribe()


class _ChildWriter:
    """The child's node writer: the turn's own, writing nothing once the parent is gone (the
    parent's recovery closes the frame the child hangs under); the child ends instead."""

    def __init__(self, nodes: SessionNodeWriter, parent_pid: int) -> None:
        self.nodes = nodes
        self.parent_pid = parent_pid
        self.session_id = nodes.session_id

    def check(self) -> None:
        if _parent_gone(self.parent_pid):
            _end_now(PARENT_GONE_EXIT)

    @property
    def session(self) -> Session:
        return self.nodes.session

    @property
    def turn(self) -> int:
        return self.nodes.turn

    @property
    def head_id(self) -> str | None:
        return self.nodes.head_id

    def get(self, node_id: str) -> Call:
        return self.nodes.get(node_id)

    def append(self, call: Call, *, turn_level: bool = False) -> Call:
        self.check()
        return self.nodes.append(call, turn_level=turn_level)

    def append_many(self, calls: Sequence[Call]) -> list[Call]:
        self.check()
        return self.nodes.append_many(calls)

    def update(self, call: Call) -> None:
        self.check()
        self.nodes.update(call)

    def commit(self, message: str) -> str | None:
        self.check()
        return self.nodes.commit(message)
