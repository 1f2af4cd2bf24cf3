"""MCP servers as tools (issue 39 item 1), against real servers the suite starts:
``mcp-server-time``, ``mcp-server-git`` on a scratch repository, and a tiny server of ours
(``mcp_flaky_server.py``) whose tools die mid-call, hang or fail.  Each call is a ``tool``
node with its arguments and result; a dead or hung server ends the call with one line and
the turn goes on; a replay answers from the recording without starting the server; no
server outlives its stop or its process."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from openprogram import create_runtime, session_context
from openprogram.agent import dispatcher as D
from openprogram.agent.proctree import descendants
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.mcp import McpServers, ServerSpec, spec_of, stop_every_server
from openprogram.agentic_programming.runtime import Runtime
from openprogram.agentic_programming.tool_args import TOOL_SPEC
from openprogram.context.nodes import Call
from openprogram.errors import McpServerError, UserError
from openprogram.providers.base import LLMRequest, LLMResponse, ToolCall
from openprogram.providers.replay import ReplayProvider
from openprogram.providers.test import FunctionProvider, TestProvider

HERE = Path(__file__).resolve().parent
FLAKY = f"flaky={sys.executable} {HERE / 'mcp_flaky_server.py'}"
TIME = "time=mcp-server-time --local-timezone UTC"


def scripted(*calls: tuple[str, dict[str, Any]], answer: str = "done") -> FunctionProvider:
    """A model that calls each tool in turn (one per round), then answers ``answer``."""
    queue = list(calls)

    def reply(request: LLMRequest) -> LLMResponse:
        if queue and request.tools:
            name, arguments = queue.pop(0)
            return LLMResponse("", tool_calls=[ToolCall(f"c{len(queue)}", name, arguments)])
        return LLMResponse(answer)

    return FunctionProvider(reply)


def runtime(provider: Any, servers: list[Any]) -> Runtime:
    return create_runtime(provider, backoff=0.0, max_retries=0, mcp=servers)


def tool_nodes(session_id: str) -> list[Call]:
    return [n for n in default_db().open(session_id).nodes() if n.kind == "tool"]


def server_pids() -> list[int]:
    """The processes under this one that are MCP servers of the tests."""
    out = []
    for pid in descendants(os.getpid()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"mcp-server" in cmdline or b"mcp_flaky_server" in cmdline:
            out.append(pid)
    return out


def gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie waiting to be reaped has ended too)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A scratch git repository with one commit and one untracked file."""
    path = tmp_path / "scratch"
    path.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    git = ["git", "-c", "user.name=Ada", "-c", "user.email=ada@example.org"]
    subprocess.run([*git, "init", "-q"], cwd=path, check=True, env=env)
    (path / "notes.txt").write_text("first\n")
    subprocess.run([*git, "add", "notes.txt"], cwd=path, check=True, env=env)
    subprocess.run([*git, "commit", "-qm", "Add the notes"], cwd=path, check=True, env=env)
    (path / "draft.txt").write_text("not yet\n")
    return path


# -- specs ---------------------------------------------------------------------------------------
def test_specs_read_what_users_write() -> None:
    assert spec_of("time=mcp-server-time --local-timezone UTC") == ServerSpec(
        "time", command=("mcp-server-time", "--local-timezone", "UTC")
    )
    assert spec_of({"name": "web", "url": "http://127.0.0.1:8000/mcp"}).url.endswith("/mcp")
    assert spec_of({"name": "g", "command": "mcp-server-git", "args": ["-r", "x"]}).command == (
        "mcp-server-git",
        "-r",
        "x",
    )
    secret = spec_of("web=https://ada:s3cr3t-pw@mcp.example.org/mcp?key=k-123")
    assert secret.shown == "https://ada:***@mcp.example.org/mcp"  # what listings and errors show
    with pytest.raises(UserError, match="NAME=COMMAND"):
        spec_of("just-a-command")
    with pytest.raises(UserError, match="a letter"):
        spec_of("bad name=cmd")
    with pytest.raises(UserError, match="timeout"):
        spec_of({"name": "t", "command": "x", "timeout": 0})


