"""The usage table never shows a dollar figure that is zero only because nothing is priced,
and says that a price set now prices later calls only (recorded calls keep their cost)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from openprogram import agentic_function, create_runtime, session_context
from openprogram.agent.session_db import default_db
from openprogram.cli import main
from openprogram.errors import OpenProgramError
from openprogram.providers.base import LLMRequest, LLMResponse, Usage
from openprogram.providers.test import FunctionProvider
from openprogram.usage import set_price
from openprogram.usage.prices import clear_prices
from openprogram.usage.totals import summarize

MODEL = "my-local-llama"  # no price table knows it: unpriced until the user prices it


@pytest.fixture(autouse=True)
def no_user_prices() -> Iterator[None]:
    clear_prices()
    yield
    clear_prices()


def local_model(request: LLMRequest) -> LLMResponse:
    if "break" in str(request.messages):  # the server dropped this one: no usage recorded
        raise OpenProgramError("the model server closed the connection")
    return LLMResponse("ok", usage=Usage(1000, 200), model=MODEL)


@agentic_function
def ask(question: str, runtime=None) -> str:  # type: ignore[no-untyped-def]
    """Answer briefly."""
    return str(runtime.exec(question))


def usage_lines(session_id: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    capsys.readouterr()
    assert main(["sessions", "usage", session_id]) == 0
    return capsys.readouterr().out.splitlines()


def session_row(lines: list[str]) -> str:
    (row,) = [line for line in lines if line.startswith("session ")]
    return row


def test_nothing_priced_reads_unpriced_not_zero_dollars(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rt = create_runtime(FunctionProvider(local_model, model=MODEL))
    with session_context(runtime=rt) as s:
        ask("a")
        ask("b")
        with pytest.raises(OpenProgramError):
            ask("break")
    lines = usage_lines(s.session_id, capsys)
    row = session_row(lines)
    assert row.split()[1] == "3" and row.endswith("  unpriced") and "$" not in row
    assert not any("$0.0000" in line for line in lines)
    assert "2 unpriced call(s)" in lines[-1] and "prices later calls" in lines[-1]
    total = summarize(default_db().open(s.session_id).nodes())  # %openprogram usage's value
    assert total["cost"] is None and total["unpriced"] == 2


def test_a_price_set_later_prices_later_calls_and_the_table_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rt = create_runtime(FunctionProvider(local_model, model=MODEL))
    with session_context(runtime=rt) as s:
        ask("a")
        set_price(MODEL, 1.0, 5.0)
        ask("b")
    first, second = [n for n in default_db().open(s.session_id).nodes() if n.kind == "llm"]
    assert "cost" not in first.metadata  # recorded unpriced, and stays so
    assert second.metadata["cost"] == pytest.approx((1000 * 1.0 + 200 * 5.0) / 1e6)
    lines = usage_lines(s.session_id, capsys)
    assert session_row(lines).endswith("$0.0020 (+1 unpriced)")
    assert "a recorded call keeps the cost it was recorded with" in lines[-1]
    assert "counts from the next call on" in " ".join((set_price.__doc__ or "").split())
