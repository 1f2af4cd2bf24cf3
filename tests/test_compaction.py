"""History that compacts (issue 22): when a turn's history would not fit the context budget,
older turns are replaced in the prompt by a summary node whose ``covers`` names them; the
session keeps every node.  A provider's "context too long" compacts once and retries once."""

from __future__ import annotations

from typing import Any

import pytest

from openprogram import create_runtime
from openprogram.agent import dispatcher as D
from openprogram.agent.dispatcher import compaction
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.prompt import sent_messages
from openprogram.agentic_programming.runtime import Runtime
from openprogram.context.nodes import Call
from openprogram.context.policy import ContextPolicy, estimate_tokens
from openprogram.errors import UserError
from openprogram.providers.base import LLMRequest, ProviderError
from openprogram.providers.test import FunctionProvider

SUMMARIZER = "You keep a running summary"
OVERFLOW = "This model's maximum context length is 8192 tokens; reduce the length of the messages"


def system(request: LLMRequest) -> str:
    return str(request.messages[0].get("content", ""))


def agent_requests(requests: list[LLMRequest]) -> list[LLMRequest]:
    return [r for r in requests if system(r) == D.DEFAULT_SYSTEM]


def runtime(fn: Any, policy: ContextPolicy | None = None) -> tuple[Runtime, FunctionProvider]:
    provider = FunctionProvider(fn, keep=None)  # every request: the test reads them all
    rt = create_runtime(provider, backoff=0.0, max_retries=0, context=policy)
    return rt, provider


def model(request: LLMRequest) -> str:
    if system(request).startswith(SUMMARIZER):
        return f"summary #{request.messages[-1]['content'].count('- ')} turns merged"
    if system(request) != D.DEFAULT_SYSTEM:
        return "A long chat"  # the title
    return "reply " + "r" * 120


def summaries(session_id: str) -> list[Call]:
    nodes = default_db().open(session_id).nodes()
    return [n for n in nodes if n.kind == "function" and "covers" in n.metadata]


def test_a_200_turn_session_stays_under_the_budget_and_the_summary_names_what_it_replaced() -> None:
    budget = 1500
    rt, provider = runtime(model, ContextPolicy(tokens=budget))
    sid = None
    results = []
    for i in range(200):
        result = D.process_user_turn(D.TurnRequest(sid, f"message {i} " + "m" * 120, runtime=rt))
        assert result.status == "completed", result.error
        sid = result.session_id
        results.append(result)
    assert sid is not None

    asked = agent_requests(provider.requests)
    assert len(asked) == 200
    for request in asked:  # the history part of every prompt fits the budget
        history = request.messages[1:-1]
        assert estimate_tokens(history) <= budget
        assert "session_title(" not in str(history)  # the title call is an aside
    # once compacted, every prompt begins with the summary, then the newest turns verbatim
    written = summaries(sid)
    assert len(written) >= 5 and all(s.metadata["written_by"] == "model" for s in written)
    last = asked[-1].messages
    assert last[1]["content"].startswith("[Summary of the ")
    assert "turns merged" in last[1]["content"]

    session = default_db().open(sid)
    newest = written[-1]
    kept = [m["content"] for m in last[2:-1] if m["role"] == "user"]
    chain = [c for c in session.chain(results[-1].user_node_id, 300) if c.kind == "turn"]
    assert len(chain) == 200  # nothing deleted: every turn is still on the chain
    shown = {c.id for c in chain if c.input["text"] in kept} | {results[-1].user_node_id}
    replaced = {c.id for c in chain} - shown
    covered = set(newest.metadata["covers"])
    assert replaced <= covered  # every turn not in the prompt is named by the summary
    assert covered - replaced == {s.id for s in written[:-1]}  # plus the summaries it took over
    assert [results[i].compacted for i in range(200) if results[i].compacted] == [
        s.id for s in written
    ]
    # the llm node records the summary among what it was given: the prompt rebuilds
    reply = session.get(results[-1].reply_node_id or "")
    (llm,) = [session.get(i) for i in session.children(reply.id)]
    assert newest.id in llm.metadata["context"]["turns"]
    assert sent_messages(session, llm) == last


