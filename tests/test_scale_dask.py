"""``openprogram.map`` on a real ``dask.distributed.LocalCluster`` (worker processes on
loopback): a thousand items recorded in one turn, stop, errors, and the same nodes as the
local thread run; a worker killed mid-run on a cluster of the test's own (a scheduler and
worker processes: a killed worker stays dead), so no test finds a cluster another one
broke."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError
from pathlib import Path
from typing import Any

import pytest
from dask_cluster import local_cluster, process_cluster
from helpers import map_shape, reopen
from test_scale import cell, classify, items_under, map_under_budget, unpicklable
from waiting import until

import openprogram
from openprogram import create_runtime
from openprogram.agentic_programming.runtime import Runtime
from openprogram.errors import UserError
from openprogram.providers.base import LLMRequest
from openprogram.providers.test import FunctionProvider
from openprogram.scale import MapRun

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def workers() -> Iterator[Any]:
    """Two worker processes on loopback, started once for the module (no test kills one)."""
    with local_cluster(threads_per_worker=4) as dask_client:
        yield dask_client


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[Any]:
    """A client of a cluster for this test alone, whose workers it may kill."""
    with process_cluster(tmp_path, threads=4) as cluster:
        yield cluster.client


def slow_reply(request: LLMRequest) -> str:
    time.sleep(0.05)
    return "bug"


def session_dir(home: Path, session_id: str) -> Path:
    return home / "sessions" / session_id


def test_a_thousand_items_are_one_turn_in_item_order_and_git_is_clean(
    rt: Runtime, op_home: Path, workers: Any
) -> None:
    texts = [f"ticket {i}" for i in range(1000)]
    with cell(rt) as (s, turn):
        results = openprogram.map(
            classify, texts, executor=workers.get_executor(), max_in_flight=1000, progress=False
        )
    assert results == ["bug"] * 1000
    nodes = reopen(op_home, s.session_id)
    calls = items_under(nodes, turn)
    assert [c.input for c in calls] == [{"text": t} for t in texts]
    assert [c.metadata["item"] for c in calls] == list(range(1000))
    call_ids = {c.id for c in calls}
    llms = [n for n in nodes if n.kind == "llm"]
    assert len(llms) == 1000 and {n.caller for n in llms} == call_ids
    assert {n.turn for n in calls + llms} == {turn.turn}
    assert "running" not in {n.status for n in nodes}
    names = {c.metadata["worker_name"] for c in calls}
    assert names <= {"0", "1"} and len(names) == 2  # both workers took items
    path = session_dir(op_home, s.session_id)
    fsck = subprocess.run(["git", "fsck", "--strict"], cwd=path, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    log = subprocess.run(
        ["git", "log", "--format=%s"], cwd=path, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(log) == 2  # the session's creation, then the whole map: one commit


def test_the_dask_run_writes_the_same_nodes_as_the_local_thread_run(
    rt: Runtime, op_home: Path, workers: Any
) -> None:
    texts = ["a", "boom", "c", "d"]
    with cell(rt) as (local, local_turn):
        local_results = openprogram.map(classify, texts, progress=False)
    with cell(rt) as (remote, remote_turn):
        remote_results = openprogram.map(classify, texts, executor=workers, progress=False)
    assert [str(r) for r in remote_results] == [str(r) for r in local_results]
    assert type(remote_results[1]) is ValueError
    remote_nodes = reopen(op_home, remote.session_id)
    assert map_shape(remote_nodes, remote_turn.id) == map_shape(
        reopen(op_home, local.session_id), local_turn.id
    )
    assert all(n.metadata["worker"].startswith("tcp://127.0.0.1:") for n in remote_nodes[2:])


def test_a_dask_map_spends_no_more_than_its_budget_and_refuses_as_threads_do(
    op_home: Path, workers: Any
) -> None:
    one = map_under_budget(None, None, 1)[1] // 16  # one item: its input, a 600-token reply
    tokens = 3 * one + 30  # three items, then 30 tokens that fit no call
    ends, spent = map_under_budget(tokens, workers, 8)  # 8 items in flight on 2 workers
    assert spent <= tokens
    assert sorted(ends) == ["BudgetExceeded error budget"] * 13 + ["str completed -"] * 3
    assert map_under_budget(10**6, workers, 8)[0] == ["str completed -"] * 16


def test_a_worker_killed_mid_run_leaves_every_item_once_and_its_lost_attempts_interrupted(
    op_home: Path, own_cluster: Any
) -> None:
    workers = own_cluster
    rt = create_runtime(FunctionProvider(slow_reply), backoff=0.0)
    pids = workers.run(os.getpid)
    victim = sorted(pids)[0]

    with cell(rt) as (s, turn):
        run = MapRun(classify, [f"t{i}" for i in range(120)], executor=workers, progress=False)
        when_under_way(run, 20, lambda: os.kill(pids[victim], signal.SIGKILL))
        results = run.run()
    assert results == ["bug"] * 120
    nodes = reopen(op_home, s.session_id)
    calls = items_under(nodes, turn)
    done = [c for c in calls if c.status == "completed"]
    assert [c.metadata["item"] for c in done] == list(range(120))  # each once, in order
    lost = [c for c in calls if c.status == "interrupted"]
    assert lost, "the killed worker was running items"
    assert {c.metadata["worker"] for c in lost} == {victim}
    for attempt in lost:  # recorded once, just before the retry of the same item
        retry = calls[calls.index(attempt) + 1]
        assert retry.metadata["item"] == attempt.metadata["item"]
        assert retry.metadata["attempt"] == attempt.metadata.get("attempt", 1) + 1
    assert Counter(c.metadata["item"] for c in lost).most_common(1)[0][1] == 1
    assert len([n for n in nodes if n.kind == "llm"]) == 120  # no duplicate of a retry
    assert "running" not in {n.status for n in nodes}


def when_under_way(run: MapRun, results: int, then: Callable[[], None]) -> None:
    """Call ``then`` from a thread once ``run`` has ``results`` results."""

    def wait() -> None:
        until(lambda: sum(r is not None for r in run.results) >= results, 600)
        then()

    threading.Thread(target=wait, daemon=True).start()


def test_stop_mid_run_cancels_the_rest_and_records_every_item(op_home: Path, workers: Any) -> None:
    rt = create_runtime(FunctionProvider(slow_reply), backoff=0.0)
    with cell(rt) as (s, turn):
        run = MapRun(
            classify,
            [f"t{i}" for i in range(200)],
            executor=workers,
            max_in_flight=8,
            progress=False,
        )
        when_under_way(run, 10, run.stop)
        results = run.run()
    calls = items_under(reopen(op_home, s.session_id), turn)
    assert [c.metadata["item"] for c in calls] == list(range(200))
    statuses = [c.status for c in calls]
    assert statuses.count("completed") >= 10 and statuses[-1] == "cancelled"
    cancelled = [r for r in results if isinstance(r, CancelledError)]
    assert len(cancelled) == statuses.count("cancelled") > 150
    assert "running" not in {n.status for n in reopen(op_home, s.session_id)}


def test_a_function_that_cannot_be_pickled_is_refused_before_dask_sees_a_task(
    rt: Runtime, op_home: Path, workers: Any
) -> None:
    before = workers.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))
    with cell(rt) as (s, turn), pytest.raises(UserError, match="cannot be sent"):
        openprogram.map(unpicklable(), ["a", "b"], executor=workers.get_executor(), progress=False)
    after = workers.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))
    assert after == before
    assert items_under(reopen(op_home, s.session_id), turn) == []


def test_when_dask_gives_up_on_an_item_its_lost_attempt_is_its_one_node_and_error(
    op_home: Path, own_cluster: Any
) -> None:
    def give_up_at_the_first_death(dask_scheduler: Any) -> None:
        dask_scheduler.allowed_failures = 0

    workers = own_cluster
    rt = create_runtime(FunctionProvider(slow_reply), backoff=0.0)
    pids = workers.run(os.getpid)
    workers.run_on_scheduler(give_up_at_the_first_death)
    with cell(rt) as (s, turn):
        run = MapRun(classify, [f"t{i}" for i in range(40)], executor=workers, progress=False)
        when_under_way(run, 8, lambda: os.kill(pids[sorted(pids)[0]], signal.SIGKILL))
        results = run.run()
    killed = [i for i, r in enumerate(results) if type(r).__name__ == "KilledWorker"]
    assert killed and all(r == "bug" for i, r in enumerate(results) if i not in killed)
    calls = items_under(reopen(op_home, s.session_id), turn)
    done = [c.metadata["item"] for c in calls if c.status == "completed"]
    assert done == [i for i in range(40) if i not in killed]  # each once, in order
    gave_up = [c for c in calls if "gave up" in c.metadata.get("error", "")]
    assert [c.metadata["item"] for c in gave_up] == killed  # its one node: the lost attempt
    assert {c.status for c in gave_up} == {"interrupted"}
    # a result lost with the worker before it was fetched is run again: recorded, retried
    retried = [c for c in calls if c.status == "interrupted" and c not in gave_up]
    assert all("retried" in c.metadata["error"] for c in retried)


def profiling(dask_worker: Any) -> bool:
    return "profile" in dask_worker.periodic_callbacks


def test_the_test_clusters_workers_run_without_dasks_profiler(workers: Any, tmp_path: Path) -> None:
    """Its ``sys._current_frames()`` every 10 ms deadlocks a worker on Python 3.11 now and
    then (CPython gh-106883; see ``tests/dask_cluster.py``): a test would hang on it."""
    assert set(workers.run(profiling).values()) == {False}
    with process_cluster(tmp_path, workers=1) as cluster:
        assert set(cluster.client.run(profiling).values()) == {False}
