"""``openprogram.map``: one agentic function over many items, on any executor, recorded.

The kernel stays the only writer of the session.  Each item runs on a worker (a thread of
this process by default, a process pool, a Dask cluster) inside a memory-only store; its
nodes come back with its result and :class:`MapRun` appends them under the caller's frame
(the cell's turn) in item order, with fresh ids and seqs from the session — so the DAG
reads as if the calls had run here one after the other, each with its worker's name.

Failures are ordinary: an item that raises has its error node and its exception in the
results; an attempt lost with a dead worker is recorded ``interrupted`` before its retry;
``stop()`` (or Ctrl-C) cancels what has not started and records every item's end.  A Dask
cluster left without any worker for the setting's time (``OPENPROGRAM_NO_WORKER_TIMEOUT``,
see :mod:`openprogram.scale.workers`) ends the map with :class:`~openprogram.errors.ExecutorLost`
once every item is recorded: what finished stays, the rest is interrupted or cancelled.

A runtime's budget binds items on other processes as it binds threads here: each item sent
carries its share of what is left (:meth:`~openprogram.usage.budget.Budget.share`), held
here until its result is back, and runs under it — a call past its share is refused as a
call past the budget is (decision 0032).
"""

from __future__ import annotations

import copy
import os
import pickle
import queue
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError, Executor, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from openprogram.agentic_programming.function import (
    get_call_id,
    get_current_runtime,
    run_in_session,
)
from openprogram.agentic_programming.runtime import Runtime
from openprogram.agentic_programming.stopping import stop_requested
from openprogram.context.nodes import CANCELLED, ERROR, INTERRUPTED, Call
from openprogram.errors import ExecutorLost, RunStopped, UserError
from openprogram.scale.executors import DaskSubmitter, FuturesSubmitter, Message, dask_client
from openprogram.scale.merge import adopt, attempt_node, inputs_of, snapshot
from openprogram.scale.progress import Progress
from openprogram.scale.task import Outcome, RuntimeSpec, Shared, Task
from openprogram.scale.workers import no_worker_timeout
from openprogram.settings import NO_WORKER_TIMEOUT
from openprogram.store.session.files import dumps, interrupts_deferred, loads
from openprogram.store.vars import get_store, get_turn_id
from openprogram.usage.budget import Hold
from openprogram.usage.prices import price_of

DEFAULT_THREADS = 8
OFFLINE_PROVIDERS = ("test", "function")  # they hold no credential: they travel as they are

_active: set[MapRun] = set()
_active_mu = threading.Lock()


def stop_all() -> int:
    """Stop every map running in this process (what a stop button calls); returns how many."""
    with _active_mu:
        runs = list(_active)
    for run in runs:
        run.stop()
    return len(runs)


def map(  # `openprogram.map`: shadows the builtin only for `from openprogram import *`
    fn: Callable[..., Any],
    items: Iterable[Any],
    *,
    executor: Executor | Any = None,
    max_in_flight: int | None = None,
    raise_errors: bool = False,
    progress: bool = True,
    runtime: Runtime | None = None,
) -> list[Any]:
    """``[fn(item) for item in items]``, run on ``executor``, every call recorded here.

    ``executor``: any ``concurrent.futures.Executor`` (default: threads of this process),
    a ``dask.distributed.Client`` or its ``get_executor()``.  ``max_in_flight``: items
    submitted at once (default: the executor's workers; Dask: the cluster's threads).
    An item that raises gives its exception in its place in the result (``raise_errors``:
    the first one is raised once every item is recorded).  ``runtime``: the Runtime the
    items use (default: the ambient one; a remote worker rebuilds it from its own
    environment unless it is an offline ``test``/``function`` provider).
    """
    run = MapRun(
        fn,
        items,
        executor=executor,
        max_in_flight=max_in_flight,
        raise_errors=raise_errors,
        progress=progress,
        runtime=runtime,
    )
    return run.run()