# -- real servers through runtime.exec -----------------------------------------------------------
def test_time_server_tool_is_a_tool_node_with_the_servers_schema_as_is() -> None:
    provider = TestProvider("it is late", tool_calls=[("get_current_time", {"timezone": "UTC"})])
    rt = runtime(provider, [TIME])
    try:
        with session_context() as s:
            tools = rt.mcp_tools()
            reply = rt.exec("What time is it in UTC?", tools=tools)
        offered = {t["name"]: t for t in provider.requests[0].tools or []}
        schema = tools["get_current_time"].listed["inputSchema"]
        assert offered["get_current_time"]["parameters"] == schema  # as the server wrote it
        assert schema.get("title") == "get_current_timeArguments"  # no rebuilt schema has it
        assert set(offered) == {"get_current_time", "convert_time"}
        assert str(reply) == "it is late"
        [node] = tool_nodes(s.session_id)
        assert node.name == "get_current_time" and node.status == "completed"
        assert node.input == {"timezone": "UTC"}
        assert set(node.output) == {"timezone", "datetime", "day_of_week", "is_dst"}
        assert node.output["timezone"] == "UTC" and node.output["datetime"].endswith("+00:00")
        assert node.metadata["mcp"]["server"] == "time"
        llm = default_db().open(s.session_id).get(node.caller)
        assert llm.kind == "llm"  # under the llm node that called it
    finally:
        rt.mcp.stop()


def test_git_server_on_a_scratch_repository_and_its_result_is_redacted(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "tok-deploy-5f4e3d2c1b0a"
    monkeypatch.setenv("DEPLOY_TOKEN", token)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull}
    git = ["git", "-c", "user.name=Ada", "-c", "user.email=ada@example.org"]
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", f"use {token}"], cwd=repo, env=env)
    rt = runtime(
        scripted(("git_status", {"repo_path": str(repo)}), ("git_log", {"repo_path": str(repo)})),
        [f"git=mcp-server-git --repository {repo}"],
    )
    try:
        with session_context() as s:
            assert rt.exec("What changed?", tools=rt.mcp_tools()) == "done"
        status, log = tool_nodes(s.session_id)
        assert "draft.txt" in status.output and "Untracked" in status.output
        assert "Add the notes" in log.output
        assert token not in log.output  # the redaction point: the environment's secret
        assert token not in str(default_db().open(s.session_id).nodes())
    finally:
        rt.mcp.stop()


# -- a server that dies or hangs -------------------------------------------------------------------
def test_a_server_that_dies_mid_call_ends_that_call_in_one_line_and_the_turn_goes_on() -> None:
    rt = runtime(scripted(("die", {}), ("echo", {"text": "back"})), [FLAKY])
    try:
        with session_context() as s:
            assert rt.exec("Try both.", tools=rt.mcp_tools()) == "done"
        died, echoed = tool_nodes(s.session_id)
        error = died.metadata["error"]
        assert died.status == "error" and "\n" not in error
        assert "MCP server 'flaky' stopped during die" in error
        assert "dying on purpose" in error  # its last line on stderr
        assert echoed.status == "completed" and echoed.output == {"result": "echo: back"}
    finally:
        rt.mcp.stop()


def test_a_server_that_hangs_ends_the_call_at_its_timeout_and_the_turn_goes_on() -> None:
    spec = dataclasses.replace(spec_of(FLAKY), timeout=2.0)
    rt = runtime(scripted(("hang", {}), answer="gave up"), [spec])
    try:
        with session_context() as s:
            rt.mcp_tools()  # started (and its first call's imports paid) before the clock
            assert rt.exec("Wait for it.", tools=rt.mcp_tools()) == "gave up"
        [hung] = tool_nodes(s.session_id)
        assert hung.status == "error"
        assert "MCP server 'flaky' did not answer hang within 2 s" in hung.metadata["error"]
        assert server_pids() == []  # the hung server was stopped
    finally:
        rt.mcp.stop()


