"""``openprogram.evaluate``: cases through ``openprogram.map``, scores, the nodes of the turn,
the table, the comparison with the earlier evaluation, and a re-run after a docstring edit
that sends only the calls whose prompts changed (counted in the provider's call log)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import reopen
from test_scale import cell

import openprogram
from openprogram import agentic_function, create_runtime
from openprogram.agentic_programming.runtime import Runtime
from openprogram.context.nodes import Call
from openprogram.errors import UserError
from openprogram.providers.base import LLMRequest
from openprogram.providers.test import FunctionProvider, TestProvider
from openprogram.scale.evals.cases import cases_of, score_values
from openprogram.usage.prices import clear_prices, set_price

CASES = [
    {"id": "crash", "input": "the app crashes on save", "expected": "bug"},
    {"id": "dark", "input": "add a dark mode", "expected": "feature"},
    {"id": "slow", "input": "search is slow", "expected": "bug"},
    {"id": "export", "input": "export to csv please", "expected": "feature"},
    {"id": "typo", "input": "typo on the login page", "expected": "bug"},
]


def model(request: LLMRequest) -> str:
    """A stand-in model: the judge says 1 for "bug"; a classifier told to be careful says
    bug for anything slow, otherwise bug only for crashes and typos."""
    text = "\n".join(str(m.get("content", "")) for m in request.messages)
    if "Rate the label" in text:
        return "1" if text.rstrip().endswith("bug") else "0"
    last = str(request.messages[-1].get("content", ""))
    if "slow" in last:
        return "bug" if "careful" in text else "feature"
    return "bug" if ("crash" in last or "typo" in last) else "feature"


def make_triage(other_doc: str) -> Callable[..., Any]:
    """``triage``: crashes go to ``label_crash``, the rest to ``label_other`` (whose docstring
    the test edits: only the cases that reach it get another prompt)."""

    def label_other(text: str, runtime: Runtime | None = None) -> str:
        assert runtime is not None
        return str(runtime.exec(text, choices=["bug", "feature"]))

    label_other.__doc__ = other_doc
    other = agentic_function(label_other)

    @agentic_function
    def label_crash(text: str, runtime: Runtime | None = None) -> str:
        """Label the crash report as bug or feature."""
        assert runtime is not None
        return str(runtime.exec(text, choices=["bug", "feature"]))

    @agentic_function
    def triage(text: str) -> str:
        """Route the ticket to the labeller that fits."""
        return str(label_crash(text) if "crash" in text else other(text))

    return triage  # type: ignore[no-any-return]


@agentic_function
def judge(case: dict[str, Any], output: str, runtime: Runtime | None = None) -> str:
    """Rate the label: answer 1 when it is bug, 0 otherwise. Answer with the digit only."""
    assert runtime is not None
    return str(runtime.exec(f"Rate the label: {output}", choices=["0", "1"]))


def exact(case: dict[str, Any], output: str) -> bool:
    return output == case["expected"]


@pytest.fixture
def provider() -> FunctionProvider:
    return FunctionProvider(model, keep=None)


@pytest.fixture
def frt(provider: FunctionProvider) -> Runtime:
    return create_runtime(provider, backoff=0.0)


def kids(nodes: list[Call], parent: Call) -> list[Call]:
    return sorted((n for n in nodes if n.caller == parent.id), key=lambda n: n.seq)


def test_cases_outputs_and_scores_are_nodes_of_the_turn(
    frt: Runtime, provider: FunctionProvider, op_home: Path
) -> None:
    with cell(frt) as (s, turn):
        result = openprogram.evaluate(
            make_triage("Label the ticket as bug or feature."),
            CASES,
            scorers=[exact, judge],
            progress=False,
        )
    assert [c.output for c in result.cases] == ["bug", "feature", "feature", "feature", "bug"]
    assert result.scores["slow"] == {"exact": 0.0, "judge": 0.0}
    assert result.mean() == {"exact": 0.8, "judge": 0.4}
    assert result.mean("exact") == 0.8
    assert len(provider.requests) == 10  # a label and a judgement per case
    nodes = reopen(op_home, s.session_id)
    (evaluation,) = kids(nodes, turn)
    assert evaluation.name == "evaluate triage" and evaluation.kind == "function"
    assert evaluation.output["mean"] == {"exact": 0.8, "judge": 0.4}
    cases = kids(nodes, evaluation)
    assert [c.name for c in cases] == [f"case {c['id']}" for c in CASES]
    assert [c.metadata["item"] for c in cases] == list(range(5))
    crash = cases[0]
    assert crash.output == {"output": "bug", "scores": {"exact": 1.0, "judge": 1.0}}
    under = kids(nodes, crash)
    assert [(n.kind, n.name) for n in under] == [
        ("function", "triage"),
        ("tool", "exact"),
        ("function", "judge"),
    ]
    assert under[1].output == {"exact": 1.0}
    assert kids(nodes, under[0])[0].name == "label_crash"


def test_a_docstring_edit_resends_only_the_changed_prompts_and_explains_the_moves(
    frt: Runtime, provider: FunctionProvider, op_home: Path
) -> None:
    with cell(frt) as (s, _):
        first = openprogram.evaluate(
            make_triage("Label the ticket as bug or feature."), CASES, scorers=[exact, judge]
        )
    assert first.reused == 0 and first.comparison is None
    sent_before = len(provider.requests)
    edited = make_triage("Label the ticket as bug or feature. Be careful: slowness is a bug.")
    with cell(frt, s.session_id) as (s, _):
        second = openprogram.evaluate(edited, CASES, scorers=[exact, judge], progress=False)
    sent = provider.requests[sent_before:]
    # the four cases routed to label_other get a new prompt; the crash is not sent; of the
    # judgements only the one of the output that changed ("slow") is sent again
    labelled = [
        "add a dark mode",
        "search is slow",
        "export to csv please",
        "typo on the login page",
    ]
    assert sorted(str(r.messages[-1]["content"]) for r in sent) == sorted(
        [*labelled, "Rate the label: bug"]
    )
    assert {c.key: c.reused for c in second.cases} == {
        "crash": 2,
        "dark": 1,
        "slow": 0,
        "export": 1,
        "typo": 1,
    }
    assert second.sent == 5 and second.reused == 5
    comparison = second.comparison
    assert comparison is not None
    assert [c.key for c in comparison.changed] == ["slow"]
    assert comparison.better == comparison.changed and comparison.same == 4
    (change,) = comparison.changed
    assert change.before == {"exact": 0.0, "judge": 0.0}
    assert change.after == {"exact": 1.0, "judge": 1.0}
    assert any("docstring of `label_other` changed" in why for why in change.why)
    text = str(second)
    assert "1 case(s) changed score (1 better, 0 worse), 4 the same" in text
    assert "+Label the ticket as bug or feature. Be careful: slowness is a bug." in text
    assert "-Label the ticket as bug or feature." in text
    html = second._repr_html_()  # the one changed case's diff is shown unfolded
    assert "<details open><summary" in html and "why case slow moved" in html
    assert "Be careful: slowness is a bug." in html
    # the same comparison, asked for by hand
    again = second.compare(first)
    assert [c.key for c in again.changed] == ["slow"]


def test_a_third_run_with_nothing_changed_sends_nothing(
    frt: Runtime, provider: FunctionProvider, op_home: Path
) -> None:
    triage = make_triage("Label the ticket as bug or feature.")
    with cell(frt) as (s, _):
        openprogram.evaluate(triage, CASES, scorers=[exact, judge], progress=False)
    for _ in range(2):  # the second re-run reuses the first re-run's (reused) answers
        sent = len(provider.requests)
        with cell(frt, s.session_id) as (s, _):
            result = openprogram.evaluate(triage, CASES, scorers=[exact, judge], progress=False)
        assert len(provider.requests) == sent
        assert result.reused == 10 and result.comparison is not None
        assert not result.comparison.changed


def test_another_model_or_reuse_off_sends_every_call(
    frt: Runtime, provider: FunctionProvider, op_home: Path
) -> None:
    triage = make_triage("Label the ticket as bug or feature.")
    with cell(frt) as (s, _):
        openprogram.evaluate(triage, CASES, scorers=[exact], progress=False)
    other = create_runtime(FunctionProvider(model, model="other-model", keep=None), backoff=0.0)
    with cell(other, s.session_id) as (s, _):
        result = openprogram.evaluate(triage, CASES, scorers=[exact], progress=False)
    assert result.reused == 0 and len(other.provider.requests) == 5  # type: ignore[union-attr]
    sent = len(provider.requests)
    with cell(frt, s.session_id):
        result = openprogram.evaluate(triage, CASES, scorers=[exact], reuse=False, progress=False)
    assert result.reused == 0 and len(provider.requests) == sent + 5


def test_a_failing_case_and_a_failing_scorer_are_recorded_and_the_rest_scored(
    frt: Runtime, op_home: Path
) -> None:
    @agentic_function
    def shout(text: str) -> str:
        """Shout the text."""
        if text == "boom":
            raise ValueError("cannot shout that")
        return text.upper()

    def picky(case: Any, output: str) -> float:
        if output == "B":
            raise RuntimeError("no opinion on B")
        return 0.5

    def sizes(case: Any, output: str) -> dict[str, Any]:
        return {"long": len(output) > 1, "judged": "yes"}

    with cell(frt):
        result = openprogram.evaluate(
            shout, ["a", "boom", "b"], scorers=[picky, sizes], progress=False
        )
    assert [c.key for c in result.cases] == ["a", "boom", "b"]
    failed = result.cases[1]
    assert result.failed == 1 and failed.error is not None
    assert "cannot shout that" in failed.error and failed.scores == {}
    assert result.cases[0].scores == {"picky": 0.5, "long": 0.0, "judged": 1.0}
    assert result.cases[2].scores == {"long": 0.0, "judged": 1.0}
    assert "no opinion on B" in result.cases[2].score_errors["picky"]
    assert result.mean("picky") == 0.5  # over the cases that have it
    assert "error: ValueError: cannot shout that" in str(result)


def test_the_table_is_html_markdown_and_text_with_the_session_escaped(
    frt: Runtime, op_home: Path
) -> None:
    def echo(text: str) -> str:
        return text

    cases = {"html": "<script>alert(1)</script>", "pipe": "a | b"}
    with cell(frt):
        result = openprogram.evaluate(echo, cases, scorers=[lambda c, o: 1], progress=False)
    html = result._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<table" in html and "mean" in html
    markdown = result._repr_markdown_()
    assert "| case | output | <lambda> | tokens | cost | reused |" in markdown
    assert "a \\| b" in markdown
    assert "evaluate echo: 2 case(s)" in str(result)


def test_cases_need_distinct_keys_and_scores_are_numbers() -> None:
    assert [c.key for c in cases_of({"one": 1, "two": 2})] == ["one", "two"]
    assert [c.input for c in cases_of([{"input": "x", "expected": "y"}])] == ["x"]
    long = cases_of(["word " * 40])[0].key
    assert len(long) <= 60 and long.startswith("word word")
    with pytest.raises(UserError, match="same key 'a'"):
        cases_of(["a", "a"])
    with pytest.raises(UserError, match="no cases"):
        cases_of([])
    assert score_values("j", " 0.75 ") == {"j": 0.75}
    assert score_values("j", "Yes.") == {"j": 1.0}
    assert score_values("j", {"a": True, "b": 2}) == {"a": 1.0, "b": 2.0}
    with pytest.raises(ValueError, match="not a score"):
        score_values("j", "maybe")
    with pytest.raises(ValueError, match="not a score"):
        score_values("j", float("nan"))


def test_the_table_counts_tokens_and_cost_of_the_calls_sent_now(op_home: Path) -> None:
    set_price("priced-test", input=1_000_000.0, output=1_000_000.0)  # $1 a token
    try:
        runtime = create_runtime(TestProvider(model="priced-test"), backoff=0.0)
        triage = make_triage("Label the ticket as bug or feature.")
        with cell(runtime) as (s, _):
            first = openprogram.evaluate(triage, CASES[:2], progress=False)
        with cell(runtime, s.session_id):
            again = openprogram.evaluate(triage, CASES[:2], progress=False)
    finally:
        clear_prices()
    assert first.tokens > 0 and first.cost == float(first.tokens)
    assert all(c.tokens > 0 and c.cost == float(c.tokens) for c in first.cases)
    assert f"${first.cost:.4f}" in str(first)
    assert again.tokens == 0 and again.cost is None  # every answer reused: nothing spent