def test_no_model_means_a_structural_summary_and_compact_on_demand() -> None:
    def no_summaries(request: LLMRequest) -> str:
        if system(request).startswith(SUMMARIZER):
            raise ProviderError("summaries are down")
        return f"answer to {request.messages[-1]['content']}"

    rt, provider = runtime(no_summaries)
    sid = None
    for i in range(7):
        sid = D.process_user_turn(D.TurnRequest(sid, f"question {i}", runtime=rt)).session_id
    assert sid is not None and summaries(sid) == []  # all of it fits: nothing compacted

    summary_id = compaction.trigger_compaction(sid, runtime=rt)
    assert summary_id is not None
    (summary,) = summaries(sid)
    assert summary.id == summary_id and summary.metadata["written_by"] == "structure"
    assert "- question 0 → answer to question 0" in str(summary.output)
    session = default_db().open(sid)
    turns = [c for c in session.chain(session.head_id, 20) if c.kind == "turn"]  # oldest first
    assert turns[-1].name == "compact" and summary.caller == turns[-1].id
    assert summary.metadata["covers"] == [t.id for t in turns[:3]]  # the newest 4 kept

    D.process_user_turn(D.TurnRequest(sid, "and now?", runtime=rt))
    texts = [m["content"] for m in agent_requests(provider.requests)[-1].messages]
    assert texts[1].startswith("[Summary of the 3 earlier turns")
    assert "question 2" not in "\n".join(texts[2:]) and "question 3" in "\n".join(texts[2:])

    with pytest.raises(UserError, match="has no turns yet"):
        compaction.trigger_compaction("chat_nothing_here")


def test_a_context_overflow_compacts_once_and_retries_once() -> None:
    def small_context(request: LLMRequest) -> str:
        if system(request) != D.DEFAULT_SYSTEM:
            return "summary of the early chat"
        if len(request.messages) > 7:
            raise ProviderError(OVERFLOW)
        return "fits now"

    rt, provider = runtime(small_context)
    sid = None
    for i in range(3):
        sid = D.process_user_turn(D.TurnRequest(sid, f"q{i}", runtime=rt)).session_id
    before = len(agent_requests(provider.requests))
    result = D.process_user_turn(D.TurnRequest(sid, "one more", runtime=rt))

    assert result.status == "completed" and result.text == "fits now"
    assert len(agent_requests(provider.requests)) - before == 2  # the overflow, the retry
    (summary,) = summaries(result.session_id)
    assert result.compacted == summary.id and summary.caller == result.user_node_id
    session = default_db().open(result.session_id)
    attempts = [session.get(i) for i in session.children(result.reply_node_id or "")]
    assert [a.status for a in attempts if a.kind == "llm"] == ["error", "completed"]


def test_a_second_overflow_is_the_turns_error_not_a_loop() -> None:
    def never_fits(request: LLMRequest) -> str:
        if system(request) != D.DEFAULT_SYSTEM:
            return "summary"
        if len(request.messages) > 2:
            raise ProviderError(OVERFLOW)
        return "first"

    rt, provider = runtime(never_fits)
    first = D.process_user_turn(D.TurnRequest(None, "q0", runtime=rt))
    second = D.process_user_turn(D.TurnRequest(first.session_id, "q1", runtime=rt))
    third = D.process_user_turn(D.TurnRequest(first.session_id, "q2", runtime=rt))
    assert first.status == "completed"
    assert second.status == "error" and "maximum context length" in (second.error or "")
    assert third.status == "error"
    # second turn: one try (nothing older than the newest turn to compact: no retry);
    # third turn: try, compaction, one retry — never more
    assert len(agent_requests(provider.requests)) == 1 + 1 + 2
    assert len(summaries(first.session_id)) == 1


def test_deciding_that_no_compaction_is_needed_reads_only_the_turns_a_prompt_would() -> None:
    rt, _ = runtime(lambda r: "ok")
    result = D.process_user_turn(D.TurnRequest(None, "hello", runtime=rt))
    session = default_db().open(result.session_id)
    assert not compaction.needed(session, session.head_id, ContextPolicy(tokens=1000))
    assert compaction.is_context_overflow(ProviderError(OVERFLOW))
    assert not compaction.is_context_overflow(ProviderError("rate limited"))


