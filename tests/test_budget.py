"""A budget's refusal says why the call was not sent: what the call would need, and what is
spent and left — never "reached: spent 0 tokens" for a call that alone is over the budget."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import CancelledError

import pytest

import openprogram
from openprogram import agentic_function, create_runtime, session_context
from openprogram.agent.session_db import default_db
from openprogram.context.nodes import Call
from openprogram.context.policy import estimate_tokens
from openprogram.providers.base import LLMRequest, LLMResponse, Usage
from openprogram.providers.test import FunctionProvider, TestProvider
from openprogram.usage import Budget, BudgetExceeded, set_price
from openprogram.usage.prices import clear_prices
from openprogram.usage.totals import summarize


@pytest.fixture(autouse=True)
def no_user_prices() -> Iterator[None]:
    clear_prices()
    yield
    clear_prices()


@agentic_function
def ask(question: str, runtime=None) -> str:  # type: ignore[no-untyped-def]
    """Answer briefly."""
    return str(runtime.exec(question))


def refused(session_id: str) -> Call:
    (error,) = [n for n in default_db().open(session_id).nodes() if n.kind == "error"]
    return error


def test_a_call_alone_over_the_budget_says_what_it_needs_not_spent_0() -> None:
    provider = TestProvider(reply="fine")
    rt = create_runtime(provider, budget=Budget(tokens=400, per="run"))
    with session_context(runtime=rt) as s, pytest.raises(BudgetExceeded) as caught:
        ask("a long question " * 200)
    message = str(caught.value)
    needed = refused(s.session_id).input["estimated_input_tokens"]
    assert needed > 400 and provider.requests == []
    assert "spent 0" not in message and "reached" not in message
    assert message.startswith("budget of 400 tokens per run: the next call alone needs")
    assert f"about {needed} input tokens" in message
    assert "more than the whole budget, so it was not sent" in message


def test_a_spent_budget_says_what_is_spent_and_left() -> None:
    with session_context(runtime=create_runtime(TestProvider(reply="fine"))) as s:
        ask("warm up")
    spent = summarize(default_db().open(s.session_id).nodes())["tokens"]
    tight = create_runtime(TestProvider(reply="fine"), budget=Budget(tokens=spent + 20))
    with session_context(s.session_id, runtime=tight), pytest.raises(BudgetExceeded) as caught:
        ask("again")
    assert str(caught.value).startswith(
        f"budget of {spent + 20} tokens per session reached: {spent} tokens spent, "
        "20 tokens left; the next call needs about "
    )


def test_a_dollar_refusal_names_dollars_spent_left_and_needed() -> None:
    set_price("test", 1.0, 1.0)  # $1 per million tokens
    rt = create_runtime(TestProvider(reply="fine"), budget=Budget(usd=0.001))
    with session_context(runtime=rt) as s, pytest.raises(BudgetExceeded) as caught:
        for i in range(200):
            ask(f"question number {i}")
    cost = summarize(default_db().open(s.session_id).nodes())["cost"]
    message = str(caught.value)
    assert message.startswith("budget of $0.001 per session reached: $0.000")
    assert " spent, $0.000" in message and " left; the next call needs about " in message
    needed = refused(s.session_id).input["estimated_input_tokens"]
    assert f"plus a reply of at least 16 (${(needed + 16) / 1e6:.6f}".rstrip("0") in message
    assert f"${cost:.6f}".rstrip("0") + " spent" in message


def _sized_replies(in_flight: list[int], peak: list[int]) -> FunctionProvider:
    """A provider that bills the budget's own input estimate and honours ``max_tokens``
    (a reply of up to 600 tokens), taking a moment so calls overlap."""
    lock = threading.Lock()

    def reply(request: LLMRequest) -> LLMResponse:
        with lock:
            in_flight.append(1)
            peak[0] = max(peak[0], len(in_flight))
        time.sleep(0.2)
        with lock:
            in_flight.pop()
        out = min(request.max_tokens or 600, 600)
        used = Usage(input_tokens=estimate_tokens(request.messages), output_tokens=out)
        return LLMResponse("x", usage=used)

    return FunctionProvider(reply)


def test_calls_in_flight_together_cannot_overspend_the_budget() -> None:
    peak = [0]
    rt = create_runtime(_sized_replies([], peak), budget=Budget(tokens=2000))
    items = [f"item {i}" for i in range(16)]
    with session_context() as s:
        results = openprogram.map(ask, items, max_in_flight=8, runtime=rt, progress=False)
    spent = summarize(default_db().open(s.session_id).nodes())["tokens"]
    assert 0 < spent <= 2000
    assert any(isinstance(r, BudgetExceeded | CancelledError) for r in results)
    peak[0] = 0
    roomy = create_runtime(_sized_replies([], peak), budget=Budget(tokens=10**6))
    with session_context():  # room for all: they still run side by side
        openprogram.map(ask, items[:8], max_in_flight=8, runtime=roomy, progress=False)
    assert peak[0] == 8


def test_the_tools_offered_count_against_the_budget() -> None:
    def lookup(term: str) -> str:
        return "x"

    lookup.__doc__ = "Look a term up. " + "Detailed usage notes. " * 600  # ~13,000 characters
    provider = TestProvider(reply="done")
    rt = create_runtime(provider, budget=Budget(tokens=3000, per="run"))

    @agentic_function
    def with_tool(question: str, runtime=None) -> str:  # type: ignore[no-untyped-def]
        """Answer."""
        return str(runtime.exec(question, tools=[lookup]))

    with session_context(runtime=rt) as s, pytest.raises(BudgetExceeded) as caught:
        with_tool("hi")
    assert provider.requests == [] and "more than the whole budget" in str(caught.value)
    assert refused(s.session_id).input["estimated_input_tokens"] > 13_000 // 3
