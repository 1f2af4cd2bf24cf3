"""``runtime.exec`` returns what the model said (a ``Reply``) and runs tools itself (issue 20
items 3-4): in a script's ``session_context``, inside an agentic function, in a plain
``%%openprogram`` cell of a real IPython shell, and through the official OpenAI/Anthropic
SDKs against the loopback wire server.  Tools run with the model's exact arguments; the
nodes keep a redacted copy; the tool node hangs under the ``llm`` node that called it."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from helpers import Reply as Wire
from helpers import WireServer, wire_provider
from pydantic import BaseModel

from openprogram import agentic_function, ask_user, create_runtime, session_context
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.ask_user import using_ask_user_handler
from openprogram.agentic_programming.provider import Reply
from openprogram.agentic_programming.runtime import Runtime
from openprogram.context.nodes import Call
from openprogram.errors import ResponseFormatError, ToolArgumentsError, UserError
from openprogram.providers.base import LLMRequest, LLMResponse, ToolCall
from openprogram.providers.test import FunctionProvider, TestProvider
from tests.test_magics import Shell

TOKEN = "tok-9f8e7d6c5b4a-EXACT"
received: list[dict[str, Any]] = []


def login(user: str, token: str) -> str:
    """Log a user in with their token."""
    received.append({"user": user, "token": token})
    return f"welcome {user}"


def broken(path: str) -> str:
    """Read a file."""
    raise OSError(f"disk on fire at {path}")


def runtime(provider: Any, **kw: Any) -> Runtime:
    return create_runtime(provider, backoff=0.0, max_retries=0, **kw)


def scripted(*replies: Any) -> FunctionProvider:
    queue = list(replies)
    return FunctionProvider(lambda request: queue.pop(0))


def nodes_of(session_id: str) -> list[Call]:
    return default_db().open(session_id).nodes()


def calls_login() -> LLMResponse:
    return LLMResponse("", tool_calls=[ToolCall("c1", "login", {"user": "ada", "token": TOKEN})])


@pytest.fixture(autouse=True)
def _fresh(op_home: Path) -> None:
    received.clear()


# -- the reply value ----------------------------------------------------------------------------


def test_exec_returns_a_reply_that_is_the_text_and_carries_what_came_with_it() -> None:
    rt = runtime(TestProvider("Hello, Ada."))
    with session_context(runtime=rt) as h:
        reply = rt.exec("Greet Ada")
    assert reply == "Hello, Ada." and isinstance(reply, Reply) and isinstance(reply, str)
    assert type(str(reply)) is str and reply.text == "Hello, Ada."
    assert repr(reply) == "'Hello, Ada.'"  # a notebook shows it as the string it is
    assert (reply.finish_reason, reply.model, reply.iterations) == ("stop", "test", 1)
    assert reply.usage is not None and reply.usage.output_tokens == 2
    assert reply.tool_calls == () and reply.tool_runs == ()
    (llm,) = [n for n in nodes_of(h.session_id) if n.kind == "llm"]
    assert reply.node_id == llm.id and llm.output == "Hello, Ada."
    assert json.dumps({"r": reply}) == '{"r": "Hello, Ada."}'
    again = pickle.loads(pickle.dumps(reply))
    assert again == reply and again.node_id == reply.node_id and again.usage == reply.usage
    with pytest.raises(AttributeError, match="immutable"):
        reply.finish_reason = "changed"  # type: ignore[misc]


def test_json_tool_specs_are_only_sent_and_the_caller_gets_the_exact_calls() -> None:
    spec = {"name": "login", "parameters": {"type": "object", "properties": {}}}
    rt = runtime(scripted(calls_login()))
    with session_context(runtime=rt) as h:
        reply = rt.exec("log in", tools=[spec])
    assert reply.tool_calls == (ToolCall("c1", "login", {"user": "ada", "token": TOKEN}),)
    assert received == []  # nothing ran: the caller handles the calls of a spec
    (llm,) = [n for n in nodes_of(h.session_id) if n.kind == "llm"]
    assert llm.metadata["tool_calls"][0]["arguments"] == {"user": "ada", "token": "***"}


# -- bug (a): the tool gets the exact arguments -------------------------------------------------


def test_a_tool_receives_the_exact_token_and_the_stored_nodes_show_it_masked() -> None:
    provider = scripted(calls_login(), "You are logged in.")
    rt = runtime(provider)
    with session_context(runtime=rt) as h:
        reply = rt.exec("Log ada in", tools=[login])
    assert received == [{"user": "ada", "token": TOKEN}]
    assert reply == "You are logged in." and reply.iterations == 2
    (run,) = reply.tool_runs
    assert run.call.arguments["token"] == TOKEN and run.output == "welcome ada"
    nodes = nodes_of(h.session_id)
    first, second = [n for n in nodes if n.kind == "llm"]
    (tool,) = [n for n in nodes if n.kind == "tool"]
    assert tool.caller == first.id and run.node_id == tool.id  # under the llm node
    assert tool.input == {"user": "ada", "token": "***"} and tool.output == "welcome ada"
    assert first.metadata["tool_calls"] == [
        {"id": "c1", "name": "login", "arguments": {"user": "ada", "token": "***"}}
    ]
    stored = (Path(default_db().open(h.session_id).path)).rglob("*")
    assert not [p for p in stored if p.is_file() and TOKEN.encode() in p.read_bytes()]
    sent = provider.requests[1].messages
    assert {"role": "assistant", "content": "[called login]"} in sent
    assert "Earlier step: login(user='ada', token='***') -> welcome ada" in [
        m["content"] for m in sent
    ]
    assert second.status == "completed" and second.output == "You are logged in."


def test_the_chat_dispatcher_runs_the_same_loop_with_exact_arguments() -> None:
    from openprogram.agent import dispatcher as D

    rt = runtime(scripted(calls_login(), "done"))
    result = D.process_user_turn(D.TurnRequest(None, "log in", runtime=rt, tools={"login": login}))
    assert result.text == "done" and received == [{"user": "ada", "token": TOKEN}]
    nodes = {n.id: n for n in nodes_of(result.session_id)}
    (tool,) = [n for n in nodes.values() if n.kind == "tool"]
    assert tool.input["token"] == "***"
    assert nodes[tool.caller or ""].kind == "llm"
    assert nodes[tool.caller or ""].caller == result.reply_node_id


# -- the loop: bounds, errors, bad arguments, ask_user, agentic tools ---------------------------


def test_the_loop_ends_at_max_iterations_with_a_clear_status() -> None:
    def always_calls(request: LLMRequest) -> LLMResponse:  # ignores that no tools are offered
        return LLMResponse(
            "still busy", tool_calls=[ToolCall("c", "login", {"user": "x", "token": "t"})]
        )

    provider = FunctionProvider(always_calls)
    rt = runtime(provider)
    with session_context(runtime=rt) as h:
        reply = rt.exec("loop", tools=[login], max_iterations=3)
    assert [r.tools is None for r in provider.requests] == [False, False, True]
    assert [r.iteration for r in provider.requests] == [1, 2, 3]
    assert len(received) == 2 and len(reply.tool_runs) == 2  # the third call's calls never ran
    assert reply.finish_reason == "max_iterations" and reply.iterations == 3
    assert reply.tool_calls == (ToolCall("c", "login", {"user": "x", "token": "t"}),)
    assert "No more tools can be called" in provider.requests[-1].messages[-1]["content"]
    llms = [n for n in nodes_of(h.session_id) if n.kind == "llm"]
    assert [n.metadata.get("finish_reason") for n in llms] == [None, None, "max_iterations"]
    assert llms[-1].metadata["model_finish_reason"] is None
    assert [n.metadata.get("iteration") for n in llms] == [None, 2, 3]


def test_the_offline_test_provider_calls_tools_with_sampled_arguments() -> None:
    rt = runtime(TestProvider(tool_calls="sample"))
    with session_context(runtime=rt):
        reply = rt.exec("log in", tools=[login])
    assert received == [{"user": "a", "token": "a"}]  # built from the parameter schema
    assert reply == "[test reply] Earlier step: login(user='a', token='***') -> welcome a"
    forever = runtime(
        TestProvider(tool_calls=[("login", {"user": "u", "token": "t"})], tool_rounds=99)
    )
    with session_context(runtime=forever):
        capped = forever.exec("log in", tools=[login], max_iterations=2)
    assert capped.finish_reason == "max_iterations" and len(capped.tool_runs) == 1


def test_a_tool_that_raises_is_shown_to_the_model_which_can_answer() -> None:
    def model(request: LLMRequest) -> Any:
        if request.iteration == 1:
            return [ToolCall("c", "broken", {"path": "/data"})]
        errors = [m["content"] for m in request.messages if "OSError" in str(m["content"])]
        return f"I could not read it: {errors[-1].split('-> ', 1)[1]}"

    rt = runtime(FunctionProvider(model))
    with session_context(runtime=rt) as h:
        reply = rt.exec("read /data", tools=[broken])
    assert reply == "I could not read it: OSError: disk on fire at /data [error]"
    (run,) = reply.tool_runs
    assert run.error == "OSError: disk on fire at /data" and run.output is None
    (tool,) = [n for n in nodes_of(h.session_id) if n.kind == "tool"]
    assert tool.status == "error" and tool.metadata["error"] == "OSError: disk on fire at /data"


def test_bad_arguments_are_reported_back_and_the_tool_never_runs() -> None:
    provider = scripted(
        [ToolCall("c", "login", {"user": "ada"})],  # no token
        [ToolCall("d", "logout", {})],  # no such tool
        "sorry",
    )
    rt = runtime(provider)
    with session_context(runtime=rt):
        reply = rt.exec("log in", tools=[login])
    assert received == [] and reply == "sorry"
    shown = "\n".join(str(m["content"]) for m in provider.requests[2].messages)
    assert "ToolArgumentsError: bad arguments for tool 'login': token: Field required" in shown
    assert "no tool named 'logout'; the tools are ['login']" in shown
    assert [r.error is not None for r in reply.tool_runs] == [True, True]


def test_bad_arguments_are_sent_back_a_bounded_number_of_times() -> None:
    """Two rounds of bad arguments go back to the model to fix; the third ends the exec with
    a ToolArgumentsError naming the tool and the problem (every attempt a tool node)."""
    unreadable = ToolCall("c", "login", {}, "the arguments are not valid JSON: '{\"user\"'")
    provider = scripted(
        [ToolCall("a", "login", {"user": "ada"})],  # a missing key
        [unreadable],  # not JSON (as a provider reports it)
        [ToolCall("b", "login", {"user": "ada", "token": 7, "extra": 1})],  # wrong keys
        "never asked",
    )
    rt = runtime(provider)
    with session_context(runtime=rt) as h, pytest.raises(ToolArgumentsError) as info:
        rt.exec("log in", tools=[login])
    assert "bad arguments 3 times in a row (sent back 2 times to fix)" in str(info.value)
    assert "extra: not a parameter of login" in str(info.value)
    assert received == [] and len(provider.requests) == 3
    second = "\n".join(str(m["content"]) for m in provider.requests[1].messages)
    assert "token: Field required" in second
    third = "\n".join(str(m["content"]) for m in provider.requests[2].messages)
    assert "the arguments are not valid JSON" in third
    tools = [n for n in nodes_of(h.session_id) if n.kind == "tool"]
    assert [t.status for t in tools] == ["error"] * 3


def test_a_good_call_after_bad_arguments_starts_the_count_again() -> None:
    good = [ToolCall("g", "login", {"user": "ada", "token": TOKEN})]
    bad = [ToolCall("b", "login", {"user": "ada"})]
    provider = scripted(bad, bad, good, bad, bad, "done")
    rt = runtime(provider)
    with session_context(runtime=rt):
        reply = rt.exec("log in", tools=[login])
    assert reply == "done" and received == [{"user": "ada", "token": TOKEN}]
    assert [r.bad_arguments for r in reply.tool_runs] == [True, True, False, True, True]


def test_ask_user_inside_a_tool_is_asked_and_answered_as_elsewhere() -> None:
    def confirm(question: str) -> str:
        """Ask the user to confirm."""
        return str(ask_user(question, choices=["yes", "no"]))

    asked: list[str] = []

    def handler(question: str, choices: list[str] | None) -> str:
        asked.append(question)
        return "yes"

    rt = runtime(scripted([ToolCall("c", "confirm", {"question": "Delete it?"})], "deleted"))
    with session_context(runtime=rt) as h, using_ask_user_handler(handler):
        reply = rt.exec("delete the draft", tools=[confirm])
    assert asked == ["Delete it?"] and reply == "deleted" and reply.tool_runs[0].output == "yes"
    nodes = {n.id: n for n in nodes_of(h.session_id)}
    (question,) = [n for n in nodes.values() if n.kind == "ask_user"]
    assert question.status == "answered" and nodes[question.caller or ""].kind == "tool"


def test_exec_with_tools_inside_an_agentic_function_nests_an_agentic_tool() -> None:
    @agentic_function
    def lookup(word: str, runtime: Any = None) -> str:
        """Define the word in five words."""
        return str(runtime.exec(word))

    @agentic_function
    def explain(topic: str, runtime: Any = None) -> str:
        """Explain the topic, looking words up when needed."""
        return str(runtime.exec(topic, tools=[lookup], tool_choice="lookup"))

    provider = scripted([ToolCall("c", "lookup", {"word": "DAG"})], "a graph", "A DAG is a graph.")
    rt = runtime(provider)
    with session_context(runtime=rt) as h:
        assert explain("DAGs") == "A DAG is a graph."
    assert provider.requests[0].tool_choice == "lookup"
    assert provider.requests[0].tools == [
        {
            "name": "lookup",
            "description": "Define the word in five words.",
            "parameters": {
                "type": "object",
                "properties": {"word": {"type": "string"}},
                "required": ["word"],
            },
        }
    ]
    assert provider.requests[2].tool_choice is None  # the forced choice is the first call's
    assert provider.requests[1].messages[0]["content"] == "Define the word in five words."
    nodes = {n.id: n for n in nodes_of(h.session_id)}
    (inner,) = [n for n in nodes.values() if n.name == "lookup" and n.kind == "function"]
    tool = nodes[inner.caller or ""]  # lookup (function) < lookup (tool) < llm < explain
    assert (tool.kind, tool.name) == ("tool", "lookup")
    assert nodes[tool.caller or ""].kind == "llm"
    assert nodes[nodes[tool.caller or ""].caller or ""].name == "explain"


def test_bad_tool_arguments_to_exec_say_what_to_pass() -> None:
    rt = runtime(TestProvider())
    with session_context(runtime=rt):
        with pytest.raises(UserError, match="tool_choice='fly' is none of auto, none, required"):
            rt.exec("x", tools=[login], tool_choice="fly")
        with pytest.raises(UserError, match=r"\) or JSON specs, not both"):
            rt.exec("x", tools=[login, {"name": "spec"}])
        with pytest.raises(UserError, match="max_iterations must be at least 1"):
            rt.exec("x", tools=[login], max_iterations=0)
        with pytest.raises(UserError, match="takes a list of functions, got str"):
            rt.exec("x", tools="login")


# -- bug (b): ResponseFormatError names what was wrong ------------------------------------------


class Ticket(BaseModel):
    kind: str
    priority: int


def test_response_format_error_names_the_validation_problem() -> None:
    schema = Ticket.model_json_schema()
    rt = runtime(scripted('{"kind": "bug"}', '{"kind": "bug"}'), gate_attempts=2)
    with session_context(runtime=rt), pytest.raises(ResponseFormatError) as info:
        rt.exec("triage", response_format=schema)
    assert "'priority' is a required property" in str(info.value)
    assert info.value.problems == ["'priority' is a required property"] * 2
    rt = runtime(scripted("not json", '{"kind": "bug", "priority": "high"}'), gate_attempts=2)
    with session_context(runtime=rt), pytest.raises(ResponseFormatError) as info:
        rt.exec("triage", response_format=Ticket)
    assert "the reply is not valid JSON" in info.value.problems[0]
    assert "priority" in str(info.value) and "valid integer" in str(info.value)
    assert '{"kind": "bug"' not in str(info.value)  # the reply is not the problem


# -- a plain %%openprogram cell -----------------------------------------------------------------

CELL = '''%%openprogram
from openprogram import llm

def login(user: str, token: str) -> str:
    """Log a user in."""
    seen.append(token)
    return "welcome " + user

seen = []
reply = llm("Log ada in", tools=[login], max_iterations=2)
'''


def test_exec_with_tools_in_a_plain_cell(bare_shell: Shell) -> None:
    calls = [ToolCall("c", "login", {"user": "ada", "token": TOKEN})]
    bare_shell.use_runtime(FunctionProvider(lambda request: calls))  # always calls a tool
    bare_shell.run(CELL)
    ns = bare_shell.ip.user_ns
    assert ns["seen"] == [TOKEN]
    reply = ns["reply"]
    assert reply.finish_reason == "max_iterations" and reply.iterations == 2
    assert bare_shell.magics.turns.kernel_meta is not None
    nodes = {n.id: n for n in nodes_of(bare_shell.magics.turns.kernel_meta.session_id)}
    (tool,) = [n for n in nodes.values() if n.kind == "tool"]
    llm = nodes[tool.caller or ""]
    assert llm.kind == "llm" and nodes[llm.caller or ""].kind == "turn"
    assert tool.input == {"user": "ada", "token": "***"} and tool.output == "welcome ada"
    last = max((n for n in nodes.values() if n.kind == "llm"), key=lambda n: n.seq)
    assert last.metadata["finish_reason"] == "max_iterations"


# -- the official SDKs on the wire --------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
def test_the_loop_through_the_official_sdks(kind: str, streamed: bool, wire: WireServer) -> None:
    from openprogram.providers.network import allow_model_requests

    wire.reply(
        Wire(tool_calls=[("login", {"user": "ada", "token": TOKEN})], arg_chunk_size=4),
        Wire(text="Logged in.", chunks=["Logged ", "in."] if streamed else None),
    )
    model = {"model": "claude-wire-test"} if kind == "anthropic" else {}
    provider = wire_provider(kind, wire, api_key="sk-wire-KEY-1", timeout=5.0, **model)
    rt = runtime(provider)
    with allow_model_requests(True), session_context(runtime=rt) as h:
        reply = rt.exec("Log ada in", tools=[login], tool_choice="login", stream=streamed)
    assert reply == "Logged in." and received == [{"user": "ada", "token": TOKEN}]
    first, second = (r.body for r in wire.requests)
    forced = (
        {"type": "function", "function": {"name": "login"}}
        if kind == "openai"
        else {"type": "tool", "name": "login"}
    )
    assert first["tool_choice"] == forced  # the forced choice is the first call's only
    assert second.get("tool_choice") in (None, "auto", {"type": "auto"})
    assert "welcome ada" in json.dumps(second["messages"])
    (tool,) = [n for n in nodes_of(h.session_id) if n.kind == "tool"]
    assert tool.input["token"] == "***"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_arguments_that_are_not_json_go_back_to_the_model(kind: str, wire: WireServer) -> None:
    """A real SDK reply whose tool arguments are cut-off JSON does not end the turn: the
    model is shown the problem and its next call runs."""
    from openprogram.providers.network import allow_model_requests

    wire.reply(
        Wire(tool_calls=[("login", '{"user": "ada", "token": ')]),
        Wire(tool_calls=[("login", {"user": "ada", "token": TOKEN})]),
        Wire(text="Logged in."),
    )
    model = {"model": "claude-wire-test"} if kind == "anthropic" else {}
    rt = runtime(wire_provider(kind, wire, api_key="sk-wire-KEY-1", timeout=5.0, **model))
    with allow_model_requests(True), session_context(runtime=rt) as h:
        reply = rt.exec("Log ada in", tools=[login], stream=True)
    assert reply == "Logged in." and received == [{"user": "ada", "token": TOKEN}]
    assert "not valid JSON" in json.dumps(wire.requests[1].body["messages"])
    first, second = [n for n in nodes_of(h.session_id) if n.kind == "tool"]
    assert first.status == "error" and "not valid JSON" in first.metadata["error"]
    assert second.status == "completed"
