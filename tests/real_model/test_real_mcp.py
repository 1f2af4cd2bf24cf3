"""The real model (SmolLM2 on llama-cpp-python's server) and a real MCP server
(``mcp-server-time``): in a chat turn the model is offered the server's tools with their
schema as the server wrote it, and a call it makes runs on the server as a ``tool`` node;
with ``tool_choice`` naming the tool, the model has to choose it.  The model is weak, so
what is asserted is what the project controls, and the call's structure, never its words."""

from __future__ import annotations

from pathlib import Path

import pytest
from real_server import ALIAS, RealServer

from openprogram import create_runtime, session_context
from openprogram.agent import dispatcher as D
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming import Runtime
from openprogram.context.nodes import Call
from openprogram.providers.openai_provider import OpenAIProvider

pytestmark = pytest.mark.realmodel
TIME = "time=mcp-server-time --local-timezone UTC"


def runtime_for(server: RealServer) -> Runtime:
    return create_runtime(OpenAIProvider(ALIAS, base_url=server.base_url), mcp=[TIME])


def nodes(session_id: str, kind: str) -> list[Call]:
    return [n for n in default_db().open(session_id).nodes() if n.kind == kind]


def assert_a_time_call(node: Call) -> None:
    assert node.metadata["mcp"] == {
        "server": "time",
        "tool": node.name,
        "tools": ["get_current_time", "convert_time"],
    }
    if node.status == "completed":  # the server answered: a time of the zone asked for
        assert {"timezone", "datetime", "day_of_week", "is_dst"} <= set(node.output)
    else:  # a weak model's arguments refused (cut-off JSON, or by the server): one line
        error = node.metadata["error"]
        assert error.startswith(("McpToolError: ", "ToolArgumentsError: ")) and "\n" not in error


def test_the_model_is_offered_the_servers_tools_in_a_chat_turn(
    real_server: RealServer, op_home: Path
) -> None:
    since = len(real_server.exchanges)
    rt = runtime_for(real_server)
    try:
        result = D.process_user_turn(
            D.TurnRequest(
                None,
                "What is the current time in UTC? Call get_current_time with timezone UTC.",
                runtime=rt,
                max_iterations=2,
            )
        )
    finally:
        rt.mcp.stop()
    first = real_server.chats(since)[0]
    offered = {t["function"]["name"]: t["function"] for t in first.body["tools"]}
    assert set(offered) >= {"get_current_time", "convert_time"}
    assert offered["get_current_time"]["parameters"]["required"] == ["timezone"]
    assert result.status == "completed"  # whatever the model chose, the turn ended
    for node in nodes(result.session_id, "tool"):  # a weak model's choice: when made
        assert_a_time_call(node)


def test_tool_choice_makes_the_model_call_the_servers_tool(
    real_server: RealServer, op_home: Path
) -> None:
    rt = runtime_for(real_server)
    try:
        with session_context(runtime=rt) as s:
            rt.exec(
                "What is the current time in UTC?",
                tools=rt.mcp_tools(),
                tool_choice="get_current_time",
                max_iterations=2,
                max_tokens=60,
            )
    finally:
        rt.mcp.stop()
    [node] = nodes(s.session_id, "tool")
    assert node.name == "get_current_time"
    assert_a_time_call(node)
