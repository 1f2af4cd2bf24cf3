"""``%openprogram mcp add/list/remove`` in a real IPython shell: a server added in the
notebook offers its tools to chat cells and to ``%openprogram call``, ``mcp list`` names
them, ``mcp remove`` stops it; a bad line is one ``UsageError`` line."""

from __future__ import annotations

import json
from typing import Any

import pytest
from IPython.core.error import UsageError
from test_mcp_tools import server_pids, tool_nodes

from openprogram.agentic_programming.mcp import mcp_servers
from openprogram.providers.base import LLMRequest, LLMResponse, ToolCall
from tests.test_magics import Shell

ADD = "%openprogram mcp add time -- mcp-server-time --local-timezone UTC"


@pytest.fixture
def servers() -> Any:
    yield mcp_servers
    for server in list(mcp_servers):
        mcp_servers.remove(server.name)


def session_of(shell: Shell) -> str:
    sid = shell.magics.current_session_id()
    assert sid is not None
    return sid


def test_a_server_added_in_the_notebook_serves_chat_cells_call_and_list(
    bare_shell: Shell, servers: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    shell = bare_shell

    def model(request: LLMRequest) -> LLMResponse:
        if request.tools and request.iteration == 1:
            call = ToolCall("t1", "get_current_time", {"timezone": "Europe/Berlin"})
            return LLMResponse("", tool_calls=[call])
        return LLMResponse("It is evening in Berlin.")

    shell.use_provider(model)
    shell.run(ADD)
    assert server_pids() == []  # nothing starts before its first use
    shell.run("%openprogram mcp list")
    out = capsys.readouterr().out
    assert (
        "time: mcp-server-time --local-timezone UTC · tools: get_current_time, convert_time" in out
    )

    shell.run("%%openprogram --chat\nWhat time is it in Berlin?")
    [node] = tool_nodes(session_of(shell))
    assert node.input == {"timezone": "Europe/Berlin"}
    assert node.output["timezone"] == "Europe/Berlin"

    shell.run("%openprogram call get_current_time timezone=UTC")
    out = capsys.readouterr().out
    [printed] = [line for line in out.splitlines() if line.startswith("openprogram: get_")]
    assert printed.startswith("openprogram: get_current_time · turn ")
    assert json.loads(printed.split(" · ", 2)[2])["timezone"] == "UTC"

    pids = server_pids()
    shell.run("%openprogram mcp remove time")
    assert pids and server_pids() == []
    assert "MCP server time stopped and removed" in capsys.readouterr().out


def test_bad_mcp_lines_are_one_usage_error_line(bare_shell: Shell, servers: Any) -> None:
    for line, said in (
        ("%openprogram mcp add", "needs a name"),
        ("%openprogram mcp add time", "has no command"),
        ("%openprogram mcp add 'no good' -- x", "a letter"),
        ("%openprogram mcp remove nothing", "no MCP server named 'nothing'"),
        ("%openprogram mcp start", "invalid choice"),
    ):
        result = bare_shell.run(line, error=UsageError)
        assert said in str(result.error_in_exec), line
