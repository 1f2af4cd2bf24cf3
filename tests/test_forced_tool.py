"""Forced tool calls (issue 22): ``dispatch_forced_tool_call`` runs a tool or an agentic
function with given arguments and no model, recorded as a turn of its own; a retry is
anchored on the failed turn's predecessor; ``%openprogram call NAME key=value…``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from test_commands_plain import Host as CommandHost

from openprogram import agentic_function, create_runtime, tool
from openprogram.agent import dispatcher as D
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.runtime import Runtime
from openprogram.errors import UserError
from openprogram.providers.base import LLMRequest
from openprogram.providers.test import FunctionProvider, TestProvider
from openprogram_magics import commands
from openprogram_magics.commands.call import parse_arguments
from openprogram_magics.notebook import NotebookMeta


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def fragile(path: str) -> str:
    """Read a file."""
    with open(path) as handle:
        return handle.read()


@agentic_function
def summarize(text: str, runtime: Runtime | None = None) -> str:
    """Summarize the text in one sentence."""
    assert runtime is not None
    return str(runtime.exec(text))


def test_a_forced_call_is_a_turn_of_its_own_and_later_turns_see_it(rt: Runtime) -> None:
    first = D.process_user_turn(D.TurnRequest(None, "hello", runtime=rt))
    events: list[dict[str, Any]] = []
    forced = D.dispatch_forced_tool_call(
        first.session_id, "add", {"a": 2, "b": 40}, tools={"add": add}, on_event=events.append
    )
    assert (forced.status, forced.text, forced.reason) == ("completed", "42", None)
    assert [e["type"] for e in events] == ["user", "tool_call", "tool_result", "result"]

    session = default_db().open(first.session_id)
    turn = session.get(forced.user_node_id)
    assert (turn.kind, turn.name, turn.predecessor) == ("turn", "forced_tool", first.user_node_id)
    assert turn.input == {
        "text": "/call add(a=2, b=40)",
        "tool": "add",
        "arguments": {"a": 2, "b": 40},
    }
    assert session.head_id == forced.user_node_id  # it moved HEAD: the next turn follows it
    (tool_node,) = [session.get(i) for i in session.children(turn.id)]
    assert (tool_node.id, tool_node.kind, tool_node.output) == (forced.reply_node_id, "tool", 42)
    assert not any(n.kind == "llm" for n in session.nodes() if n.caller == turn.id)  # no model
    meta = json.loads((session.path / "meta.json").read_text())
    assert meta["head_id"] == forced.user_node_id and meta["turns"] == 2  # one commit each

    seen: list[LLMRequest] = []
    later = create_runtime(FunctionProvider(lambda r: seen.append(r) or "ok"), backoff=0.0)
    after = D.process_user_turn(D.TurnRequest(first.session_id, "and?", runtime=later))
    assert session.get(after.user_node_id).predecessor == forced.user_node_id
    said = [m["content"] for m in seen[0].messages]
    # the later prompt states the forced call plainly (render.turn_text)
    assert any("add was called with a=2, b=40 and returned 42" in s for s in said), said


def test_an_agentic_function_nests_its_frame_under_the_tool_node(
    rt: Runtime, test_provider: TestProvider
) -> None:
    forced = D.dispatch_forced_tool_call(
        None, "summarize", {"text": "the sky is blue"}, tools={"summarize": summarize}, runtime=rt
    )
    assert forced.created and forced.text == "[test reply] the sky is blue"
    session = default_db().open(forced.session_id)
    (frame,) = [session.get(i) for i in session.children(forced.reply_node_id or "")]
    assert (frame.kind, frame.name, frame.status) == ("function", "summarize", "completed")
    assert test_provider.requests[0].messages[0]["content"] == "Summarize the text in one sentence."


def test_a_failed_call_says_why_and_a_retry_is_a_sibling_after_its_predecessor(
    rt: Runtime, tmp_path: Any
) -> None:
    first = D.process_user_turn(D.TurnRequest(None, "read my notes", runtime=rt))
    missing = str(tmp_path / "notes.txt")
    failed = D.dispatch_forced_tool_call(
        first.session_id, "fragile", {"path": missing}, tools={"fragile": fragile}
    )
    assert (failed.status, failed.reason) == ("error", "tool")
    assert failed.error is not None and failed.error.startswith("FileNotFoundError")

    (tmp_path / "notes.txt").write_text("remember the milk")
    retry = D.dispatch_forced_tool_call(
        first.session_id,
        "fragile",
        {"path": missing},
        tools={"fragile": fragile},
        retry_of=failed.user_node_id,
    )
    assert (retry.status, retry.text) == ("completed", "remember the milk")
    session = default_db().open(first.session_id)
    again = session.get(retry.user_node_id)
    assert again.predecessor == first.user_node_id == session.get(failed.user_node_id).predecessor
    assert again.metadata["retry_of"] == failed.user_node_id
    assert session.head_id == retry.user_node_id
    assert not [n for n in session.nodes() if n.is_open]


def test_bad_forced_calls_are_one_line_errors_and_write_nothing(rt: Runtime) -> None:
    first = D.process_user_turn(D.TurnRequest(None, "hi", runtime=rt))
    session = default_db().open(first.session_id)
    count = len(session.index())
    with pytest.raises(UserError, match=r"no tool named 'nope' \(the tools: add;"):
        D.dispatch_forced_tool_call(first.session_id, "nope", {}, tools={"add": add})
    with pytest.raises(UserError, match="cannot retry 'n_gone'"):
        D.dispatch_forced_tool_call(
            first.session_id, "add", {}, tools={"add": add}, retry_of="n_gone"
        )
    with pytest.raises(UserError, match="cannot import tool 'no_such_module:f'"):
        D.dispatch_forced_tool_call(first.session_id, "no_such_module:f", {})
    bad = D.dispatch_forced_tool_call(first.session_id, "add", {"a": "x"}, tools={"add": add})
    assert bad.status == "error" and "bad arguments for tool 'add'" in (bad.error or "")
    assert len(session.index()) == count + 2  # only the bad-arguments call is a turn


def test_an_importable_function_can_be_named_by_its_path() -> None:
    forced = D.dispatch_forced_tool_call(None, "test_forced_tool:add", {"a": 1, "b": 2})
    assert forced.text == "3"


# -- %openprogram call ----------------------------------------------------------------------------
@dataclass
class Host(CommandHost):
    """test_commands_plain's host, with the shell whose namespace holds the tools."""

    shell: Any = None


