"""A Runtime's request rate (``openprogram.agentic_programming.ratelimit``): requests of
every thread of a process, and of a map's pool processes, start an interval apart; a rate
that is not a number is one clear error."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import reopen
from test_map import cell

import openprogram
from openprogram import agentic_function, create_runtime
from openprogram.agentic_programming.runtime import Runtime
from openprogram.errors import UserError
from openprogram.providers.base import LLMRequest
from openprogram.providers.test import FunctionProvider


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    with ProcessPoolExecutor(2) as executor:
        yield executor


def stamp_reply(request: LLMRequest) -> str:
    """When the request reached the provider (the monotonic clock, one for every process of
    the machine: no wall-clock step can move it), and the process it reached."""
    return f"{time.monotonic()!r} {os.getpid()}"


@agentic_function
def stamp(text: str, runtime: Runtime | None = None) -> str:
    """Say when."""
    assert runtime is not None
    return str(runtime.exec(text))


def sends_by_process(results: list[Any]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in results:
        when, pid = str(r).split()
        out.setdefault(pid, []).append(float(when))
    return {pid: sorted(times) for pid, times in out.items()}


def test_a_request_rate_paces_every_thread_of_the_process(op_home: Path) -> None:
    rt = create_runtime(FunctionProvider(stamp_reply), requests_per_minute=600)  # 0.1 s apart
    started = time.monotonic()
    with cell(rt) as (s, _turn):
        results = openprogram.map(stamp, list("abcde"), max_in_flight=5, progress=False)
    (sends,) = sends_by_process(results).values()
    # the k-th request leaves no sooner than k intervals after the map started (lower bounds
    # only: a loaded machine makes them later, never earlier)
    assert all(sent - started >= k * 0.1 - 0.005 for k, sent in enumerate(sends))
    llms = [n for n in reopen(op_home, s.session_id) if n.kind == "llm"]
    assert len([n for n in llms if n.metadata.get("rate_wait_ms", 0) > 0]) >= 4  # shown why


def test_a_map_gives_each_pool_process_its_share_of_the_rate(
    op_home: Path, pool: ProcessPoolExecutor
) -> None:
    rt = create_runtime(FunctionProvider(stamp_reply), requests_per_minute=240)  # 2 processes
    started = time.monotonic()
    with cell(rt):
        results = openprogram.map(stamp, list("abcdef"), executor=pool, progress=False)
    for sends in sends_by_process(results).values():  # each process: 120/min, 0.5 s apart
        assert all(sent - started >= k * 0.5 - 0.005 for k, sent in enumerate(sends))
    assert len(results) == 6


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