class MapRun:
    """One map: submit in order with a bounded window, append results in item order."""

    def __init__(
        self,
        fn: Callable[..., Any],
        items: Iterable[Any],
        *,
        executor: Executor | Any = None,
        max_in_flight: int | None = None,
        raise_errors: bool = False,
        progress: bool = True,
        runtime: Runtime | None = None,
    ) -> None:
        if not callable(fn):
            raise UserError(f"openprogram.map needs a function, got {type(fn).__name__}")
        if max_in_flight is not None and max_in_flight < 1:
            raise UserError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self.fn = fn
        self.items = list(items)
        self.executor = executor
        self.max_in_flight = max_in_flight
        self.raise_errors = raise_errors
        self.label = str(getattr(fn, "__name__", None) or type(fn).__name__)
        self.progress = Progress(self.label, len(self.items), enabled=progress)
        self.runtime = runtime
        self._stop = threading.Event()
        self._run_stopped = False
        self._executor_lost: ExecutorLost | None = None
        self._inbox: queue.Queue[Message] = queue.Queue()
        self.results: list[Any] = [None] * len(self.items)
        self.failed = 0
        self.tokens = 0

    def stop(self) -> None:
        """Cancel what has not started; what runs is recorded as it ends (Dask: cancelled)."""
        self._stop.set()
        self._inbox.put(("stop", -1, None))

    def run(self) -> list[Any]:
        """Run the map in the current turn (or as one turn of the process session)."""
        with self._ctrl_c_stops():
            results: list[Any] = run_in_session(self._run_in_turn)
        return results

    # -- setting up ---------------------------------------------------------------------------
    def _run_in_turn(self) -> list[Any]:
        writer = get_store()
        assert writer is not None
        self.writer = writer
        self.anchor = get_call_id()
        token = os.urandom(6).hex()
        client = dask_client(self.executor)
        own_pool: ThreadPoolExecutor | None = None
        submitter: DaskSubmitter | FuturesSubmitter
        self.no_worker_limit: float | None = None
        if client is not None:
            self.no_worker_limit = no_worker_timeout()
            submitter = DaskSubmitter(client, self._inbox, token)
        else:
            executor = self.executor
            if executor is None:
                own_pool = ThreadPoolExecutor(
                    self.max_in_flight or DEFAULT_THREADS, thread_name_prefix="openprogram-map"
                )
                executor = own_pool
            submitter = FuturesSubmitter(executor, self._inbox)
        self.submitter = submitter
        runtime = self.runtime if self.runtime is not None else get_current_runtime()
        remote = submitter.remote
        what = f"{self.label} cannot be sent to other processes"
        fn_payload = _pickled(self.fn, what) if remote else self.fn
        self.shared = Shared(
            token=token,
            session_id=writer.session_id,
            turn=writer.turn,
            turn_id=get_turn_id(),
            anchor=self.anchor,
            head_id=writer.session.head_id,
            seen=self._seen(runtime),
            label=self.label,
            runtime=_runtime_spec(runtime, submitter.processes()) if remote else runtime,
            remote=remote,
        )
        self.fn_payload = fn_payload
        self.budget = runtime.budget if runtime is not None else None
        if self.budget is not None and self.budget.active:
            self.budget.spent(writer)  # counted here once; threads of this process share it
        else:
            self.budget = None
        self._holds: dict[int, Hold] = {}  # remote: each item's share of the budget, held
        self._price = None  # dollars per call, for the shares of a dollar budget
        if self.budget is not None and self.budget.usd is not None and runtime is not None:
            provider = runtime.provider
            if provider is not None:
                vendor = getattr(provider, "vendor_endpoint", True)
                self._price = price_of(runtime.model, provider.name, vendor_endpoint=vendor)
        self.window = self.max_in_flight or submitter.default_in_flight()
        with _active_mu:
            _active.add(self)
        try:
            submitter.start()
            self._drive_to_end()
        finally:
            with _active_mu:
                _active.discard(self)
            submitter.close()
            if self.budget is not None:  # no share left held: later calls would wait on it
                for hold in self._holds.values():
                    self.budget.release(hold)
            if own_pool is not None:
                own_pool.shutdown(wait=False, cancel_futures=True)
            self._show(final=True)
        if self.raise_errors:
            for value in self.results:
                if isinstance(value, BaseException):
                    raise value
        return self.results

    def _seen(self, runtime: Runtime | None) -> bytes:
        session = self.writer.session

        def lookup(node_id: str) -> Call | None:
            try:
                return session.get(node_id)
            except Exception:
                return None

        nodes = snapshot(
            lookup,
            session.children,
            session.head_id,
            self.anchor,
            policy=runtime.context if runtime is not None else None,
            steps=not getattr(self.fn, "__agentic__", False),
        )
        return dumps([n.to_dict() for n in nodes])

    # -- the loop -----------------------------------------------------------------------------
    def _drive_to_end(self) -> None:
        self._pending = list(range(len(self.items)))[::-1]  # popped from the end: item order
        self._running: set[int] = set()  # submitted, not finished: the window
        self._unsettled: set[int] = set()  # submitted, result not here yet
        self._ready: dict[int, list[Call]] = {}
        self._lost: dict[int, list[Call]] = {}
        self._next = 0
        try:
            self._drive()  # a first Ctrl-C stops it: what runs is collected as it ends
        except KeyboardInterrupt:  # a second Ctrl-C, or a background run killed: give up
            self._abandon()
            raise
        if self._ctrl_c:
            raise KeyboardInterrupt
        if self._executor_lost is not None:
            self._executor_lost.results = self.results
            raise self._executor_lost
        if self._run_stopped:  # the background run this map belongs to was stopped
            raise RunStopped("stopped by request: items not started were cancelled")

    @contextmanager
    def _ctrl_c_stops(self) -> Iterator[None]:
        """While the map runs on the main thread, a first Ctrl-C (SIGINT) only sets a flag
        the loop reads as a stop — a KeyboardInterrupt raised at any line of the loop could
        lose an item (a result taken off the queue, a batch popped, a task submitted but not
        yet tracked); a second one raises as usual, and one that came after the loop is
        raised once the map is over.  Elsewhere (a thread, a host owning SIGINT) nothing
        changes."""
        self._ctrl_c = self._gave_up = False
        if (
            threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        ):
            yield
            return

        def on_sigint(signum: int, frame: Any) -> None:
            if self._ctrl_c:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                self._gave_up = True  # read by the loop too: an exception raised while a
                raise KeyboardInterrupt  # __del__ runs (gitdb's, smmap's) is swallowed
            self._ctrl_c = True  # only a flag: no lock is taken in a signal handler

        signal.signal(signal.SIGINT, on_sigint)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if self._ctrl_c:  # pressed after the loop (while the turn was committed)
            raise KeyboardInterrupt

    def _abandon(self) -> None:
        """Giving up at once: every item not recorded yet ends ``cancelled`` — whatever line
        the interrupt landed on, nothing is lost (the loop's sets may be half updated)."""
        self._stop.set()
        try:
            self.submitter.cancel()
        finally:
            not_started = set(self._pending)
            self._pending.clear()
            self._unsettled.clear()
            for index in range(self._next, len(self.items)):
                if index not in self._ready:
                    started = index not in not_started
                    why = "abandoned while running" if started else "stopped before it started"
                    self._settle(index, CancelledError(f"{why} (interrupted twice)"))
            self._append_ready()

    def _drive(self) -> None:
        cancelled = False
        while self._next < len(self.items):
            if self._gave_up:  # the second Ctrl-C's exception was lost in a destructor
                raise KeyboardInterrupt
            if self._ctrl_c and not self._stop.is_set():
                self.stop()
            if self._pending and self._over_budget():
                self._budget_spent()
            if not cancelled and not self._stop.is_set() and stop_requested():
                self._run_stopped = True
                self.stop()
            if self._stop.is_set() and not cancelled:
                cancelled = True
                while self._pending:
                    self._settle(self._pending.pop(), CancelledError("stopped before it started"))
                self.submitter.cancel()
            self._submit(self.window - len(self._running))
            self._receive()
            gone = self.submitter.gone_for(self.no_worker_limit)
            if gone is not None and self._executor_lost is None:
                self._lose_executor(*gone)
            self._append_ready()
            self._show()

    def _lose_executor(self, waited: float, why: str) -> None:
        """The cluster had no worker for too long: every item not back yet ends now (the
        ones sent interrupted, the others cancelled) and the map raises once they are
        recorded."""
        left = [i for i in range(self._next, len(self.items)) if i not in self._ready]
        message = (
            f"openprogram.map {self.label}: {why}; {len(self.items) - len(left)} of "
            f"{len(self.items)} items came back and are recorded, {len(left)} did not — "
            f"start workers and run it again, or set {NO_WORKER_TIMEOUT} (seconds, 0: wait "
            "forever)"
        )
        error = ExecutorLost(self.submitter.name, waited, message)
        self._executor_lost = error
        self._stop.set()
        self.submitter.cancel()
        not_sent = CancelledError(f"not sent: {why}")
        while self._pending:
            self._settle(self._pending.pop(), not_sent, started=False)
        for index in sorted(self._unsettled):
            self._settle(index, error)
        self._unsettled.clear()
        self._running.clear()

    def _budget_spent(self) -> None:
        why = f"the budget of {self.budget.describe() if self.budget else ''} is spent"
        while self._pending:  # what runs ends; what has not started is not sent
            self._settle(self._pending.pop(), CancelledError(why))

    def _submit(self, slots: int) -> None:
        tasks: list[Task] = []
        while self._pending and len(tasks) < slots:
            index = self._pending.pop()
            try:
                item = self.items[index]
                if self.shared.remote:
                    item = _pickled(item, f"item {index} cannot be sent")
            except Exception as exc:
                self._settle(index, exc, started=False)
                continue
            allowance = None
            if self.budget is not None and self.shared.remote:  # its calls run beyond reach
                sent_with = min(slots - len(tasks), len(self._pending) + 1)
                hold = self.budget.share(self.writer, sent_with, self._price)
                if hold is None:  # all that is left is held: wait for the calls holding it
                    self._pending.append(index)
                    if not self._holds and not self.budget.wait_for_others(self.writer, 0.2):
                        self._budget_spent()
                    break
                self._holds[index] = hold
                allowance = self.budget.allowance(hold)
            tasks.append(Task(index, item, self.fn_payload, self.shared, allowance))
        if not tasks:
            return
        try:
            self.submitter.submit(tasks)
        except Exception as exc:  # the executor refuses work (shut down, broken pool)
            for task in tasks:
                self._settle(task.index, exc, started=False)
            return
        indexes = [t.index for t in tasks]
        self._running.update(indexes)
        self._unsettled.update(indexes)

    def _receive(self) -> None:
        if not self._unsettled:
            return
        try:  # wakes up now and then to see a stop of the run this map belongs to
            messages = [self._inbox.get(timeout=0.2)]
        except queue.Empty:
            return
        while True:
            try:
                messages.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        for kind, index, payload in messages:
            if kind == "finished":
                self._running.discard(index)
            elif kind == "result" and index in self._unsettled:
                self._running.discard(index)
                self._unsettled.discard(index)
                self._settle(index, payload)
            elif kind == "lost" and index in self._unsettled:
                self._lose(index, *payload)

    def _lose(self, index: int, address: str, name: str | None) -> None:
        """An attempt of ``index`` died with its worker: recorded, before its retry."""
        lost = self._lost.setdefault(index, [])
        lost.append(
            attempt_node(
                self.label,
                inputs_of(self.fn, self.items[index]),
                anchor=self.anchor,
                index=index,
                status=INTERRUPTED,
                reason=f"its worker {name or address} died while it ran; retried",
                attempt=len(lost) + 1,
                worker=address,
                worker_name=name,
            )
        )

    # -- results ------------------------------------------------------------------------------
    def _settle(self, index: int, result: Outcome | BaseException, *, started: bool = True) -> None:
        """Turn what came back for ``index`` into its nodes and its place in the results
        (``started``: it was submitted, so a dead worker may have taken it down)."""
        hold = self._holds.pop(index, None)
        try:
            self._take(index, result, started)
        finally:  # after what it used was counted, whatever happened counting it
            if self.budget is not None:
                self.budget.release(hold)

    def _take(self, index: int, result: Outcome | BaseException, started: bool) -> None:
        attempt = len(self._lost.get(index, ())) + 1
        if isinstance(result, Outcome):
            try:
                nodes = [Call.from_dict(d) for d in loads(result.nodes)]
            except (ValueError, TypeError) as exc:  # not nodes: the item failed, say why
                result = UserError(f"the nodes item {index} sent back are unreadable: {exc}")
        if isinstance(result, Outcome):
            adopt(
                nodes,
                anchor=self.anchor,
                index=index,
                worker=result.worker,
                worker_name=result.worker_name,
                attempt=attempt,
            )
            value, error = self._decode(result)
            self.tokens += _tokens(nodes)
            if self.budget is not None and self.shared.remote:  # threads here counted theirs
                for call in nodes:
                    if call.kind == "llm":
                        self.budget.record(self.writer, call)
        else:
            error, value = result, None
            nodes = self._failed_attempt(index, error, started=started, attempt=attempt)
        if error is not None:
            self.failed += 1
            self.results[index] = error
        else:
            self.results[index] = value
        self._ready[index] = self._lost.pop(index, []) + nodes

    def _failed_attempt(
        self, index: int, error: BaseException, *, started: bool, attempt: int
    ) -> list[Call]:
        """The node of an attempt that sent nothing back (cancelled, never sent, lost)."""
        reason = f"{type(error).__name__}: {error}".strip().rstrip(":")
        died = started and _worker_died(error)
        lost = self._lost.get(index)
        if died and lost:  # Dask gave up after workers died: the last death is recorded
            who = "the map" if isinstance(error, ExecutorLost) else "Dask"
            lost[-1].metadata["error"] += f"; then {who} gave up ({reason})"
            return []
        status = INTERRUPTED if died else CANCELLED if isinstance(error, CancelledError) else ERROR
        node = attempt_node(
            self.label,
            inputs_of(self.fn, self.items[index]),
            anchor=self.anchor,
            index=index,
            status=status,
            reason=reason,
            attempt=attempt,
        )
        return [node]

    def _decode(self, outcome: Outcome) -> tuple[Any, BaseException | None]:
        if not self.shared.remote:
            return outcome.value, outcome.error
        try:
            if outcome.error is not None:
                return None, pickle.loads(outcome.error)
            return pickle.loads(outcome.value), None
        except Exception as exc:
            return None, UserError(f"the result of an item could not be read back: {exc}")

    def _append_ready(self) -> None:
        batch: list[Call] = []
        end = self._next
        while end in self._ready:
            batch += self._ready[end]
            end += 1
        if not batch:
            return
        with interrupts_deferred():  # a batch is appended whole, then taken off the list
            if self.anchor is not None:
                self.writer.append_many(batch)
            else:
                for call in batch:  # no frame: the items are turns of their own, after HEAD
                    self.writer.append(call, turn_level=call.caller is None)
            for index in range(self._next, end):
                del self._ready[index]
            self._next = end

    def _over_budget(self) -> bool:
        """Whether the runtime's budget is spent (then no further item is sent; each call is
        also checked before it is sent: on a thread here against the budget, on another
        process against its item's share, see :meth:`_submit`)."""
        budget = self.budget
        if budget is None:
            return False
        spent = budget.spent(self.writer)
        return (budget.tokens is not None and spent.tokens >= budget.tokens) or (
            budget.usd is not None and spent.cost >= budget.usd
        )

    def _show(self, *, final: bool = False) -> None:
        done = self._next + len(self._ready)
        self.progress.show(done, self.failed, len(self._running), self.tokens, final=final)