def test_an_error_result_goes_back_to_the_model_as_the_tools_error() -> None:
    seen: list[Any] = []

    def model(request: LLMRequest) -> LLMResponse:
        seen.append(request)
        if len(seen) == 1:
            return LLMResponse("", tool_calls=[ToolCall("c1", "get_current_time", {})])
        return LLMResponse("sorry")

    rt = runtime(FunctionProvider(model), [TIME])
    try:
        with session_context() as s:
            assert rt.exec("Time?", tools=rt.mcp_tools()) == "sorry"
        [node] = tool_nodes(s.session_id)
        assert node.status == "error" and node.metadata["error"].startswith("McpToolError: ")
        assert "timezone" in node.metadata["error"]  # the server's own complaint
    finally:
        rt.mcp.stop()


def test_a_server_that_cannot_start_says_so_in_one_line() -> None:
    servers = McpServers(["nothing=/nonexistent/mcp-server --flag"])
    with pytest.raises(McpServerError, match="could not start") as caught:
        servers.tools()
    assert "\n" not in str(caught.value)


def test_a_server_that_echoes_its_token_as_it_dies_is_shown_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "ghp_SECRETTOKEN0123456789abcdef"
    monkeypatch.setenv("GITHUB_TOKEN", token)
    script = tmp_path / "dies.py"
    script.write_text("import sys\nsys.exit('auth failed for token ' + sys.argv[1])\n")
    servers = McpServers([f"gh={sys.executable} {script} {token}"])
    with pytest.raises(McpServerError, match="could not start") as caught:
        servers.tools()
    assert "it said: auth failed for token ***" in str(caught.value)
    assert token not in str(caught.value)


def test_a_token_on_a_servers_command_line_is_in_no_listing_error_or_node() -> None:
    """A token given to a server only on its command line (not in the environment): a real
    server that says its arguments on stderr as it dies mid-call; the error line the tool
    node keeps, the session's nodes and the server's listing hold none of it."""
    token, bearer, key = "cli-TOKEN-" + "0123456789", "cli-BEARER-" + "0123456789", "k-4242"
    flaky = HERE / "mcp_flaky_server.py"
    header = f"Authorization: Bearer {bearer}"
    args = ("--token", token, "--header", header, f"--api-key={key}", "--local-timezone", "UTC")
    spec = ServerSpec("flaky", command=(sys.executable, str(flaky), *args))
    assert spec.shown.endswith(
        "--token *** --header 'Authorization: Bearer ***' --api-key=*** --local-timezone UTC"
    )
    rt = runtime(scripted(("die", {})), [spec])
    try:
        with session_context() as s:
            assert rt.exec("Try it.", tools=rt.mcp_tools()) == "done"
        [died] = tool_nodes(s.session_id)
        error = died.metadata["error"]
        assert "dying on purpose --token *** --header Authorization: Bearer ***" in error, error
        assert "--api-key=*** --local-timezone UTC" in error, error
        nodes = str(default_db().open(s.session_id).nodes())
        for secret in (token, bearer, key):
            assert secret not in error and secret not in nodes, secret
    finally:
        rt.mcp.stop()


def test_only_a_credentials_flag_has_its_value_masked_and_kept_secret() -> None:
    """A flag's value is a credential when the flag's words say so (``--pass``, ``--pat``,
    ``--db-pwd``, ``--credentials``, ``--cookie``, curl's ``-u user:PASS``): masked in the
    server's listing and in any later output.  ``--max-tokens``, ``--tokenizer``,
    ``--author``, ``--keyring-backend`` and a switch ``--no-auth`` say no such thing: their
    values, and a cell's output quoting them, stay as they are."""
    from openprogram.agentic_programming.mcp.server import McpServer
    from openprogram.context.secrets import redact_shown

    plain = ("--max-tokens", "409600", "--tokenizer", "bert-base-uncased", "--author")
    plain += ("Ada Lovelace", "--keyring-backend", "keyring.backends.null.Keyring")
    plain += ("--no-auth", "/home/ada/project/data")
    secret = ("--pass", "hunter2hunter2", "--credentials", "CREDSECRET99", "--pat")
    secret += ("ghpatSECRET1", "-u", "bob:SECRETPW77", "--db-pwd", "PWDSECRET88")
    spec = ServerSpec("srv", command=("srv", *plain, *secret))
    McpServer(spec)  # what its command line holds is registered as secret
    assert spec.shown == (
        "srv --max-tokens 409600 --tokenizer bert-base-uncased --author 'Ada Lovelace' "
        "--keyring-backend keyring.backends.null.Keyring --no-auth /home/ada/project/data "
        "--pass *** --credentials *** --pat *** -u bob:*** --db-pwd ***"
    )
    said = "Loaded bert-base-uncased by Ada Lovelace from /home/ada/project/data, 409600 max"
    assert redact_shown({"text": said}) == {"text": said}
    for value in ("hunter2hunter2", "CREDSECRET99", "ghpatSECRET1", "SECRETPW77", "PWDSECRET88"):
        assert redact_shown(f"it echoed {value}") == "it echoed ***"


