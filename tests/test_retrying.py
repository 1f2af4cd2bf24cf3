"""Retries of transient provider errors (``agentic_programming/retrying.py``) and the
server's ``Retry-After`` (``providers/retry_after.py``): through the official SDKs against
the local wire server, the Runtime waits at least what a 429 asked before it asks again,
with jitter, ``max_retries`` times at most, every attempt in the DAG.  No clock is read:
the Runtime is given a ``sleep`` that records what it was asked to wait."""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from helpers import Reply, WireServer, reopen, wire_provider

from openprogram import agentic_function, create_runtime, session_context
from openprogram.agentic_programming.retrying import (
    MAX_BACKOFF_S,
    MAX_RETRY_AFTER_S,
    pause,
    wait_seconds,
    with_retries,
)
from openprogram.agentic_programming.runtime import Runtime
from openprogram.agentic_programming.stopping import using_stop_flag
from openprogram.errors import ProviderError, RunStopped, TransientProviderError
from openprogram.providers.base import LLMRequest
from openprogram.providers.retry_after import retry_after
from openprogram.providers.test import FunctionProvider

SDKS = ["openai", "anthropic"]


class Waits:
    """A ``sleep`` for the Runtime: records each wait asked for and how many requests the
    server had seen then (the order of events), and returns at once."""

    def __init__(self, server: WireServer | None = None) -> None:
        self.server = server
        self.events: list[tuple[str, float]] = []

    def __call__(self, seconds: float) -> None:
        seen = len(self.server.requests) if self.server is not None else 0
        self.events.append((f"wait after request {seen}", seconds))

    @property
    def seconds(self) -> list[float]:
        return [s for _, s in self.events]


@agentic_function
def ask(content: str, runtime: Runtime | None = None) -> Any:
    """Answer plainly."""
    assert runtime is not None
    return runtime.exec(content)


def llm_nodes(home: Path, session_id: str) -> list[Any]:
    return [n for n in reopen(home, session_id) if n.kind == "llm"]


def sdk_runtime(kind: str, wire: WireServer, waits: Waits, **options: Any) -> Runtime:
    model = "gpt-wire" if kind == "openai" else "claude-wire"
    provider = wire_provider(kind, wire, model=model, api_key="sk-retry-test", timeout=5.0)
    return create_runtime(provider, sleep=waits, **options)


# -- through the SDKs, against the wire server ----------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", SDKS)
def test_a_429_with_retry_after_is_asked_again_only_after_that_wait(
    kind: str, wire: WireServer, op_home: Path
) -> None:
    wire.reply(
        Reply(status=429, error_message="slow down", headers={"Retry-After": "2"}),
        Reply(text="answered"),
    )
    waits = Waits(wire)
    with session_context(runtime=sdk_runtime(kind, wire, waits, backoff=0.5)) as handle:
        assert ask("hello") == "answered"
    (event, waited), *more = waits.events
    assert event == "wait after request 1" and more == []  # the wait came between the two
    assert 2.0 <= waited <= 2.0 + 0.5 / 2  # what the server asked, plus jitter
    assert len(wire.requests) == 2  # the SDK did not retry on its own as well
    (node,) = llm_nodes(op_home, handle.session_id)
    assert node.status == "completed" and node.output == "answered"
    (failed,) = node.metadata["retries"]  # the DAG says why the call took longer
    assert "429" in failed and "retry after 2 s" in failed
    assert node.metadata["retry_waits_s"] == [round(waited, 3)]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", SDKS)
def test_a_wait_longer_than_a_retry_should_take_is_not_made(
    kind: str, wire: WireServer, op_home: Path
) -> None:
    asked = int(MAX_RETRY_AFTER_S * 2)
    wire.reply(Reply(status=429, headers={"Retry-After": str(asked)}), Reply(text="too late"))
    waits = Waits(wire)
    with (
        session_context(runtime=sdk_runtime(kind, wire, waits)) as handle,
        pytest.raises(TransientProviderError, match=f"retry after {asked} s"),
    ):
        ask("hello")
    assert waits.events == [] and len(wire.requests) == 1
    (node,) = llm_nodes(op_home, handle.session_id)
    assert node.status == "error" and "retries" not in node.metadata


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", SDKS)
def test_server_errors_without_retry_after_back_off_with_jitter_up_to_max_retries(
    kind: str, wire: WireServer, op_home: Path
) -> None:
    wire.reply(*[Reply(status=503, error_message="busy") for _ in range(4)])
    waits = Waits(wire)
    rt = sdk_runtime(kind, wire, waits, max_retries=3, backoff=1.0)
    with session_context(runtime=rt) as handle, pytest.raises(TransientProviderError, match="503"):
        ask("hello")
    assert [e for e, _ in waits.events] == [f"wait after request {n}" for n in (1, 2, 3)]
    for attempt, waited in enumerate(waits.seconds):  # 1, 2, 4 s, each with its upper half drawn
        assert 2**attempt / 2 <= waited <= 2**attempt
    assert len(wire.requests) == 4  # max_retries is the one count
    (node,) = llm_nodes(op_home, handle.session_id)
    assert node.status == "error" and len(node.metadata["retries"]) == 3