def test_parse_arguments_reads_literals_else_strings() -> None:
    assert parse_arguments(["n=3", "xs=[1, 2]", "flag=True", "name=Ada Lovelace", "q='x'"]) == {
        "n": 3,
        "xs": [1, 2],
        "flag": True,
        "name": "Ada Lovelace",
        "q": "x",
    }
    with pytest.raises(commands.CommandError, match="arguments are key=value"):
        parse_arguments(["oops"])
    with pytest.raises(commands.CommandError, match="n is given twice"):
        parse_arguments(["n=1", "n=2"])


def test_the_call_command_runs_a_notebook_tool_as_a_turn_of_its_session(
    capsys: pytest.CaptureFixture[str],
) -> None:
    @tool
    def scale(values: list[float], factor: float = 2.0) -> list[float]:
        """Scale the values."""
        return [v * factor for v in values]

    def private_helper() -> None:  # not a tool: not callable by name
        pass

    shell = SimpleNamespace(user_ns={"scale": scale, "private_helper": private_helper})
    host = Host(meta=NotebookMeta("nb_call"), shell=shell)
    result = commands.run(host, "call scale 'values=[1, 2.5]' factor=3")
    assert (result.status, result.text) == ("completed", "[3.0, 7.5]")
    assert capsys.readouterr().out.startswith("openprogram: scale · turn ")
    assert host.meta is not None and host.meta.last_turn_id == result.user_node_id

    second = commands.run(host, "call scale values=[1]")
    session = default_db().open("nb_call")
    assert session.get(second.user_node_id).predecessor == result.user_node_id
    with pytest.raises(UserError, match="no tool named 'private_helper'"):
        commands.run(host, "call private_helper")
    with pytest.raises(commands.CommandError, match="no session yet"):
        commands.run(Host(shell=shell), "call scale values=[1]")
    assert "call [--retry TURN] NAME [KEY=VALUE ...]" in commands.help_text()