def _tokens(nodes: list[Call]) -> int:
    total = 0
    for call in nodes:
        usage = call.metadata.get("usage")
        if call.kind == "llm" and isinstance(usage, dict):
            total += int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
    return total


def _worker_died(error: BaseException) -> bool:
    """Dask gave up after workers died running it, a process pool lost a process, or the
    cluster was left with no worker at all."""
    return type(error).__name__ in ("KilledWorker", "BrokenProcessPool", "ExecutorLost")


def _pickled(obj: Any, what: str) -> bytes:
    try:
        import cloudpickle

        dump = cloudpickle.dumps
    except ImportError:  # pragma: no cover - the dask extra brings it
        dump = pickle.dumps
    try:
        return dump(obj)  # type: ignore[no-any-return]
    except Exception as exc:
        raise UserError(
            f"openprogram.map: {what} ({type(exc).__name__}: {exc}); define it, and what it "
            "uses, in an importable module or make it picklable by cloudpickle — nothing "
            "was submitted"
        ) from None


def _runtime_spec(runtime: Runtime | None, processes: int = 1) -> RuntimeSpec:
    """What a remote worker needs to build the same Runtime — never a credential.  Each of
    the ``processes`` workers paces its requests at an equal share of the runtime's rate."""
    if runtime is None:
        return RuntimeSpec()
    rate = runtime.requests_per_minute
    settings = {  # not the budget: each task carries its item's share (MapRun._submit)
        "max_retries": runtime.max_retries,
        "backoff": runtime.backoff,
        "gate_attempts": runtime.gate_attempts,
        "context": runtime.context,
        "timeout": runtime.timeout,
        "requests_per_minute": rate / processes if rate else None,
    }
    provider = runtime.provider
    if provider is None:
        return RuntimeSpec(settings=settings)
    if provider.name not in OFFLINE_PROVIDERS:
        rewrap = getattr(provider, "rewrap", None)  # a wrapper, put back around the worker's
        wrap = rewrap() if callable(rewrap) else None
        return RuntimeSpec(
            provider=provider.name, model=runtime.model, settings=settings, wrap=wrap
        )
    offline = copy.copy(provider)
    if hasattr(offline, "requests"):
        offline.requests = []  # what it answered here stays here
    spec = RuntimeSpec(model=runtime.model, offline=offline, settings=settings)
    _pickled(spec, f"the runtime's {provider.name!r} provider cannot be sent to other processes")
    return spec
