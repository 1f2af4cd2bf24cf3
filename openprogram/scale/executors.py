"""Where a map's tasks run: any ``concurrent.futures.Executor``, or a Dask cluster.

A submitter sends :class:`~openprogram.scale.task.Task` s and reports on the map's queue:
``("finished", index, None)`` as soon as a task is done (its slot in the window is free)
and ``("result", index, outcome or exception)`` once its result is here.

:class:`DaskSubmitter` talks to the ``Client`` (also when given ``client.get_executor()``):
tasks get keys the map recognises and go in batches, results are gathered in batches by a
thread of their own (the map's loop never waits on a gather) as Dask's ``as_completed``
hands them over — it waits on a task's state, so a result lost with its worker after it
finished is waited for again until its retry is done (a done-callback would fire at once
for such a future, over and over while the retry runs), and when a worker is removed
while it held tasks of this map, the scheduler's ``remove-worker`` event puts
``("lost", index, (address, name))`` on the queue before the retry's result can arrive.
The same events say which workers the cluster has (:class:`~openprogram.scale.workers.Workers`):
a cluster left with none is given up on after the setting's time (:meth:`gone_for`).
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Executor, Future, ThreadPoolExecutor
from typing import Any

from openprogram.scale.task import Task, run_task
from openprogram.scale.workers import Workers

Message = tuple[str, int, Any]
DEFAULT_IN_FLIGHT = 16


class FuturesSubmitter:
    """Any ``concurrent.futures.Executor``; a thread pool runs the items in this process."""

    def __init__(self, executor: Executor, inbox: queue.Queue[Message]) -> None:
        self.executor = executor
        self.inbox = inbox
        self.remote = not isinstance(executor, ThreadPoolExecutor)
        self.name = type(executor).__name__
        self._futures: dict[int, Future[Any]] = {}

    def _workers(self) -> int | None:
        """The executor's size, when it says (thread and process pools do)."""
        workers = getattr(self.executor, "_max_workers", None)
        return workers if isinstance(workers, int) and workers > 0 else None

    def default_in_flight(self) -> int:
        return self._workers() or DEFAULT_IN_FLIGHT

    def processes(self) -> int:
        """Worker processes that pace requests apart (a process pool's size; else 1)."""
        return (self._workers() or 1) if self.remote else 1

    def start(self) -> None:
        pass

    def gone_for(self, limit: float | None) -> tuple[float, str] | None:
        """A pool's workers are its own: a pool that lost one fails its tasks itself."""
        return None

    def submit(self, tasks: list[Task]) -> None:
        for task in tasks:
            future = self.executor.submit(run_task, task)
            self._futures[task.index] = future
            future.add_done_callback(functools.partial(self._done, task.index))

    def _done(self, index: int, future: Future[Any]) -> None:
        self._futures.pop(index, None)
        if future.cancelled():
            result: Any = CancelledError()
        else:
            error = future.exception()
            result = error if error is not None else future.result()
        self.inbox.put(("result", index, result))

    def cancel(self) -> None:
        """Cancel what has not started (a cancelled task reports back as done)."""
        for future in list(self._futures.values()):
            future.cancel()

    def close(self) -> None:
        pass