def test_long_tool_results_age_out_of_the_prompt_and_stay_in_their_node() -> None:
    pages = {"a": "A" * 3000, "b": "B" * 3000, "c": "short"}

    def fetch(name: str) -> str:
        """Fetch a page."""
        return pages[name]

    from openprogram.providers.base import LLMResponse, ToolCall

    order = iter(["a", "b", "c"])

    def reader(request: LLMRequest) -> LLMResponse:
        name = next(order, None)
        if name is None:
            return LLMResponse("read them all")
        return LLMResponse("", tool_calls=[ToolCall(f"c{name}", "fetch", {"name": name})])

    rt, provider = runtime(reader)
    result = D.process_user_turn(
        D.TurnRequest(None, "read a, b, c", runtime=rt, tools={"fetch": fetch})
    )
    assert result.text == "read them all"
    last = "\n".join(str(m["content"]) for m in provider.requests[-1].messages)
    assert "AAAA" not in last and "[3000 chars, seen earlier; kept in node n_" in last
    assert "BBBB" in last  # one model call old: still shown (clipped as before)
    assert "fetch(name='c') -> short" in last
    session = default_db().open(result.session_id)
    (tool_a,) = [n for n in session.nodes() if n.kind == "tool" and n.input == {"name": "a"}]
    assert tool_a.output == "A" * 3000 and tool_a.id in last


def numbers(text: str, pattern: str) -> set[int]:
    import re

    return {int(n) for n in re.findall(pattern, text)}


@pytest.mark.parametrize("window", [1, 2, 3, 4, 5, 6])
def test_with_any_turn_window_the_summary_reaches_the_prompt(window: int) -> None:
    """A window of ``window`` turns (below the 4 kept verbatim after a compaction, too):
    every prompt accounts for every earlier turn, verbatim or in the summary it shows; every
    summary written is in the prompt of the turn that wrote it; the window holds."""

    def merging(request: LLMRequest) -> str:
        if system(request).startswith(SUMMARIZER):  # the turns it was handed, and before
            seen = numbers(request.messages[-1]["content"], r"(?:message |#)(\d+)")
            return "summary of " + " ".join(f"#{n}" for n in sorted(seen))
        if system(request) != D.DEFAULT_SYSTEM:
            return "A chat"  # the title
        return "ok"

    rt, provider = runtime(merging, ContextPolicy(turns=window))
    sid, written = None, []
    for i in range(window + 8):
        result = D.process_user_turn(D.TurnRequest(sid, f"message {i}", runtime=rt))
        assert result.status == "completed", result.error
        sid = result.session_id
        history = agent_requests(provider.requests)[-1].messages[1:-1]
        shown = [m["content"] for m in history if m["role"] == "user"]
        summary = [m for m in shown if m.startswith("[Summary of the ")]
        verbatim = [m for m in shown if not m.startswith("[Summary of the ")]
        assert len(summary) + len(verbatim) <= window  # the window holds
        accounted = numbers(" ".join(summary), r"#(\d+)") | numbers(" ".join(verbatim), r"(\d+)")
        assert accounted == set(range(i)), f"turn {i} lost {set(range(i)) - accounted}"
        if result.compacted is not None:
            written.append(result.compacted)
            (text,) = summary  # the summary this turn wrote is the one it shows
            node = default_db().open(sid).get(result.compacted)
            assert str(node.output) in text
    assert sid is not None and written  # the window filled: compaction wrote summaries
    assert [s.id for s in summaries(sid)] == written  # none written outside a prompt's need
    summarizer = [r for r in provider.requests if system(r).startswith(SUMMARIZER)]
    assert len(summarizer) == len(written)  # one model call per summary, each one used


def test_a_window_of_no_turns_writes_no_summary() -> None:
    rt, provider = runtime(model, ContextPolicy(turns=0))
    sid = None
    for i in range(8):
        sid = D.process_user_turn(D.TurnRequest(sid, f"message {i}", runtime=rt)).session_id
    assert sid is not None and summaries(sid) == []
    assert not [r for r in provider.requests if system(r).startswith(SUMMARIZER)]
    assert compaction.trigger_compaction(sid, runtime=rt) is None  # nothing a prompt shows
