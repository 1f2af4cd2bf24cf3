"""Long runs that do not block: an agentic function (or a notebook cell) on a thread.

``background(fn, *args)`` returns a :class:`BackgroundRun` at once; the work runs on a
thread of this process, as one turn of its session (``session_context`` inside the
thread), so the caller's namespace stays usable and the process stays the session's only
writer.  ``run.progress()`` — the stage (the function running now), LLM calls done,
tokens, elapsed — is kept up to date from the session's node events; listeners added with
``run.on_progress`` hear every change.

``run.stop()`` asks the run to stop after the call in flight: the next ``runtime.exec``
raises :class:`RunStopped` (a ``KeyboardInterrupt``, so every open node ends
``cancelled``, and ``except Exception`` in user code does not swallow it).  A second
``stop()`` raises :class:`RunKilled` inside the thread at once — at its next Python
instruction; a provider call in flight runs on a helper thread meanwhile
(:func:`~openprogram.agentic_programming.stopping.killable`), so a kill does not wait for a
blocking socket read (the abandoned read ends within the provider's timeout, unrecorded).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from openprogram.agentic_programming.stopping import (
    raise_in_thread,
    using_stop_flag,
)
from openprogram.errors import RunKilled, RunStopped
from openprogram.store.session import events
from openprogram.store.session.context import session_context

RUNNING, COMPLETED, STOPPED, FAILED = "running", "completed", "stopped", "failed"
__all__ = ["BackgroundRun", "Progress", "RunKilled", "RunStopped", "background"]


@dataclass
class Progress:
    state: str = RUNNING
    stage: str = ""
    calls: int = 0
    tokens: int = 0
    elapsed: float = 0.0

    def line(self) -> str:
        stage = f" · stage {self.stage}" if self.stage else ""
        return (
            f"{self.state}{stage} · {self.calls} calls · {self.tokens:,} tokens"
            f" · {self.elapsed:.1f} s"
        )


Listener = Callable[[Progress], None]


class BackgroundRun:
    """A run on a thread.  ``target(run)`` does the work; it calls :meth:`attach` once its
    turn exists so progress can follow the turn's nodes."""

    def __init__(self, target: Callable[[BackgroundRun], Any], *, label: str = "") -> None:
        self.label = label
        self.session_id: str | None = None
        self.turn: int | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.started = time.monotonic()
        self.finished: float | None = None
        self._target = target
        self._stop = threading.Event()
        self._kill = threading.Event()
        self._stops = 0
        self._attached = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._counted: set[str] = set()
        self._running: dict[str, str] = {}  # function node id -> name, in start order
        self._progress = Progress()
        self._unsubscribe: Callable[[], None] | None = None
        self.thread = threading.Thread(target=self._main, name=f"openprogram-bg {label}")
        self.thread.daemon = True  # a kernel shutting down does not wait for it

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, context: contextvars.Context | None = None) -> BackgroundRun:
        """Start the thread, in a copy of ``context`` (default: a fresh one) — a notebook
        passes the cell's, so output printed by the run lands under that cell."""
        self._context = context
        self.thread.start()
        return self

    def _main(self) -> None:
        def work() -> None:
            with using_stop_flag(self._stop, self._kill):
                self.result = self._target(self)

        try:
            if self._context is not None:
                self._context.run(work)
            else:
                contextvars.Context().run(work)
        except BaseException as exc:  # recorded in the nodes; kept here for wait()
            self.error = exc
        finally:
            self.finished = time.monotonic()
            if self._unsubscribe is not None:
                self._unsubscribe()
            state = COMPLETED if self.error is None else FAILED
            if isinstance(self.error, RunStopped):
                state = STOPPED
            with self._lock:
                self._progress.state = state
            self._attached.set()
            self._done.set()
            self._notify()

    def attach(self, session_id: str, turn: int) -> None:
        """Follow the nodes of ``turn`` in ``session_id`` (called by the target)."""
        self.session_id, self.turn = session_id, turn
        self._unsubscribe = events.subscribe(self._on_write)
        self._attached.set()

    def wait_attached(self, timeout: float | None = None) -> bool:
        return self._attached.wait(timeout)

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    def wait(self, timeout: float | None = None) -> Any:
        """Wait for the end; return the result or raise the run's error."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the background run is still {self.progress().line()}")
        if self.error is not None:
            raise self.error
        return self.result

    def stop(self) -> str:
        """First call: stop after the call in flight.  Second: kill now."""
        if not self.running:
            return "finished already"
        self._stops += 1
        self._stop.set()
        if self._stops == 1:
            return "stopping after the current call (stop again to kill it now)"
        raise_in_thread(self.thread, RunKilled)
        # After the exception, so the thread raises it before it could see the flag (one
        # RunKilled, not two); a call waiting in killable() also ends on the flag alone,
        # and the next LLM call raises RunKilled (when the exception could not be raised).
        self._kill.set()
        return "killed"

    # -- progress ------------------------------------------------------------------------
    def on_progress(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def progress(self) -> Progress:
        with self._lock:
            p = Progress(**vars(self._progress))
        p.elapsed = (self.finished or time.monotonic()) - self.started
        return p

    def _on_write(self, session_id: str, node: dict[str, Any]) -> None:
        if session_id != self.session_id or node.get("turn") != self.turn:
            return
        meta = node.get("metadata") or {}
        kind, status, node_id = meta.get("kind"), meta.get("status"), str(node.get("id"))
        with self._lock:
            if kind == "function":
                if status == RUNNING:
                    self._running[node_id] = str(node.get("name"))
                else:
                    self._running.pop(node_id, None)
                self._progress.stage = next(reversed(self._running.values()), "")
            elif kind == "llm" and status != RUNNING and node_id not in self._counted:
                self._counted.add(node_id)
                usage = meta.get("usage") or {}
                self._progress.calls += 1
                self._progress.tokens += int(usage.get("input_tokens") or 0) + int(
                    usage.get("output_tokens") or 0
                )
            else:
                return
        self._notify()

    def _notify(self) -> None:
        progress = self.progress()
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(progress)
            except Exception:  # a broken view must never break the run
                pass


def background(
    fn: Callable[..., Any],
    *args: Any,
    session_id: str | None = None,
    runtime: Any = None,
    on_progress: Listener | None = None,
    **kwargs: Any,
) -> BackgroundRun:
    """Run ``fn(*args, **kwargs)`` on a thread as one turn of ``session_id`` (a new session
    if None); returns once the turn exists (``run.session_id`` names it).  ``on_progress``
    hears every change from the first node on."""
    label = getattr(fn, "__name__", "run")

    def target(run: BackgroundRun) -> Any:
        with session_context(session_id, runtime=runtime, source="background", message=label) as h:
            run.attach(h.session_id, h.writer.turn)
            return fn(*args, **kwargs)

    run = BackgroundRun(target, label=label)
    if on_progress is not None:
        run.on_progress(on_progress)
    run.start()
    run.wait_attached(10)
    return run
