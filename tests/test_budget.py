"""A budget's refusal says why the call was not sent: what the call would need, and what is
spent and left — never "reached: spent 0 tokens" for a call that alone is over the budget."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from openprogram import agentic_function, create_runtime, session_context
from openprogram.agent.session_db import default_db
from openprogram.context.nodes import Call
from openprogram.providers.test import TestProvider
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
