"""Tokens and cost: priced from the genai-prices table unless the user set a price, summed
from the recorded nodes, and a budget that stops a call before it is sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from genai_prices import Usage, calc_price

from openprogram import agentic_function, create_runtime, session_context
from openprogram.agent.session_db import default_db
from openprogram.cli import main
from openprogram.context.nodes import Call
from openprogram.errors import UserError
from openprogram.programs.research import run_research
from openprogram.providers.base import LLMRequest, LLMResponse
from openprogram.providers.base import Usage as CallUsage
from openprogram.providers.test import FunctionProvider, TestProvider
from openprogram.usage import Budget, BudgetExceeded, set_price, usage_table
from openprogram.usage.prices import clear_prices
from openprogram.usage.totals import summarize
from openprogram_magics import commands


@pytest.fixture(autouse=True)
def no_user_prices() -> Iterator[None]:
    clear_prices()
    yield
    clear_prices()


def nodes_of(session_id: str) -> list[Call]:
    return default_db().open(session_id).nodes()


def replying(model: str, input_tokens: int = 1000, output_tokens: int = 200) -> FunctionProvider:
    def reply(request: LLMRequest) -> LLMResponse:
        return LLMResponse("ok", usage=CallUsage(input_tokens, output_tokens), model=model)

    return FunctionProvider(reply, model=model)


@agentic_function
def ask(question: str, runtime=None) -> str:  # type: ignore[no-untyped-def]
    """Answer briefly."""
    return str(runtime.exec(question))


def test_costs_come_from_the_package_unless_the_user_set_a_price(op_home: Path) -> None:
    rt = create_runtime(replying("gpt-4o-mini"))
    with session_context(runtime=rt) as s:
        ask("a")
        set_price("gpt-4o-mini", 10.0, 20.0)  # e.g. a self-hosted copy, priced by its owner
        ask("b")
    first, second = [n for n in nodes_of(s.session_id) if n.kind == "llm"]
    table = calc_price(Usage(input_tokens=1000, output_tokens=200), model_ref="gpt-4o-mini")
    assert first.metadata["cost"] == pytest.approx(float(table.total_price))
    assert second.metadata["cost"] == pytest.approx((1000 * 10 + 200 * 20) / 1e6)


def test_prices_json_in_the_home_prices_a_self_hosted_model(op_home: Path) -> None:
    op_home.mkdir(parents=True, exist_ok=True)
    (op_home / "prices.json").write_text(json.dumps({"llama-local": {"input": 1, "output": 3}}))
    with session_context(runtime=create_runtime(replying("llama-local"))) as s:
        ask("a")
    (llm,) = [n for n in nodes_of(s.session_id) if n.kind == "llm"]
    assert llm.metadata["cost"] == pytest.approx((1000 * 1 + 200 * 3) / 1e6)


def test_usage_totals_equal_the_sum_of_the_recorded_nodes(tmp_path: Path, op_home: Path) -> None:
    set_price("test", 2.0, 8.0)
    result = run_research("a task", work_dir=tmp_path, runtime=create_runtime(TestProvider()))
    nodes = nodes_of(result.session_id)
    llms = [n for n in nodes if n.kind == "llm"]
    total = summarize(nodes)
    assert total["calls"] == len(llms) == 10
    assert total["input_tokens"] == sum(n.metadata["usage"]["input_tokens"] for n in llms)
    assert total["output_tokens"] == sum(n.metadata["usage"]["output_tokens"] for n in llms)
    assert total["cost"] == pytest.approx(sum(n.metadata["cost"] for n in llms))
    table = usage_table(nodes)
    write = [ln for ln in table.splitlines() if ln.strip().startswith("write_section")]
    assert len(write) == 1 and write[0].split()[1] == "5"  # five calls, one row
    assert table.splitlines()[-1].split()[1:4] == [
        "10",
        str(total["input_tokens"]),
        str(total["output_tokens"]),
    ]


def test_a_token_budget_stops_the_call_that_would_exceed_it_before_sending(
    op_home: Path,
) -> None:
    provider = TestProvider(reply="fine")
    rt = create_runtime(provider, budget=Budget(tokens=120))
    with session_context(runtime=rt) as s, pytest.raises(BudgetExceeded, match="not sent"):
        for i in range(10):
            ask(f"question {i}")
    nodes = nodes_of(s.session_id)
    llms = [n for n in nodes if n.kind == "llm"]
    (error,) = [n for n in nodes if n.kind == "error"]
    assert len(provider.requests) == len(llms) >= 1  # the refused call never reached it
    assert error.name == "budget" and error.status == "error"
    assert "budget of 120 tokens per session reached" in error.metadata["error"]
    assert summarize(nodes)["tokens"] <= 120
    assert all(r.max_tokens is not None and r.max_tokens < 120 for r in provider.requests)


def test_a_session_budget_counts_earlier_turns_and_a_run_budget_does_not(op_home: Path) -> None:
    with session_context(runtime=create_runtime(TestProvider(reply="fine"))) as s:
        ask("warm up")
    spent = summarize(nodes_of(s.session_id))["tokens"]
    tight = create_runtime(TestProvider(reply="fine"), budget=Budget(tokens=spent + 20))
    with session_context(s.session_id, runtime=tight), pytest.raises(BudgetExceeded):
        ask("again")
    run_budget = Budget(tokens=spent + 200, per="run")
    per_run = create_runtime(TestProvider(reply="fine"), budget=run_budget)
    for _ in range(2):  # each turn has its own spend
        with session_context(s.session_id, runtime=per_run):
            assert ask("again") == "fine"


def test_a_dollar_budget_needs_a_price_and_stops_before_it_is_spent(op_home: Path) -> None:
    provider = TestProvider(reply="fine")
    rt = create_runtime(provider, budget=Budget(usd=0.001))
    with session_context(runtime=rt), pytest.raises(BudgetExceeded, match="needs a price"):
        ask("a")
    assert provider.requests == []
    set_price("test", 1.0, 1.0)  # $1 per million tokens: $0.001 is ~1,000 tokens
    with session_context(runtime=rt) as s, pytest.raises(BudgetExceeded, match="reached"):
        for i in range(200):
            ask(f"question number {i}")
    assert summarize(nodes_of(s.session_id))["cost"] <= 0.001


def test_the_usage_command_and_the_cli_print_the_table(
    op_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_commands_plain import Host

    set_price("test", 1.0, 1.0)
    with session_context(runtime=create_runtime(TestProvider())) as s:
        ask("a")
    capsys.readouterr()
    total = commands.run(Host(), f"usage {s.session_id}")
    out = capsys.readouterr().out
    assert total["calls"] == 1 and "  ask " in out and "$0.0000" in out
    assert main(["sessions", "usage", s.session_id, "--calls"]) == 0
    assert "by call" in capsys.readouterr().out


def test_the_cli_budget_flag_stops_the_research_run_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["research", "t", "--work-dir", str(tmp_path), "--provider", "test"]
    assert main([*args, "--budget-tokens", "600"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("openprogram: budget of 600 tokens per session reached")
        and err.count("\n") == 1
    )
    assert (tmp_path / "survey.json").exists() and not (tmp_path / "review.json").exists()


@pytest.mark.parametrize("usd", ["nan", "inf", "1e400", "-1"])
def test_a_dollar_budget_that_is_no_positive_number_is_one_line(
    usd: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UserError, match="a budget must be a positive finite number"):
        Budget(usd=float(usd))
    args = ["research", "t", "--work-dir", str(tmp_path), "--provider", "test"]
    assert main([*args, "--budget-usd", usd]) == 2
    err = capsys.readouterr().err
    assert err == "openprogram: a budget must be a positive finite number\n"


def test_config_sets_a_notebook_budget(tmp_path: Path, op_home: Path) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    from tests.test_magics import AGENTS, make_shell

    sh = make_shell(tmp_path / "ipython")
    try:
        sh.run(AGENTS)
        sh.run("%config OpenProgramMagics.budget_tokens = 30")
        sh.run('%%openprogram\ntriage("the app crashes")', error=BudgetExceeded)
        sh.run("%config OpenProgramMagics.budget_tokens = 0")
        sh.run('%%openprogram\ntriage("the app crashes")')
    finally:
        InteractiveShell.clear_instance()
    (sid,) = [p.name for p in (op_home / "sessions").iterdir()]
    kinds = [n.kind for n in nodes_of(sid)]
    assert kinds.count("error") == 1 and kinds.count("llm") == 1


def test_config_paces_a_notebooks_requests(
    tmp_path: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    from openprogram.agentic_programming import ratelimit
    from tests.test_magics import AGENTS, make_shell
    from tests.test_ratelimit import VirtualClock

    virtual = VirtualClock()  # the pacing's clock moves only when it waits: exact spacing
    monkeypatch.setattr(ratelimit, "clock", ratelimit.Clock(virtual.now, virtual.sleep))
    monkeypatch.setattr(ratelimit, "_next_start", {})
    sh = make_shell(tmp_path / "ipython")
    try:
        sh.run(AGENTS)
        sh.run("%config OpenProgramMagics.requests_per_minute = 300")  # 0.2 s apart
        sh.run('%%openprogram\nfor t in ("a", "b", "c"):\n    triage(t)')
    finally:
        InteractiveShell.clear_instance()
    (sid,) = [p.name for p in (op_home / "sessions").iterdir()]
    nodes = nodes_of(sid)
    llms = sorted((n for n in nodes if n.kind == "llm"), key=lambda n: n.seq)
    # the first goes at once, each next one an interval (0.2 s) later, and the DAG says why
    assert [n.metadata.get("rate_wait_ms") for n in llms] == [None, 200.0, 200.0]