class DaskSubmitter:
    """A ``dask.distributed.Client``: keyed tasks, batched submits and gathers, lost
    attempts."""

    remote = True

    def __init__(self, client: Any, inbox: queue.Queue[Message], token: str) -> None:
        self.client = client
        self.inbox = inbox
        self.prefix = f"openprogram-map-{token}-"
        self._futures: dict[int, Any] = {}
        self._names: dict[str, str] = {}
        self._previous: Callable[..., Any] | None = None
        self.name = str(getattr(client.scheduler, "address", client))
        self.workers = Workers(self.name, ())
        self._tracker: Any = None  # Dask's as_completed: what finished, in the order it did
        self._more = threading.Event()  # tasks were submitted (or the map is over)
        self._closed = False
        self._fetcher = threading.Thread(target=self._fetch, name="openprogram-map-gather")
        self._fetcher.daemon = True

    def default_in_flight(self) -> int:
        return 2 * max(1, sum(self.client.nthreads().values()))  # hides the round trips

    def processes(self) -> int:
        """The cluster's workers now (each paces its own requests)."""
        return max(1, len(self.client.nthreads()))

    def start(self) -> None:
        previous = getattr(self.client, "_event_handlers", {}).get("all")
        if not isinstance(getattr(previous, "__self__", None), DaskSubmitter):
            self._previous = previous  # a handler the user set for this topic: chained
        self.client.subscribe_topic("all", self._on_event)  # first: no worker goes unseen
        info = self.client.scheduler_info()
        workers = info.get("workers", {})
        self._names = {a: str(w.get("name", a)) for a, w in workers.items()}
        self.workers = Workers(self.name, workers)
        self._tracker = _as_completed(self.client)
        self._fetcher.start()

    def gone_for(self, limit: float | None) -> tuple[float, str] | None:
        """``(seconds, why)`` once the cluster has had no worker for ``limit`` seconds."""
        return self.workers.gone_for(limit)

    def _on_event(self, event: Any) -> None:
        if self._previous is not None:
            try:
                self._previous(event)
            except Exception:
                pass
        msg = event[1] if isinstance(event, tuple) and len(event) == 2 else {}
        action = msg.get("action") if isinstance(msg, dict) else None
        if action == "add-worker":
            self.workers.added(str(msg.get("worker", "")))
        if action != "remove-worker":
            return
        worker = str(msg.get("worker", ""))
        keys = set(msg.get("processing-tasks") or ()) | set(msg.get("lost-computed-tasks") or ())
        lost = [
            int(key[len(self.prefix) :])
            for key in keys
            if isinstance(key, str) and key.startswith(self.prefix)
        ]
        for index in lost:
            if index in self._futures:
                self.inbox.put(("lost", index, (worker, self._names.get(worker))))
        self.workers.removed(worker, len(lost))

    def submit(self, tasks: list[Task]) -> None:
        keys = [f"{self.prefix}{t.index}" for t in tasks]
        futures = self.client.map(run_task, tasks, key=keys, pure=False)
        for task, future in zip(tasks, futures, strict=True):
            self._futures[task.index] = future
        self._tracker.update(futures)
        self._more.set()

    def _fetch(self) -> None:
        """Gather the results of finished tasks, as many at a time as have finished; when
        none is left to wait for, wait for the next submit."""
        while True:
            self._more.wait()
            self._more.clear()
            for done in self._tracker.batches():
                if self._closed:
                    return
                batch = [(int(f.key[len(self.prefix) :]), f) for f in done]
                for index, _ in batch:
                    self.inbox.put(("finished", index, None))
                try:
                    for index, result in self._collect(batch):
                        self._futures.pop(index, None)
                        self.inbox.put(("result", index, result))
                except Exception as exc:  # the client went away: every item of the batch failed
                    for index, _ in batch:
                        self.inbox.put(("result", index, exc))
            if self._closed:
                return

    def _collect(self, batch: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
        final = ("finished", "error", "cancelled")
        again = [f for _, f in batch if f.status not in final]
        if again:  # its result was lost with a worker since: it runs again, waited for again
            self._tracker.update(again)
        batch = [(i, f) for i, f in batch if f.status in final]
        finished = [(i, f) for i, f in batch if f.status == "finished"]
        values = self.client.gather([f for _, f in finished]) if finished else []
        got = {i: v for (i, _), v in zip(finished, values, strict=True)}
        out: list[tuple[int, Any]] = []
        for index, future in batch:
            if index in got:
                out.append((index, got[index]))
            elif future.status == "cancelled":
                out.append((index, CancelledError()))
            else:
                out.append((index, future.exception()))
        return out

    def cancel(self) -> None:
        """Cancel every task not done (Dask cannot interrupt a running one: its result is
        dropped, and the item recorded ``cancelled``)."""
        self.client.cancel(list(self._futures.values()))

    def close(self) -> None:
        self._closed = True
        if self._tracker is not None:
            self._tracker.clear()
        self._more.set()
        try:
            if self._previous is not None:
                self.client.subscribe_topic("all", self._previous)
            else:
                self.client.unsubscribe_topic("all")
        except Exception:
            pass


def dask_client(executor: Any) -> Any | None:
    """The Dask ``Client`` behind ``executor`` (a Client or its ``get_executor()``)."""
    import sys

    distributed = sys.modules.get("distributed")  # a Dask executor means it is imported
    if distributed is None:
        return None
    if isinstance(executor, distributed.Client):
        return executor
    cf = getattr(distributed, "cfexecutor", None)
    if cf is not None and isinstance(executor, cf.ClientExecutor):
        return executor._client
    return None


def _as_completed(client: Any) -> Any:
    """An empty ``distributed.as_completed`` on ``client``'s loop (not the default client's)."""
    from distributed import as_completed

    return as_completed(loop=client.loop)
