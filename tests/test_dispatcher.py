"""The chat dispatcher (seed 003): turns continue a session, failures are recorded, the test
seams are honoured, tools loop, and only ``TurnWriter`` moves HEAD."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from openprogram import create_runtime
from openprogram.agent import dispatcher as D
from openprogram.agent.agent_loop import LoopResult
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.runtime import Runtime
from openprogram.errors import UserError
from openprogram.providers.base import LLMRequest, LLMResponse, ProviderError, ToolCall
from openprogram.providers.test import FunctionProvider, TestProvider

PACKAGE = Path(D.__file__).parent


def runtime_for(fn: Any) -> tuple[Runtime, FunctionProvider]:
    provider = FunctionProvider(fn)
    return create_runtime(provider, backoff=0.0, max_retries=0), provider


def chat(session_id: str | None, text: str, rt: Runtime, **kw: Any) -> D.TurnResult:
    return D.process_user_turn(D.TurnRequest(session_id, text, runtime=rt, **kw))


def test_three_turns_continue_one_session_and_the_third_request_sees_the_history(
    rt: Runtime, test_provider: TestProvider, op_home: Path
) -> None:
    events: list[dict[str, Any]] = []
    first = chat(None, "My name is Ada.", rt, on_event=events.append)
    second = chat(first.session_id, "I like graphs.", rt)
    third = chat(first.session_id, "What is my name?", rt)

    assert first.created and not second.created and first.status == "completed"
    assert {second.session_id, third.session_id} == {first.session_id}
    assert third.text == "[test reply] What is my name?"
    messages = test_provider.requests[-1].messages
    assert messages[0] == {"role": "system", "content": D.DEFAULT_SYSTEM}
    assert messages[1:] == [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "[test reply] My name is Ada."},
        {"role": "user", "content": "I like graphs."},
        {"role": "assistant", "content": "[test reply] I like graphs."},
        {"role": "user", "content": "What is my name?"},
    ]
    assert [e["type"] for e in events] == ["user", "reply_started", "text", "result"]

    session = default_db().open(first.session_id)
    chain = session.chain(session.head_id, 10)
    assert [c.kind for c in chain] == ["root", "turn", "turn", "turn"]
    assert [c.id for c in chain[1:]] == [
        first.user_node_id,
        second.user_node_id,
        third.user_node_id,
    ]
    reply = session.get(third.reply_node_id or "")
    assert (reply.kind, reply.caller, reply.status) == ("reply", third.user_node_id, "completed")
    meta = json.loads((session.path / "meta.json").read_text())
    assert meta["title"] == "My name is Ada." and meta["head_id"] == third.user_node_id
    assert meta["turns"] == 3  # one storage turn (and one commit) per chat turn


def test_a_failing_loop_records_the_failure_and_head_stays_consistent(rt: Runtime) -> None:
    ok = chat(None, "hello", rt)

    def broken(_request: LLMRequest) -> str:
        raise ProviderError("model exploded")

    failing, _ = runtime_for(broken)
    failed = chat(ok.session_id, "and now?", failing)
    assert failed.status == "error"
    assert failed.error == "ProviderError: model exploded"

    session = default_db().open(ok.session_id)
    reply = session.get(failed.reply_node_id or "")
    assert (reply.status, reply.metadata["error"]) == ("error", "ProviderError: model exploded")
    assert session.head_id == failed.user_node_id
    meta = json.loads((session.path / "meta.json").read_text())
    assert meta["head_id"] == failed.user_node_id  # committed as well
    assert not [n for n in session.nodes() if n.is_open]

    seen: list[LLMRequest] = []
    after, _ = runtime_for(lambda request: seen.append(request) or "recovered")
    again = chat(ok.session_id, "try again", after)
    assert session.get(again.user_node_id).predecessor == failed.user_node_id
    assert {"role": "assistant", "content": "[error] ProviderError: model exploded"} in (
        seen[0].messages
    )


def test_a_keyboard_interrupt_cancels_the_reply_and_propagates(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*_args: Any) -> LoopResult:
        raise KeyboardInterrupt

    monkeypatch.setattr(D, "_run_loop_blocking", interrupted)
    with pytest.raises(KeyboardInterrupt):
        chat("chat_ctrl_c", "long task", rt)
    session = default_db().open("chat_ctrl_c")
    reply = next(n for n in session.nodes() if n.kind == "reply")
    assert reply.status == "cancelled"


def test_ctrl_c_inside_a_tool_cancels_the_tool_and_the_reply() -> None:
    def slow() -> str:
        raise KeyboardInterrupt

    rt, _ = runtime_for(lambda r: LLMResponse("", tool_calls=[ToolCall("c", "slow", {})]))
    with pytest.raises(KeyboardInterrupt):
        chat("chat_tool_ctrl_c", "use the tool", rt, tools={"slow": slow})
    session = default_db().open("chat_tool_ctrl_c")
    status = {n.kind: n.status for n in session.nodes() if n.kind in ("tool", "reply")}
    assert status == {"tool": "cancelled", "reply": "cancelled"}
    assert not [n for n in session.nodes() if n.status == "running"]


def test_the_loop_seam_is_resolved_through_the_package(
    rt: Runtime, test_provider: TestProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    orig = D._run_loop_blocking
    calls: list[str] = []

    def wrapped(request: D.TurnRequest, handle: Any, reply: Any) -> LoopResult:
        calls.append(request.text)
        return orig(request, handle, reply)

    monkeypatch.setattr(D, "_run_loop_blocking", wrapped)
    assert chat(None, "through the seam", rt).text == "[test reply] through the seam"
    assert calls == ["through the seam"]

    monkeypatch.setattr(D, "_run_loop_blocking", lambda *_a: LoopResult("patched", 1, 0))
    result = chat(None, "no model", rt)
    assert result.text == "patched" and len(test_provider.requests) == 1


def test_tools_run_as_tool_nodes_and_feed_back_to_the_model() -> None:
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    def model(request: LLMRequest) -> LLMResponse:
        results = [m["content"] for m in request.messages if "Earlier step: add(" in m["content"]]
        if not results:
            return LLMResponse("", tool_calls=[ToolCall("c1", "add", {"a": 2, "b": 3})])
        return LLMResponse(f"the sum is {results[-1].rsplit('-> ', 1)[1]}")

    rt, provider = runtime_for(model)
    events: list[dict[str, Any]] = []
    result = chat(None, "what is 2+3?", rt, tools={"add": add}, on_event=events.append)

    assert result.text == "the sum is 5"
    spec = provider.requests[0].tools
    assert spec == [
        {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        }
    ]
    session = default_db().open(result.session_id)
    under_reply = [session.get(i) for i in session.children(result.reply_node_id)]
    assert [(n.kind, n.name, n.status) for n in under_reply] == [
        ("llm", "function", "completed"),
        ("llm", "function", "completed"),
    ]
    # issue 20: the tool hangs under the llm node whose reply called it
    (tool,) = [session.get(i) for i in session.children(under_reply[0].id)]
    assert (tool.kind, tool.name, tool.status) == ("tool", "add", "completed")
    assert tool.input == {"a": 2, "b": 3} and tool.output == 5
    assert [e["type"] for e in events][2:4] == ["tool_call", "tool_result"]
    assert session.get(result.reply_node_id or "").metadata["tool_calls"] == 1


def test_the_tool_loop_is_bounded_and_a_failing_tool_is_shown_to_the_model() -> None:
    def flaky() -> str:
        raise RuntimeError("disk on fire")

    rt, provider = runtime_for(
        lambda request: LLMResponse(
            "giving up" if request.tools is None else "",
            tool_calls=[ToolCall("c", "flaky", {})] if request.tools else [],
        )
    )
    result = chat(None, "loop forever", rt, tools={"flaky": flaky}, max_iterations=3)
    assert result.text == "giving up"
    assert [r.tools is None for r in provider.requests] == [False, False, True]
    assert "RuntimeError: disk on fire" in provider.requests[-1].messages[-2]["content"]


def test_fork_from_links_the_message_after_an_earlier_node(rt: Runtime) -> None:
    first = chat(None, "one", rt)
    chat(first.session_id, "two", rt)
    fork = chat(first.session_id, "two, differently", rt, fork_from=first.user_node_id)
    session = default_db().open(first.session_id)
    assert session.get(fork.user_node_id).predecessor == first.user_node_id
    assert session.head_id == fork.user_node_id
    count = len(session.index())
    with pytest.raises(UserError, match="cannot fork from 'n_nope'"):
        chat(first.session_id, "x", rt, fork_from="n_nope")
    assert len(session.index()) == count


def test_only_turn_writer_moves_head() -> None:
    """Seed 003 §3: in the dispatcher package only ``turn_writer.py`` writes HEAD, and
    ``forced_tool.py`` (the forced call bypasses the agent loop; test_dispatcher_interface
    checks the calls themselves)."""
    pattern = re.compile(r"advance_head|turn_level=True")
    writers = sorted(p.name for p in PACKAGE.glob("*.py") if pattern.search(p.read_text()))
    assert writers == ["forced_tool.py", "turn_writer.py"]
    for path in PACKAGE.glob("*.py"):
        assert len(path.read_text().splitlines()) < 1000, path


def test_no_contextvar_is_set_outside_its_owner_module() -> None:
    """ARCHITECTURE §5: entry points go through ``session_context`` or the owner's scoped
    setter; only the owner module calls ``.set()`` on its ContextVars."""
    owners = {
        "_store": "openprogram/store/vars.py",
        "_current_turn_id": "openprogram/store/vars.py",
        "_current_runtime": "openprogram/store/vars.py",
        "_call_id": "openprogram/store/vars.py",
        "_depth": "openprogram/store/vars.py",
        "_ask_handler": "openprogram/store/vars.py",
    }
    root = PACKAGE.parents[2]
    pattern = re.compile(r"\b(" + "|".join(owners) + r")\.set\(")
    offenders = []
    for folder in ("openprogram", "openprogram_magics"):
        for path in (root / folder).rglob("*.py"):
            rel = path.relative_to(root).as_posix()
            for match in pattern.finditer(path.read_text()):
                if owners[match.group(1)] != rel:
                    offenders.append(f"{rel}: {match.group(0)}")
    assert offenders == []
