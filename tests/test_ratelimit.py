"""A Runtime's request rate (``openprogram.agentic_programming.ratelimit``): requests of
every thread of a process, and of a map's pool processes, start an interval apart; a rate
that is not a number is one clear error."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import reopen
from test_scale import cell

import openprogram
from openprogram import agentic_function, create_runtime
from openprogram.agentic_programming import ratelimit
from openprogram.agentic_programming.runtime import Runtime
from openprogram.errors import UserError
from openprogram.providers.base import LLMRequest
from openprogram.providers.test import FunctionProvider


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    with ProcessPoolExecutor(2) as executor:
        yield executor


class VirtualClock:
    """The pacing's clock for a test: it moves only when the pacing sleeps (by as much), so
    the spacing it keeps is exact and costs no real time.  Starts far past any schedule a
    real clock left (and leaves none: a process forked later would wait for it)."""

    def __init__(self) -> None:
        self.time = 1e9
        self.lock = threading.Lock()

    def now(self) -> float:
        with self.lock:
            return self.time

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.time += seconds


@pytest.fixture
def virtual(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    clock = VirtualClock()
    monkeypatch.setattr(ratelimit, "clock", ratelimit.Clock(clock.now, clock.sleep))
    monkeypatch.setattr(ratelimit, "_next_start", {})  # its schedule goes with it
    return clock


def stamp_reply(request: LLMRequest) -> str:
    """When the request reached the provider (the pacing's clock), and the process it
    reached."""
    return f"{ratelimit.clock.now()!r} {os.getpid()}"


@agentic_function
def stamp(text: str, runtime: Runtime | None = None) -> str:
    """Say when."""
    assert runtime is not None
    return str(runtime.exec(text))


@agentic_function
def share(text: str, runtime: Runtime | None = None) -> str:
    """Say at which rate this process paces, and which process it is."""
    assert runtime is not None
    runtime.exec(text)
    return f"{runtime.requests_per_minute} {os.getpid()}"


def sends_by_process(results: list[Any]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in results:
        when, pid = str(r).split()
        out.setdefault(pid, []).append(float(when))
    return {pid: sorted(times) for pid, times in out.items()}


def test_a_request_rate_paces_every_thread_of_the_process(
    op_home: Path, virtual: VirtualClock
) -> None:
    rt = create_runtime(FunctionProvider(stamp_reply), requests_per_minute=600)  # 0.1 s apart
    started = virtual.now()
    with cell(rt) as (s, _turn):
        results = openprogram.map(stamp, list("abcde"), max_in_flight=5, progress=False)
    (sends,) = sends_by_process(results).values()
    # the k-th request leaves no sooner than k intervals after the map started
    assert all(sent - started >= k * 0.1 - 1e-6 for k, sent in enumerate(sends))
    llms = [n for n in reopen(op_home, s.session_id) if n.kind == "llm"]
    assert len([n for n in llms if n.metadata.get("rate_wait_ms", 0) > 0]) >= 4  # shown why


def test_the_schedule_spaces_requests_an_interval_apart_from_when_each_asked() -> None:
    name = "schedule-test"
    assert ratelimit.reserve(name, 60, now=100.0) == 100.0  # the first: at once
    assert ratelimit.reserve(name, 60, now=100.0) == 101.0  # then one a second
    assert ratelimit.reserve(name, 120, now=100.5) == 102.0  # a new rate: from the next one
    assert ratelimit.reserve(name, 120, now=200.0) == 200.0  # idle since: at once again


def test_a_map_gives_each_pool_process_its_share_of_the_rate(
    op_home: Path, pool: ProcessPoolExecutor
) -> None:
    rt = create_runtime(FunctionProvider(stamp_reply), requests_per_minute=240)
    with cell(rt):
        results = openprogram.map(share, list("abcdef"), executor=pool, progress=False)
    rates = {pid: float(rate) for rate, pid in (str(r).split() for r in results)}
    assert len(results) == 6 and set(rates.values()) == {120.0}  # 2 processes: half each


def test_a_request_rate_that_is_not_a_number_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(UserError, match="requests per minute, not 'fast'"):
        create_runtime("test", requests_per_minute="fast")
    monkeypatch.setenv("OPENPROGRAM_REQUESTS_PER_MINUTE", "-5")
    with pytest.raises(UserError, match="OPENPROGRAM_REQUESTS_PER_MINUTE must be a positive"):
        create_runtime("test")
    monkeypatch.setenv("OPENPROGRAM_REQUESTS_PER_MINUTE", "30")
    assert create_runtime("test").requests_per_minute == 30.0


@pytest.mark.parametrize("tiny", ["1e-300", "1e-9", "0.01"])
def test_a_request_rate_slower_than_one_an_hour_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, tiny: str
) -> None:
    # before: accepted, and the second request waited 60 / 1e-300 s (for ever)
    monkeypatch.setenv("OPENPROGRAM_REQUESTS_PER_MINUTE", tiny)
    with pytest.raises(UserError) as raised:
        create_runtime("test")
    assert str(raised.value) == (
        "OPENPROGRAM_REQUESTS_PER_MINUTE must be at least one request an hour "
        f"(0.01667 per minute), not {tiny!r}"
    )
    with pytest.raises(UserError, match="requests_per_minute must be at least one request an"):
        create_runtime("test", requests_per_minute=float(tiny))
    monkeypatch.setenv("OPENPROGRAM_REQUESTS_PER_MINUTE", str(1 / 60))  # one an hour: the least
    assert create_runtime("test").requests_per_minute == 1 / 60


def test_a_pool_process_may_pace_slower_than_a_user_may(monkeypatch: pytest.MonkeyPatch) -> None:
    from openprogram.scale.run import _runtime_spec
    from openprogram.scale.task import build_runtime

    monkeypatch.setenv("OPENPROGRAM_REQUESTS_PER_MINUTE", "fast")  # a worker's own: not read
    rt = create_runtime(FunctionProvider(stamp_reply), requests_per_minute=1 / 60)
    worker = build_runtime(_runtime_spec(rt, processes=4))  # a quarter of one an hour each
    assert worker.requests_per_minute == 1 / 240