# -- offline -------------------------------------------------------------------------------------


def scripted(*replies: str | BaseException) -> FunctionProvider:
    queue = list(replies)

    def answer(_request: LLMRequest) -> str:
        item = queue.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    return FunctionProvider(answer)


def test_a_permanent_error_is_not_retried_and_max_retries_zero_retries_nothing(
    op_home: Path,
) -> None:
    waits = Waits()
    provider = scripted(ProviderError("bad request"), TransientProviderError("HTTP 503"), "ok")
    rt = create_runtime(provider, sleep=waits, max_retries=0)
    with session_context(runtime=rt):
        with pytest.raises(ProviderError, match="bad request"):
            ask("one")
        with pytest.raises(TransientProviderError, match="503"):
            ask("two")
        assert ask("three") == "ok"
    assert waits.events == [] and len(provider.requests) == 3


def test_jitter_spreads_the_waits_and_a_retry_after_is_a_floor() -> None:
    busy = TransientProviderError("HTTP 503")
    assert wait_seconds(busy, 1, 1.0, rand=lambda: 0.0) == 0.5
    assert wait_seconds(busy, 1, 1.0, rand=lambda: 1.0) == 1.0
    assert wait_seconds(busy, 3, 1.0, rand=lambda: 0.5) == 3.0  # 4 s: half fixed, a quarter drawn
    assert wait_seconds(busy, 30, 1.0, rand=lambda: 1.0) == MAX_BACKOFF_S  # capped
    limited = TransientProviderError("HTTP 429")
    limited.retry_after = 7.0
    assert wait_seconds(limited, 1, 1.0, rand=lambda: 0.0) == 7.0
    assert 7.0 < wait_seconds(limited, 1, 1.0, rand=lambda: 0.9) <= 7.5


def test_the_waits_differ_from_one_client_to_the_next() -> None:
    draws = iter([0.1, 0.9])
    seen: list[float] = []

    def fail_twice() -> str:
        if len(seen) < 2:
            raise TransientProviderError("HTTP 503")
        return "done"

    def told(_error: BaseException, wait: float) -> None:
        seen.append(wait)

    result = with_retries(
        fail_twice, 2, 1.0, on_retry=told, sleep=lambda _s: None, rand=lambda: next(draws)
    )
    assert result == "done" and seen == [0.5 + 0.05, 1.0 + 0.9]


def test_a_stopped_run_does_not_wait_for_its_retry() -> None:
    flag = threading.Event()
    flag.set()
    with using_stop_flag(flag), pytest.raises(RunStopped):
        pause(3600.0)
    pause(0.0)  # outside a stopped run a wait of nothing returns


# -- Retry-After, as the server writes it ----------------------------------------------------------


def test_retry_after_in_seconds_milliseconds_or_an_http_date() -> None:
    assert retry_after({"Retry-After": "3"}) == 3.0
    assert retry_after({"retry-after": " 1.5 "}) == 1.5
    assert retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25  # OpenAI's first
    now = datetime(2026, 12, 6, 4, 0, 0, tzinfo=timezone.utc)
    later = format_datetime(datetime(2026, 12, 6, 4, 0, 42, tzinfo=timezone.utc), usegmt=True)
    assert retry_after({"Retry-After": later}, now=now.timestamp()) == 42.0
    earlier = format_datetime(datetime(2026, 12, 6, 3, 0, 0, tzinfo=timezone.utc), usegmt=True)
    assert retry_after({"Retry-After": earlier}, now=now.timestamp()) == 0.0
    for said in ({}, {"Retry-After": "soon"}, {"Retry-After": "-5"}, {"Retry-After": "inf"}):
        assert retry_after(said) is None
    assert retry_after(None) is None
