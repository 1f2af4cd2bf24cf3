"""Replay matches the whole request (issue 39, item 4): the messages and the settings the
call sends — tools, ``tool_choice``, response format, ``max_tokens``, temperature and the
other sampling settings.  A miss names the nearest recording (turn, cell, call) and the
first field that differs; streamed and non-streamed calls replay alike; a recording made
before the settings were kept still replays (on its prompt); nothing stored holds a key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_secrets import everything_written
from wire_server import Reply, WireServer

from openprogram import agentic_function, create_runtime, session_context
from openprogram.context.nodes import Call
from openprogram.errors import ReplayMiss
from openprogram.providers.openai_provider import OpenAIProvider
from openprogram.providers.replay import ReplayProvider
from openprogram.providers.test import FunctionProvider
from openprogram.store.session.store import default_db
from openprogram.store.vars import get_store

ADD_SPEC = {
    "name": "add",
    "description": "Add two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"}}},
}
SHAPE = {"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]}


@agentic_function
def summarize(text: str, options: dict[str, Any], runtime: Any = None) -> Any:
    """Summarize the text in one line."""
    return runtime.exec(text, **options)


def answer(request: Any) -> str:
    if request.response_format is not None:
        return '{"label": "short"}'
    return "short: " + str(request.messages[-1]["content"])


def record(*calls: tuple[str, dict[str, Any]]) -> str:
    rt = create_runtime(FunctionProvider(answer), backoff=0.0)
    with session_context(runtime=rt) as handle:
        for text, options in calls:
            summarize(text, options)
    return handle.session_id


def replay(session_id: str, text: str, options: dict[str, Any]) -> Any:
    rt = create_runtime(ReplayProvider(session_id), backoff=0.0, max_retries=0)
    with session_context(runtime=rt):
        return summarize(text, options)


def miss(session_id: str, text: str, options: dict[str, Any]) -> str:
    with pytest.raises(ReplayMiss) as caught:
        replay(session_id, text, options)
    return str(caught.value)


def test_each_setting_of_the_request_must_match_and_a_miss_names_the_first_that_differs() -> None:
    options = {
        "temperature": 0.2,
        "max_tokens": 40,
        "seed": 7,
        "tools": [ADD_SPEC],
        "tool_choice": "none",
    }
    sid = record(("the meeting ran long", options))
    assert replay(sid, "the meeting ran long", options) == "short: the meeting ran long"

    said = miss(sid, "the meeting ran long", {**options, "temperature": 0.7})
    assert "LLM call 1 of function summarize" in said
    assert "nearest recording is turn 1" in said and "call 1 of function summarize" in said
    assert "first difference: temperature: recorded 0.2, now 0.7" in said
    said = miss(sid, "the meeting ran long", {**options, "max_tokens": 80})
    assert "first difference: max_tokens: recorded 40, now 80" in said
    said = miss(sid, "the meeting ran long", {**options, "seed": 8})
    assert "first difference: seed: recorded 7, now 8" in said
    said = miss(sid, "the meeting ran long", {**options, "tool_choice": "auto"})
    assert 'first difference: tool_choice: recorded "none", now "auto"' in said
    other = {**ADD_SPEC, "description": "Add up two numbers."}
    said = miss(sid, "the meeting ran long", {**options, "tools": [other]})
    assert "first difference: tools[0].description: recorded " in said
    assert '"Add two numbers."' in said and '"Add up two numbers."' in said
    # the prompt first: a changed content is named before the settings, with the diff
    said = miss(sid, "the meeting ran short", {**options, "seed": 8})
    assert "first difference: messages[1].content:" in said
    assert "-user: the meeting ran long" in said and "+user: the meeting ran short" in said


def test_the_response_format_is_part_of_the_request() -> None:
    sid = record(("label it", {"response_format": SHAPE}))
    assert replay(sid, "label it", {"response_format": SHAPE}) == {"label": "short"}
    loose = {**SHAPE, "required": []}
    said = miss(sid, "label it", {"response_format": loose})
    assert "first difference: response_format.required[0]: " in said
    assert 'recorded "label", now (not set)' in said


def test_streamed_and_not_streamed_calls_replay_alike() -> None:
    pieces: list[str] = []
    sid = record(("one", {"stream": True, "on_delta": pieces.append}), ("two", {}))
    assert pieces == ["short: one"]
    # the streamed recording answers a call that does not stream, and the other way round
    rt = create_runtime(ReplayProvider(sid), backoff=0.0, max_retries=0)
    shown: list[str] = []
    with session_context(runtime=rt):
        assert summarize("one", {}) == "short: one"
        assert summarize("two", {"on_delta": shown.append}) == "short: two"
    assert shown == ["short: two"]


def test_a_recording_made_before_settings_were_kept_replays_on_its_prompt() -> None:
    sid = record(("old call", {"temperature": 0.2}))
    old = [Call.from_dict(n.to_dict()) for n in default_db().open(sid).nodes()]
    with session_context() as handle:  # the same turn, as an older version recorded it
        writer = get_store()
        assert writer is not None
        for node in old:
            if node.kind in ("function", "llm"):
                node.metadata.pop("request", None)
                writer.append(node, turn_level=node.caller is None)
    assert replay(handle.session_id, "old call", {"temperature": 0.9}) == "short: old call"
    said = miss(handle.session_id, "new call", {"temperature": 0.9})
    assert "first difference: messages[1].content:" in said
    assert "recorded before request settings were kept" in said


@agentic_function
def repeat(text: str, runtime: Any = None) -> str:
    """Say the text back."""
    return str(runtime.exec(text, stream=True, temperature=0))


def test_nothing_a_replay_stores_holds_a_key(
    op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-replaykey-" + "Q7" * 12
    password = "gateway-pass-" + "Z9" * 8
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with WireServer() as server:
        # the key goes in a header, a gateway's password in the base URL (a Basic header);
        # the replies echo both, streamed in pieces that cut through them
        for secret, base in (
            (key, server.openai_base_url),
            (password, server.openai_base_url.replace("http://", f"http://user:{password}@")),
        ):
            echoed = f"you sent {secret} to the gateway"
            pieces = [echoed[i : i + 5] for i in range(0, len(echoed), 5)]
            server.reply(Reply(text=echoed, chunks=pieces))
            rt = create_runtime(OpenAIProvider(base_url=base), backoff=0.0, max_retries=0)
            with session_context(runtime=rt) as recorded:
                repeat(f"my key is {key}")
        headers = [r.headers.get("authorization", "") for r in server.requests]
        assert headers[0] == f"Bearer {key}" and headers[1].startswith("Basic ")  # sent, truly
    replayed = replay_repeat(recorded.session_id, f"my key is {key}")
    assert replayed == "you sent *** to the gateway"
    scanned = 0
    for where, data in everything_written(op_home):
        scanned += 1
        assert key.encode() not in data, f"the key was written to {where}"
        assert password.encode() not in data, f"the password was written to {where}"
    assert scanned > 2


def replay_repeat(session_id: str, text: str) -> str:
    rt = create_runtime(ReplayProvider(session_id), backoff=0.0, max_retries=0)
    with session_context(runtime=rt):
        return repeat(text)


def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@agentic_function
def total(question: str, runtime: Any = None) -> str:
    """Answer with the tool."""
    return str(runtime.exec(question, tools=[add]))


def test_a_recorded_tool_call_is_replayed_and_the_tool_runs_again() -> None:
    from openprogram.providers.base import ToolCall

    def model(request: Any) -> Any:
        if "-> 5" in str(request.messages[-2]["content"]):  # the tool's result, shown
            return "the sum is 5"
        return [ToolCall("c1", "add", {"a": 2, "b": 3})]

    rt = create_runtime(FunctionProvider(model), backoff=0.0)
    with session_context(runtime=rt) as recorded:
        assert total("2 + 3?") == "the sum is 5"
    rt = create_runtime(ReplayProvider(recorded.session_id), backoff=0.0, max_retries=0)
    with session_context(runtime=rt) as replayed:
        assert total("2 + 3?") == "the sum is 5"
    tools = [n for n in default_db().open(replayed.session_id).nodes() if n.kind == "tool"]
    assert [(n.name, n.output) for n in tools] == [("add", 5.0)]  # it ran again
