"""A map on a Dask cluster that lost every worker ends in one line instead of waiting forever
(``openprogram/scale/workers.py``): a real scheduler and real worker processes (no nanny to
bring them back) killed mid-run, the time moved on a virtual clock — what came back stays
recorded, every other item is recorded interrupted or cancelled."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from concurrent.futures import CancelledError
from pathlib import Path

import pytest
from dask_cluster import process_cluster
from helpers import reopen
from test_evals import CASES, exact, make_triage
from test_scale import cell, classify, items_under
from test_scale_dask import slow_reply, when_under_way
from waiting import until

import openprogram
from openprogram import create_runtime
from openprogram.errors import ExecutorLost, UserError
from openprogram.providers.test import FunctionProvider
from openprogram.scale import MapRun, workers
from openprogram.scale.workers import DEFAULT_NO_WORKER_S, Workers, no_worker_timeout
from openprogram.settings import Settings, using


class Clock:
    """Moves when the test moves it, and by ``step`` at each reading."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.step = 0.0

    def __call__(self) -> float:
        now, self.now = self.now, self.now + self.step
        return now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    virtual = Clock()
    monkeypatch.setattr(workers, "clock", virtual)
    yield virtual


def test_the_cluster_is_given_up_on_only_after_the_setting_s_time_without_a_worker(
    clock: Clock,
) -> None:
    seen = Workers("tcp://10.0.0.1:8786", ["tcp://a", "tcp://b"])
    seen.removed("tcp://a", 0)
    clock.now += 10_000
    assert seen.gone_for(60) is None  # one worker left: the map waits for it
    seen.removed("tcp://b", 3)
    clock.now += 59
    assert seen.gone_for(60) is None
    clock.now += 1
    waited, why = seen.gone_for(60) or (0.0, "")
    assert waited == 60
    assert why == (
        "the Dask cluster at tcp://10.0.0.1:8786 has had no worker for 60 s "
        "(the last one, tcp://b, left holding 3 items of this map)"
    )
    seen.added("tcp://c")  # a worker came back (an adaptive cluster scaled up)
    clock.now += 1_000
    assert seen.gone_for(60) is None
    assert seen.gone_for(None) is None


def test_a_cluster_with_no_worker_at_the_start_counts_from_the_start(clock: Clock) -> None:
    seen = Workers("tcp://s:1", [])
    clock.now += 600
    gone = seen.gone_for(DEFAULT_NO_WORKER_S)
    assert gone is not None and "for 10 min (it had none when the map started)" in gone[1]


def test_the_setting_is_seconds_zero_waits_forever_and_a_typo_is_one_line() -> None:
    assert no_worker_timeout() == DEFAULT_NO_WORKER_S
    with using(no_worker_timeout="600"):
        assert no_worker_timeout() == 600
    with using(no_worker_timeout="0"):
        assert no_worker_timeout() is None
    chosen = Settings(home=Path("/data/op"), no_worker_timeout="30")  # a child is told
    assert Settings.from_environ(chosen.environ({})) == chosen
    for wrong in ("soon", "-5", "inf", "nan"):
        with using(no_worker_timeout=wrong), pytest.raises(UserError) as info:
            no_worker_timeout()
        assert str(info.value) == (
            "OPENPROGRAM_NO_WORKER_TIMEOUT must be a number of seconds (0: wait forever), "
            f"not {wrong!r}"
        )


def kill(proc_ids: list[int]) -> None:
    for pid in proc_ids:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(600)
def test_a_map_on_a_cluster_that_lost_every_worker_fails_in_one_line_keeping_what_finished(
    op_home: Path, tmp_path: Path, clock: Clock
) -> None:
    rt = create_runtime(FunctionProvider(slow_reply), backoff=0.0)
    with process_cluster(tmp_path) as cluster, cell(rt) as (s, turn):
        address = cluster.client.scheduler.address
        run = MapRun(
            classify, [f"t{i}" for i in range(60)], executor=cluster.client, progress=False
        )

        def kill_every_worker() -> None:
            kill([p.pid for p in cluster.workers])
            until(lambda: run.submitter.workers.none_left, 300)  # type: ignore[union-attr]
            clock.now += DEFAULT_NO_WORKER_S

        when_under_way(run, 10, kill_every_worker)
        with pytest.raises(ExecutorLost) as info:
            run.run()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        f"openprogram.map classify: the Dask cluster at {address} has had no worker for 120 s"
    )
    assert message.endswith(
        "did not — start workers and run it again, or set OPENPROGRAM_NO_WORKER_TIMEOUT "
        "(seconds, 0: wait forever)"
    )
    results = info.value.results
    came_back = [i for i, r in enumerate(results) if r == "bug"]
    assert len(came_back) >= 10 and f" {len(came_back)} of 60 items came back" in message
    assert info.value.executor == address and info.value.waited == DEFAULT_NO_WORKER_S
    calls = items_under(reopen(op_home, s.session_id), turn)  # persisted, in item order
    assert sorted({c.metadata["item"] for c in calls}) == list(range(60))
    done = [c.metadata["item"] for c in calls if c.status == "completed"]
    assert done == came_back
    ended = {c.metadata["item"]: c for c in calls if c.metadata["item"] not in came_back}
    assert {c.status for c in ended.values()} <= {"interrupted", "cancelled"}
    for index, node in ended.items():  # each says why, in one line
        if node.status == "cancelled":
            assert isinstance(results[index], CancelledError)
            assert node.metadata["error"].startswith("CancelledError: not sent: the Dask")
        else:
            assert results[index] is info.value
            assert "has had no worker for 120 s" in node.metadata["error"]
    assert "running" not in {n.status for n in reopen(op_home, s.session_id)}


@pytest.mark.timeout(600)
def test_an_evaluation_on_a_cluster_that_lost_every_worker_records_why_it_ended(
    op_home: Path, tmp_path: Path, clock: Clock
) -> None:
    rt = create_runtime(FunctionProvider(slow_reply), backoff=0.0)
    with process_cluster(tmp_path, workers=1) as cluster, cell(rt) as (s, _):
        kill([cluster.workers[0].pid])
        assert until(lambda: not cluster.client.scheduler_info()["workers"], 300)
        clock.step = DEFAULT_NO_WORKER_S  # none from the map's start, then 120 s at a look
        with pytest.raises(ExecutorLost, match="it had none when the map started"):
            openprogram.evaluate(
                make_triage("Label the ticket."),
                CASES,
                scorers=[exact],
                executor=cluster.client,
                progress=False,
            )
    nodes = reopen(op_home, s.session_id)
    evaluation = next(n for n in nodes if n.name.startswith("evaluate "))
    assert evaluation.status == "error"
    assert "ExecutorLost" in evaluation.metadata["error"]
    assert "has had no worker for 120 s" in evaluation.metadata["error"]
