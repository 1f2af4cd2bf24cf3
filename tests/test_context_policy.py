"""What a call sees of earlier turns: the context policy, set per runtime (a notebook's
``%config``), per function and per call, and what each ``llm`` node records of it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from openprogram import ContextPolicy, agentic_function, create_runtime, session_context
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.prompt import sent_messages
from openprogram.agentic_programming.provider import LLMRequest
from openprogram.agentic_programming.runtime import Runtime
from openprogram.context.nodes import Call, make_call
from openprogram.context.policy import effective, estimate_tokens, select_history
from openprogram.context.render import turn_messages
from openprogram.errors import ProviderError
from openprogram.providers.test import FunctionProvider, TestProvider

DOC = "Summarise the text in one sentence."


@agentic_function
def summarise(text: str, runtime: Runtime | None = None) -> str:
    """Summarise the text in one sentence."""
    assert runtime is not None
    return str(runtime.exec(text))


@agentic_function(context=ContextPolicy(turns=0))
def summarise_alone(text: str, runtime: Runtime | None = None) -> str:
    """Summarise the text in one sentence."""
    assert runtime is not None
    return str(runtime.exec(text))


def chain(statuses: list[str], text: str = "turn") -> tuple[dict[str, Call], list[Call]]:
    """A root and one turn per status, chained; returns (nodes by id, the turns)."""
    root = make_call("root", "root", status="completed")
    nodes, turns, prev = {root.id: root}, [], root
    for i, status in enumerate(statuses):
        prev = make_call(
            "turn", f"cell{i}", input={"text": f"{text} {i}"}, predecessor=prev.id, status=status
        )
        nodes[prev.id] = prev
        turns.append(prev)
    return nodes, turns


def no_kids(_node: Call) -> list[Call]:
    return []


def pick(nodes: dict[str, Call], head: Call, **policy: Any) -> Any:
    return select_history(
        nodes.get, head.id, effective(ContextPolicy(**policy)), lambda n: turn_messages(n, no_kids)
    )


# -- the pure selection ----------------------------------------------------------------------
def test_the_defaults_are_documented_numbers() -> None:
    assert effective() == ContextPolicy(turns=20, tokens=4000, failed=False, overflow="shrink")


def test_narrower_layers_win_field_by_field() -> None:
    merged = effective(ContextPolicy(tokens=10), ContextPolicy(turns=3, tokens=99), None)
    assert merged == ContextPolicy(turns=3, tokens=10, failed=False, overflow="shrink")


@pytest.mark.parametrize("bad", [{"turns": -1}, {"tokens": "many"}, {"failed": "yes"}])
def test_a_bad_policy_is_refused_when_made(bad: dict[str, Any]) -> None:
    with pytest.raises((TypeError, ValueError), match="ContextPolicy"):
        ContextPolicy(**bad)


def test_turns_limit_keeps_the_newest_and_says_there_is_more() -> None:
    nodes, turns = chain(["completed"] * 6)
    seen = pick(nodes, turns[-1], turns=2)
    assert [t.id for t in seen.turns] == [turns[-2].id, turns[-1].id]
    assert seen.earlier and seen.record(effective())["earlier"] is True


def test_failed_turns_are_left_out_unless_asked_for() -> None:
    nodes, turns = chain(["completed", "error", "interrupted", "completed"])
    seen = pick(nodes, turns[-1])
    assert [t.id for t in seen.turns] == [turns[0].id, turns[3].id]
    assert seen.failed == [turns[1].id, turns[2].id]
    assert not seen.earlier
    assert [t.id for t in pick(nodes, turns[-1], failed=True).turns] == [t.id for t in turns]


def test_the_token_budget_cuts_oldest_first() -> None:
    nodes, turns = chain(["completed"] * 10, text="word " * 40)
    one = estimate_tokens(turn_messages(turns[0], no_kids))
    seen = pick(nodes, turns[-1], tokens=3 * one + one // 2)
    assert [t.id for t in seen.turns] == [t.id for t in turns[-3:]]
    assert seen.tokens == 3 * one
    assert seen.over_budget == [turns[-4].id] and seen.earlier


# -- through the runtime ---------------------------------------------------------------------
def llm_nodes(sid: str) -> list[Call]:
    db = default_db()
    db.close()  # what a later process reads
    return [n for n in db.open(sid).nodes() if n.kind == "llm"]


def run_turns(sid: str, runtime: Runtime, texts: list[str], fn: Any = summarise) -> None:
    for text in texts:
        with session_context(sid, runtime=runtime):
            fn(text)


def test_zero_turns_per_runtime_function_or_call_sends_docstring_and_content_only() -> None:
    provider = TestProvider(reply="short")
    narrow = create_runtime(provider)
    narrow.context = ContextPolicy(turns=0)
    run_turns("s_rt", create_runtime(provider), ["alpha", "beta"])
    run_turns("s_rt", narrow, ["gamma"])
    run_turns("s_rt", create_runtime(provider), ["delta"], fn=summarise_alone)
    with session_context("s_rt", runtime=create_runtime(provider)) as handle:
        assert handle.runtime is not None
        handle.runtime.exec("epsilon", context=ContextPolicy(turns=0))
    expected = [
        [{"role": "system", "content": DOC}, {"role": "user", "content": "gamma"}],
        [{"role": "system", "content": DOC}, {"role": "user", "content": "delta"}],
        [{"role": "user", "content": "epsilon"}],
    ]
    assert [r.messages for r in provider.requests[2:]] == expected
    session = default_db().open("s_rt")
    recorded = [sent_messages(session, n) for n in llm_nodes("s_rt")[2:]]
    assert recorded == expected
    assert llm_nodes("s_rt")[1].metadata["context"]["turns"]  # the default saw "alpha"


def test_the_recorded_prompt_rebuilds_exactly_what_was_sent() -> None:
    provider = TestProvider(reply="a reply")
    run_turns("s_same", create_runtime(provider), [f"text {i}" for i in range(5)])
    session = default_db().open("s_same")
    for node, request in zip(llm_nodes("s_same"), provider.requests, strict=True):
        assert sent_messages(session, node) == request.messages
    last = llm_nodes("s_same")[-1]
    assert len(last.metadata["context"]["turns"]) == 4
    # the node keeps its own messages only: no earlier turn's text is stored again
    assert "text 0" not in json.dumps(last.to_dict())


def test_a_token_budget_bounds_the_prompt_across_60_turns_and_the_store_stops_growing() -> None:
    provider = TestProvider(reply="finding " * 30)
    runtime = create_runtime(provider)
    runtime.context = ContextPolicy(tokens=600)
    run_turns("s_budget", runtime, [f"passage {i}: " + "words " * 20 for i in range(60)])
    nodes = llm_nodes("s_budget")
    session = default_db().open("s_budget")
    doc_and_content = estimate_tokens(provider.requests[-1].messages[:1]) + 60
    for node, request in zip(nodes, provider.requests, strict=True):
        history = node.metadata["context"]
        assert history["tokens"] <= 600
        assert estimate_tokens(request.messages) <= 600 + doc_and_content
    assert sent_messages(session, nodes[-1]) == provider.requests[-1].messages
    sizes = [len(json.dumps(n.to_dict())) for n in nodes]
    assert max(sizes[30:]) - min(sizes[30:]) < 200  # no growth with the session


def test_a_failed_turn_is_absent_from_the_next_prompt() -> None:
    provider = TestProvider(reply="fine")
    runtime = create_runtime(provider)
    run_turns("s_fail", runtime, ["the good one"])

    @agentic_function
    def flaky(text: str, runtime: Runtime | None = None) -> None:
        """Summarise the text, then fail."""
        assert runtime is not None
        runtime.exec(text)
        raise RuntimeError("broke after the call")

    with pytest.raises(RuntimeError), session_context("s_fail", runtime=runtime):
        flaky("UNLUCKY TEXT")
    run_turns("s_fail", runtime, ["after"])
    text = json.dumps(provider.requests[-1].messages)
    assert "the good one" in text and "UNLUCKY TEXT" not in text
    context = llm_nodes("s_fail")[-1].metadata["context"]
    assert len(context["left_out"]["failed"]) == 1


# -- a prompt the model's window cannot hold -------------------------------------------------
WINDOW = "the maximum context length is 600 tokens, 830 in the messages"


def small_window(request: LLMRequest) -> str:
    """A model with a 600-token window (as llama.cpp's server answers HTTP 400)."""
    if estimate_tokens(request.messages) > 600:
        raise ProviderError(WINDOW)
    return "fits"


def test_a_cell_whose_prompt_overflows_the_window_is_sent_once_more_with_half_the_history() -> None:
    provider = FunctionProvider(small_window, keep=None)
    runtime = create_runtime(provider, max_retries=0, backoff=0.0)
    texts = [f"passage {i}: " + "words " * 60 for i in range(8)]  # ~100 tokens of history each
    run_turns("s_window", runtime, texts)

    nodes = llm_nodes("s_window")
    failed = [n for n in nodes if n.status == "error"]
    assert failed and all("maximum context length" in n.metadata["error"] for n in failed)
    assert [n.status for n in nodes[-2:]] == ["error", "completed"]  # the last cell retried
    first, retry = (n.metadata["context"] for n in nodes[-2:])
    assert retry["tokens"] <= first["tokens"] // 2 and len(retry["turns"]) < len(first["turns"])
    assert retry["policy"]["overflow"] == "raise"  # a second overflow is the cell's error
    session = default_db().open("s_window")
    assert sent_messages(session, nodes[-1]) == provider.requests[-1].messages
    assert estimate_tokens(provider.requests[-1].messages) <= 600
    assert len(failed) == 3  # cells 6, 7 and 8 overflowed, each retried once


def test_a_second_overflow_or_overflow_raise_is_the_calls_error_not_a_loop() -> None:
    def tiny(request: LLMRequest) -> str:
        if len(request.messages) > 2:  # any history at all overflows
            raise ProviderError(WINDOW)
        return "fits"

    provider = FunctionProvider(tiny, keep=None)
    run_turns("s_tiny", create_runtime(provider, max_retries=0), ["one", "two"])
    for policy, sent in ((None, 2), (ContextPolicy(overflow="raise"), 1)):
        before = len(provider.requests)
        rt = create_runtime(provider, max_retries=0)
        with (
            pytest.raises(ProviderError, match="maximum context length"),
            session_context("s_tiny", runtime=rt),
        ):
            summarise_with("three", policy)
        assert len(provider.requests) - before == sent


def summarise_with(text: str, policy: ContextPolicy | None) -> str:
    @agentic_function(context=policy)
    def summarise(text: str, runtime: Runtime | None = None) -> str:
        """Summarise the text in one sentence."""
        assert runtime is not None
        return str(runtime.exec(text))

    return summarise(text)


def test_when_the_server_says_by_how_much_the_retry_cuts_as_much_history_as_that_needs() -> None:
    def server(request: LLMRequest) -> str:  # 700-token window, 100 of it for the reply
        sent = estimate_tokens(request.messages)
        if sent > 600:
            raise ProviderError(
                "Error code: 400 - This model's maximum context length is 700 tokens. However, "
                f"you requested {sent + 100} tokens ({sent} in the messages, 100 in the "
                "completion). Please reduce the length of the messages or completion."
            )
        return "fits"

    provider = FunctionProvider(server, keep=None)
    runtime = create_runtime(provider, max_retries=0)
    run_turns("s_room", runtime, [f"passage {i}: " + "words " * 60 for i in range(6)])
    long_input = "a long document " * 60  # the call's own ~330 tokens: half is not enough
    with session_context("s_room", runtime=runtime):
        assert summarise(long_input) == "fits"

    first, retry = (n.metadata["context"] for n in llm_nodes("s_room")[-2:])
    assert retry["tokens"] < first["tokens"] // 2  # cut by the figures, not by half
    assert estimate_tokens(provider.requests[-1].messages) <= 600


def test_re_asks_that_overflow_the_window_keep_only_the_newest_reply_and_its_problem() -> None:
    replies = iter(["not json", "still not json", '{"answer": "ok"}'])

    def server(request: LLMRequest) -> str:  # a window of 5 messages, no history here
        if len(request.messages) > 5:
            raise ProviderError("This model's maximum context length is 4096 tokens")
        return next(replies)

    @agentic_function
    def answer(question: str, runtime: Runtime | None = None) -> Any:
        """Answer in JSON."""
        assert runtime is not None
        schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
        return runtime.exec(question, response_format=schema)

    provider = FunctionProvider(server, keep=None)
    with session_context("s_reask", runtime=create_runtime(provider, max_retries=0)):
        assert answer("why?") == {"answer": "ok"}
    sent = [len(r.messages) for r in provider.requests]
    assert sent == [2, 4, 6, 4]  # ask, re-ask, re-ask that overflowed, the same with one pair
    last = provider.requests[-1].messages
    assert last[2]["content"] == "still not json"  # the newest reply and what was wrong
    statuses = [(n.status, n.metadata.get("rejected", False)) for n in llm_nodes("s_reask")]
    assert statuses[2] == ("error", True) and statuses[-1] == ("completed", False)
