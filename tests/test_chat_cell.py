"""A chat in the same session: ``%%openprogram --chat`` between code cells is a dispatcher
turn of the notebook's session (its prompt holds the code cells' turns), a notebook
function marked ``@tool`` is called as a ``tool`` node, ``ask_user`` never hangs without a
frontend, the reply streams into the cell; ``openprogram chat`` does the same in a terminal."""

from __future__ import annotations

import io
from typing import Any

import pytest

from openprogram.agent.session_db import default_db
from openprogram.cli import main
from openprogram.context.nodes import Call
from openprogram.providers.base import LLMRequest, LLMResponse, ToolCall
from openprogram.providers.test import FunctionProvider, TestProvider
from tests.test_magics import Shell

TOOLS = '''
from openprogram import ask_user, tool

@tool
def lookup(query: str) -> str:
    """Look a word up in the notebook's glossary."""
    return f"glossary entry for {query}"

@tool
def confirm(question: str) -> str:
    """Ask the user to confirm something."""
    return str(ask_user(question, choices=["yes", "no"]))
'''


@pytest.fixture
def shell(bare_shell: Shell) -> Shell:
    return bare_shell


def scripted(*replies: LLMResponse) -> FunctionProvider:
    queue = list(replies)
    return FunctionProvider(lambda request: queue.pop(0))


def final_displays(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each display published in ``outputs`` (a capturing publisher's) as it ends: a display
    with an id once, holding its last update."""
    last: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for i, out in enumerate(outputs):
        key = str((out.get("transient") or {}).get("display_id") or f"#{i}")
        if key not in last:
            order.append(key)
        last[key] = out["data"]
    return [last[key] for key in order]


def replies(outputs: list[dict[str, Any]]) -> list[str]:
    """The chat replies shown in ``outputs``: the plain-text displays (no session part)."""
    return [d["text/plain"] for d in final_displays(outputs) if list(d) == ["text/plain"]]


def nodes_by_id(nodes: list[Call]) -> dict[str, Call]:
    return {n.id: n for n in nodes}


def session_nodes(shell: Shell) -> list[Call]:
    assert shell.magics.turns.kernel_meta is not None
    return default_db().open(shell.magics.turns.kernel_meta.session_id).nodes()


def test_a_chat_cell_between_code_cells_is_a_turn_of_the_same_session(
    shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    provider = scripted(
        LLMResponse("", tool_calls=[ToolCall("c1", "lookup", {"query": "DAG"})]),
        LLMResponse("The first cell set total to 42; a DAG is a graph."),
    )
    shell.use_runtime(provider)
    shell.run(TOOLS)
    shell.run("%%openprogram\ntotal = 6 * 7")
    capsys.readouterr()
    shown = len(shell.display.outputs)
    shell.run("%%openprogram --chat\nWhat did the first cell compute, and what is a DAG?")
    assert "a DAG is a graph" not in capsys.readouterr().out  # the reply is a display, not stdout
    (reply_shown,) = replies(shell.display.outputs[shown:])
    assert reply_shown.count("The first cell set total to 42; a DAG is a graph.") == 1
    shell.run("%%openprogram\nafter = total + 1")

    first = provider.requests[0]
    history = "\n".join(str(m["content"]) for m in first.messages)
    assert "total = 6 * 7" in history  # the code cell's turn is in the chat's prompt
    assert {t["name"] for t in first.tools or []} == {"lookup", "confirm"}
    nodes = session_nodes(shell)
    turns = [n for n in nodes if n.kind == "turn"]
    assert [t.name for t in turns][1] == "user" and len(turns) == 3  # code, chat, code
    assert turns[1].predecessor == turns[0].id and turns[2].predecessor == turns[1].id
    (tool,) = [n for n in nodes if n.kind == "tool"]
    assert (tool.name, tool.input, tool.output) == (
        "lookup",
        {"query": "DAG"},
        "glossary entry for DAG",
    )
    (reply,) = [n for n in nodes if n.kind == "reply"]
    # issue 20: the tool hangs under the reply's llm node that called it
    assert reply.caller == turns[1].id and nodes_by_id(nodes)[tool.caller or ""].caller == reply.id
    assert nodes_by_id(nodes)[tool.caller or ""].kind == "llm"
    assert reply.output == "The first cell set total to 42; a DAG is a graph."


def test_ask_user_in_a_chat_without_a_frontend_is_unanswered_not_a_hang(shell: Shell) -> None:
    provider = scripted(
        LLMResponse("", tool_calls=[ToolCall("c1", "confirm", {"question": "Delete it?"})]),
        LLMResponse("Nobody confirmed, so nothing was deleted."),
    )
    shell.use_runtime(provider)
    shell.run(TOOLS)
    shell.run("%%openprogram --chat\nDelete the draft, after asking me.")
    nodes = session_nodes(shell)
    (asked,) = [n for n in nodes if n.kind == "ask_user"]
    assert asked.status == "unanswered"
    assert next(n for n in nodes if n.kind == "tool").output == "None"
    assert next(n for n in nodes if n.kind == "reply").status == "completed"


def test_an_empty_chat_cell_says_what_to_write(shell: Shell) -> None:
    from IPython.core.error import UsageError

    shell.run("%%openprogram --chat\n   ", error=UsageError)


def test_openprogram_chat_in_a_terminal_continues_a_session(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[LLMRequest] = []
    original = TestProvider.complete

    def recording(self: TestProvider, request: LLMRequest, on_delta: object = None) -> object:
        seen.append(request)
        return original(self, request, on_delta)  # type: ignore[arg-type]

    monkeypatch.setattr(TestProvider, "complete", recording)
    assert main(["chat", "--provider", "test", "-m", "remember the word heron"]) == 0
    out = capsys.readouterr().out
    session_id = out.split()[1]
    assert "[test reply] remember the word heron" in out
    monkeypatch.setattr("sys.stdin", io.StringIO("which word?\n\n"))  # then EOF
    assert main(["chat", "--provider", "test", "--session", session_id]) == 0
    assert "remember the word heron" in "\n".join(str(m["content"]) for m in seen[-1].messages)
    turns = [n for n in default_db().open(session_id).nodes() if n.kind == "turn"]
    assert len(turns) == 2 and turns[1].predecessor == turns[0].id
