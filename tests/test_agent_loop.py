"""``agent_loop`` (``agent/agent_loop.py``): a chat reply asks the model until it answers
without calling a tool; the tools it calls run and what they return is shown to it; the
result says how many calls and which tools it took, and every step is an event."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from openprogram import create_runtime, session_context
from openprogram.agent.agent_loop import agent_loop
from openprogram.providers.base import LLMRequest, LLMResponse, ToolCall
from openprogram.providers.test import FunctionProvider
from openprogram.store.session.store import SessionStore


def lookup(ticket: int) -> str:
    """The title of a ticket."""
    return {7: "crash on save"}.get(ticket, "unknown")


def model(request: LLMRequest) -> LLMResponse:
    shown = [m["content"] for m in request.messages if "Earlier step: lookup(" in m["content"]]
    if not shown:
        return LLMResponse("", tool_calls=[ToolCall("c1", "lookup", {"ticket": "7"})])
    return LLMResponse(f"ticket 7 is: {shown[-1].rsplit('-> ', 1)[1]}")


def test_the_loop_runs_the_tools_the_model_calls_until_it_answers(tmp_path: Path) -> None:
    provider = FunctionProvider(model)
    runtime = create_runtime(provider, backoff=0.0)
    events: list[dict[str, Any]] = []
    store = SessionStore(tmp_path / "home")
    try:
        with session_context("nb_loop", db=store, runtime=runtime):
            result = agent_loop(
                "What is ticket 7?",
                runtime=runtime,
                tools={"lookup": lookup},
                on_event=events.append,
            )
        tools = [n for n in store.open("nb_loop").nodes() if n.kind == "tool"]
    finally:
        store.close()
    assert result.text == "ticket 7 is: crash on save"
    assert (result.iterations, result.tool_calls, result.tool_names) == (2, 1, ("lookup",))
    assert [(t.name, t.input, t.output) for t in tools] == [
        ("lookup", {"ticket": "7"}, "crash on save")  # as the model wrote it, coerced for the call
    ]
    assert events[-1] == {"type": "text", "text": result.text}
    assert {"tool_call", "tool_result"} <= {e["type"] for e in events}


def test_without_tools_it_is_one_call(tmp_path: Path) -> None:
    provider = FunctionProvider(lambda request: LLMResponse("hello"))
    runtime = create_runtime(provider, backoff=0.0)
    store = SessionStore(tmp_path / "home")
    try:
        with session_context("nb_plain_loop", db=store, runtime=runtime):
            result = agent_loop("hi", runtime=runtime)
    finally:
        store.close()
    assert (result.text, result.iterations, result.tool_calls) == ("hello", 1, 0)
    assert provider.requests[0].tools is None