MASK_A_MEGABYTE = """
from openprogram.agentic_programming.mcp.server import McpServer
from openprogram.agentic_programming.mcp.spec import ServerSpec
server = McpServer(ServerSpec("demo", command=("srv", "--token", "cli-TOKEN-0123456789")))
for unit in (".-key", "key", ".-", "bearer ", "-a=", "word "):
    line = "bad request: -" + unit * (1_000_000 // len(unit)) + " --api-key=k-SECRET-42 ok"
    print(server._why(RuntimeError(line)).endswith(" --api-key=*** ok"), flush=True)
"""


def test_a_servers_error_of_a_megabyte_is_masked_in_one_pass() -> None:
    """A server's error line of 1 MB (one line, the server's to choose) is masked as a
    plain line of that size is, however it repeats dashes, dots and flag words.  In a child:
    a backtracking pattern holds the interpreter for hours on it (minutes on 10 KB), so the
    wait only bounds a hang, and the child is killed when it is one."""
    child = subprocess.Popen([sys.executable, "-c", MASK_A_MEGABYTE], stdout=subprocess.PIPE)
    try:
        said, _ = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        child.kill()
        said, _ = child.communicate()
    assert said.split() == [b"True"] * 6, f"masked in time: {said!r} (a pattern backtracks)"


# -- chat turns, approvals, %openprogram call -----------------------------------------------------
def test_a_chat_turn_offers_the_runtimes_mcp_tools_and_the_approval_rules_apply() -> None:
    rt = runtime(scripted(("echo", {"text": "hi"}), answer="asked"), [FLAKY])
    try:
        result = D.process_user_turn(D.TurnRequest(None, "Say hi back", runtime=rt))
        [node] = tool_nodes(result.session_id)
        assert result.text == "asked" and node.output == {"result": "echo: hi"}
        with D.approval_registry.requiring("ech*"):  # nobody here to say yes
            refused = D.process_user_turn(
                D.TurnRequest(result.session_id, "Again", runtime=rt_again(rt))
            )
        second = tool_nodes(refused.session_id)[-1]
        assert refused.status == "completed"
        assert second.status == "error" and "was not approved" in second.metadata["error"]
    finally:
        rt.mcp.stop()


def rt_again(rt: Runtime) -> Runtime:
    """The same servers, a model that calls echo once more."""
    return Runtime(scripted(("echo", {"text": "again"})), mcp=rt.mcp)


def test_a_forced_call_reaches_an_mcp_tool_by_its_name() -> None:
    rt = runtime(TestProvider(), [TIME])
    try:
        result = D.dispatch_forced_tool_call(
            None, "get_current_time", {"timezone": "Asia/Tokyo"}, runtime=rt
        )
        assert result.status == "completed" and '"timezone": "Asia/Tokyo"' in result.text
        [node] = tool_nodes(result.session_id)
        assert node.metadata["mcp"]["tool"] == "get_current_time"
    finally:
        rt.mcp.stop()


# -- replay ------------------------------------------------------------------------------------
def test_replay_answers_mcp_calls_from_the_recording_without_starting_the_server() -> None:
    rt = runtime(scripted(("echo", {"text": "recorded"}), answer="heard it"), [FLAKY])
    try:
        with session_context() as s:
            assert rt.exec("Echo it.", tools=rt.mcp_tools()) == "heard it"
    finally:
        rt.mcp.stop()
    # the same server name, a command that cannot start: a replay must not need it
    replay = runtime(ReplayProvider(s.session_id), ["flaky=/nonexistent/flaky-server"])
    with session_context() as again:
        assert replay.exec("Echo it.", tools=replay.mcp_tools()) == "heard it"
    [node] = tool_nodes(again.session_id)
    assert node.output == {"result": "echo: recorded"} and node.status == "completed"
    assert server_pids() == []


# -- stopping ----------------------------------------------------------------------------------
def test_no_server_outlives_its_stop() -> None:
    servers = McpServers([TIME, FLAKY])
    servers.tools()
    pids = server_pids()
    assert len(pids) == 2
    servers.stop()
    assert all(gone(pid) for pid in pids)


def test_no_server_outlives_its_process(tmp_path: Path) -> None:
    script = tmp_path / "uses_servers.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os
            from openprogram import create_runtime
            rt = create_runtime("test", mcp=[{TIME!r}, {FLAKY!r}])
            print(sorted(rt.mcp_tools()))
            print(" ".join(os.listdir("/proc/self/task")), flush=True)
            """
        )
    )
    ran = subprocess.run(
        [sys.executable, "-c", PRINT_CHILDREN.format(script=str(script))],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    pids = [int(p) for p in ran.stdout.split("children:")[1].split()]
    assert len(pids) == 2, ran.stdout
    assert all(gone(pid) for pid in pids), ran.stdout  # atexit stopped both


# runs the script in a child that reports its MCP servers' pids at the moment it exits
PRINT_CHILDREN = """
import atexit, os, runpy
from pathlib import Path
from openprogram.agent.proctree import descendants
def report():
    pids = [p for p in descendants(os.getpid())
            if b"mcp" in Path(f"/proc/{{p}}/cmdline").read_bytes()]
    print("children:", *pids, flush=True)
runpy.run_path({script!r})
atexit.register(report)  # registered after the servers' stop: runs before it
"""


# -- the command line ------------------------------------------------------------------------------
def test_chat_on_the_command_line_offers_an_mcp_servers_tools(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from openprogram.cli import main

    assert main(["chat", "--provider", "test", "--mcp", TIME, "-m", "What time is it?"]) == 0
    session_id = capsys.readouterr().out.split("session: ")[1].split()[0]
    [llm] = [n for n in default_db().open(session_id).nodes() if n.kind == "llm"]
    offered = [t["name"] for t in llm.metadata["request"]["tools"]]
    assert offered == ["get_current_time", "convert_time"]
    stop_every_server()  # what the command's process does at its exit
    assert server_pids() == []


def test_a_bad_mcp_option_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from openprogram.cli import main

    assert main(["chat", "--provider", "test", "--mcp", "no-command", "-m", "hi"]) != 0
    err = capsys.readouterr().err
    assert "NAME=COMMAND" in err and len(err.strip().splitlines()) == 1


# -- streamable HTTP, and two servers with a tool of the same name -------------------------------
def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_over_streamable_http_is_reached_by_its_url() -> None:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(HERE / "mcp_flaky_server.py"), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        for line in server.stderr:  # until uvicorn says it listens (or the server ended)
            if "Uvicorn running on" in line:
                break
        servers = McpServers([f"web=http://127.0.0.1:{port}/mcp"])
        tools = servers.tools()
        assert tools["echo"](text="over http") == {"result": "echo: over http"}
        assert tools["echo"].listed["inputSchema"]["required"] == ["text"]
        servers.stop()
    finally:
        server.terminate()
        server.wait()


def test_a_tool_name_two_servers_share_is_named_after_each_server() -> None:
    servers = McpServers(["a=mcp-server-time", "b=mcp-server-time --local-timezone UTC"])
    try:
        tools = servers.tools()
        assert sorted(tools) == [
            "a_convert_time",
            "a_get_current_time",
            "b_convert_time",
            "b_get_current_time",
        ]
        assert tools["b_get_current_time"](timezone="UTC")["timezone"] == "UTC"
        assert getattr(tools["a_get_current_time"], TOOL_SPEC)["name"] == "a_get_current_time"
    finally:
        servers.stop()
