"""The OpenAI and Anthropic adapters, through the official SDKs, against a local wire server.

Nothing is mocked: each test scripts replies on a real HTTP server on 127.0.0.1 that speaks
the vendor's JSON and SSE wire format, and checks what a user of the provider would notice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers import Reply, WireServer, wire_provider
from waiting import until

from openprogram.errors import ModelRequestsBlocked
from openprogram.providers.anthropic_provider import DEFAULT_MAX_TOKENS as ANTHROPIC_MAX_TOKENS
from openprogram.providers.anthropic_provider import (
    AnthropicProvider,
    strip_code_fence,
    to_anthropic_messages,
)
from openprogram.providers.base import (
    LLMRequest,
    Provider,
    ProviderError,
    TransientProviderError,
)
from openprogram.providers.network import allow_model_requests
from openprogram.providers.openai_provider import DEFAULT_MAX_TOKENS, OpenAIProvider

KEY = "sk-test-SECRET-123"
DOC = "Summarize the text in one sentence. (docstring of summarize)"
KINDS = ["openai", "anthropic"]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}

# Index of the first text event in a stream (stall_after / die_after count SSE events):
# OpenAI sends a role chunk first; Anthropic message_start, content_block_start and a ping.
FIRST_TEXT = {"openai": 1, "anthropic": 3}

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_ADMIN_KEY",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_PROFILE",
        "ANTHROPIC_CUSTOM_HEADERS",
        "OPENPROGRAM_MODEL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "anthropic-config"))


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


_PROVIDERS: dict[tuple[Any, ...], Any] = {}


def make(kind: str, wire: WireServer, *, fresh: bool = False, **kwargs: Any) -> Any:
    """A provider for ``wire``; identical configurations share one (building an SDK client
    loads the CA bundle, ~40 ms, which would dominate this file's run time)."""
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("timeout", 5.0)
    if kind == "anthropic":  # a name the SDK has no deprecation warning for
        kwargs.setdefault("model", "claude-wire-test")
    key = (kind, wire.url, tuple(sorted(kwargs.items())))
    if not fresh and key in _PROVIDERS:
        provider = _PROVIDERS[key]
    else:
        provider = wire_provider(kind, wire, **kwargs)
    if kind == "openai":  # the wire server speaks OpenAI's own API, which streams tool calls
        provider.profile().stream_with_tools = True
    if not fresh:
        _PROVIDERS[key] = provider
    return provider


def ask(text: str = "Hello there", **kwargs: Any) -> LLMRequest:
    return LLMRequest(
        messages=[{"role": "system", "content": DOC}, {"role": "user", "content": text}],
        **kwargs,
    )


def no_key_anywhere(err: BaseException) -> None:
    rendered = "".join(traceback.format_exception(err))
    assert KEY not in rendered
    assert KEY not in repr(err)
    assert err.__cause__ is None and err.__context__ is None  # no chain to the SDK's request


# -- plain replies and request bodies ----------------------------------------------------------


def test_both_satisfy_the_provider_protocol() -> None:
    assert isinstance(OpenAIProvider(api_key=KEY), Provider)
    assert isinstance(AnthropicProvider(api_key=KEY), Provider)
    assert OpenAIProvider(api_key=KEY).name == "openai"
    assert AnthropicProvider(api_key=KEY).name == "anthropic"


def test_plain_reply(kind: str, wire: WireServer) -> None:
    wire.reply(Reply(text="A short summary.", model="wire-model-2025", usage=(42, 9)))
    response = make(kind, wire).complete(ask())
    assert response.text == "A short summary."
    assert response.usage is not None and response.usage.to_dict() == {
        "input_tokens": 42,
        "output_tokens": 9,
    }
    assert response.model == "wire-model-2025"  # what the server says it ran, not what we asked
    assert response.finish_reason == ("stop" if kind == "openai" else "end_turn")
    assert response.tool_calls == []
    [recorded] = wire.requests
    assert recorded.path == ("/v1/chat/completions" if kind == "openai" else "/v1/messages")


def test_default_model_comes_from_env(
    kind: str, wire: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls: Any = OpenAIProvider if kind == "openai" else AnthropicProvider
    assert cls(api_key=KEY).model == ("gpt-4o-mini" if kind == "openai" else "claude-sonnet-4-6")
    monkeypatch.setenv("OPENPROGRAM_MODEL", "my-local-model")
    wire.reply(Reply(text="ok"))
    provider = make(kind, wire, fresh=True, model=None)
    provider.complete(ask())
    assert provider.model == "my-local-model"
    assert wire.requests[0].body["model"] == "my-local-model"
    wire.reply(Reply(text="ok"))
    make(kind, wire, model="explicit").complete(ask(model="per-request"))
    assert wire.requests[1].body["model"] == "per-request"


def test_openai_messages_go_through_unchanged(wire: WireServer) -> None:
    wire.reply(Reply(text="ok"))
    messages = [
        {"role": "system", "content": DOC},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "second"},
    ]
    make("openai", wire).complete(LLMRequest(messages=messages, max_tokens=50, temperature=0.2))
    body = wire.requests[0].body
    assert body["messages"] == messages
    assert json.dumps(body).count(DOC) == 1  # the docstring is sent exactly once
    assert body["max_tokens"] == 50  # compatible servers understand max_tokens
    assert body["temperature"] == 0.2
    assert "stream" not in body and "tools" not in body and "response_format" not in body


def test_anthropic_system_prompt_once_and_turns_alternate(wire: WireServer) -> None:
    wire.reply(Reply(text="ok"))
    messages = [
        {"role": "system", "content": DOC},
        {"role": "user", "content": "earlier turn"},
        {"role": "user", "content": "more context"},
        {"role": "assistant", "content": "earlier answer"},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "now this"},
    ]
    make("anthropic", wire).complete(LLMRequest(messages=messages))
    body = wire.requests[0].body
    assert body["system"] == f"{DOC}\n\nBe brief."
    assert json.dumps(body).count(DOC) == 1  # as `system`, not also in messages
    assert body["messages"] == [
        {"role": "user", "content": "earlier turn\n\nmore context"},
        {"role": "assistant", "content": "earlier answer"},
        {"role": "user", "content": "now this"},
    ]
    assert body["max_tokens"] == 4096


def test_anthropic_message_mapping_edge_cases() -> None:
    # A leading assistant turn gets a user turn in front; tool traffic becomes blocks.
    turns = to_anthropic_messages(
        [
            {
                "role": "assistant",
                "content": "I will check.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "user", "content": "and tomorrow?"},
        ]
    )
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[0] == {"role": "user", "content": "Continue."}
    assert turns[1]["content"][1] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "get_weather",
        "input": {"city": "Oslo"},
    }
    assert turns[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
        {"type": "text", "text": "and tomorrow?"},
    ]
    assert to_anthropic_messages([{"role": "system", "content": "x"}]) == [
        {"role": "user", "content": "Continue."}
    ]


# -- streaming ---------------------------------------------------------------------------------


def test_streamed_reply_calls_on_delta_per_chunk(kind: str, wire: WireServer) -> None:
    chunks = ["The ", "text is ", "about ", "wire protocols."]
    wire.reply(Reply(chunks=chunks, model="wire-stream", usage=(30, 12)))
    seen: list[str] = []
    response = make(kind, wire).complete(ask(), on_delta=seen.append)
    assert seen == chunks
    assert response.text == "".join(chunks)
    assert response.model == "wire-stream"
    assert response.usage is not None and response.usage.to_dict() == {
        "input_tokens": 30,
        "output_tokens": 12,
    }
    body = wire.requests[0].body
    assert body["stream"] is True
    if kind == "openai":
        assert body["stream_options"] == {"include_usage": True}  # else no usage in a stream


def test_stream_flag_without_callback_streams(kind: str, wire: WireServer) -> None:
    wire.reply(Reply(chunks=["a", "b"]))
    response = make(kind, wire).complete(ask(stream=True))
    assert response.text == "ab"
    assert wire.requests[0].body["stream"] is True


# -- tools -------------------------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
def test_tool_call_is_parsed(kind: str, wire: WireServer, streamed: bool) -> None:
    args = {"city": "Zürich", "days": [1, 2], "note": 'quote " and, comma'}
    wire.reply(
        Reply(
            text="Let me look." if not streamed else "",
            chunks=["Let me ", "look."] if streamed else None,
            tool_calls=[("get_weather", args), ("noop", {})],
            arg_chunk_size=5,
        )
    )
    seen: list[str] = []
    response = make(kind, wire).complete(
        ask(tools=[WEATHER_TOOL]), on_delta=seen.append if streamed else None
    )
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("get_weather", args),
        ("noop", {}),
    ]
    assert all(c.id for c in response.tool_calls)
    assert response.text == "Let me look."
    assert response.finish_reason == ("tool_calls" if kind == "openai" else "tool_use")
    sent = wire.requests[0].body["tools"]
    if kind == "openai":
        assert sent == [{"type": "function", "function": WEATHER_TOOL}]
    else:
        assert sent == [
            {
                "name": "get_weather",
                "description": "Weather for a city",
                "input_schema": WEATHER_TOOL["parameters"],
            }
        ]


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
def test_openai_tool_arguments_that_are_not_json(wire: WireServer, streamed: bool) -> None:
    """Unreadable arguments are not an error of the reply: the call names the problem (the
    tool loop sends it back for the model to fix)."""
    wire.reply(Reply(tool_calls=[("get_weather", '{"city": "Oslo"')]))
    response = make("openai", wire).complete(ask(stream=streamed, tools=[WEATHER_TOOL]))
    (call,) = response.tool_calls
    assert call.name == "get_weather" and call.arguments == {}
    assert call.problem is not None and "not valid JSON" in call.problem


def test_anthropic_streamed_tool_input_that_is_not_json(wire: WireServer) -> None:
    wire.reply(Reply(tool_calls=[("get_weather", '{"city": ')]))
    response = make("anthropic", wire).complete(ask(stream=True, tools=[WEATHER_TOOL]))
    (call,) = response.tool_calls
    assert call.arguments == {} and "not valid JSON" in (call.problem or "")


# -- response_format ---------------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}


def test_openai_response_format_is_a_json_schema(wire: WireServer) -> None:
    wire.reply(Reply(text='{"summary": "short"}'))
    response = make("openai", wire).complete(ask(response_format=SCHEMA))
    assert json.loads(response.text) == {"summary": "short"}
    assert wire.requests[0].body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": SCHEMA, "strict": False},
    }


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
def test_anthropic_response_format_is_instructed_in_system(
    wire: WireServer, streamed: bool
) -> None:
    wire.reply(
        Reply(
            text='```json\n{"summary": "short"}\n```',
            chunks=["```json\n", '{"summary": ', '"short"}', "\n```"],
        )
    )
    response = make("anthropic", wire).complete(ask(response_format=SCHEMA, stream=streamed))
    assert json.loads(response.text) == {"summary": "short"}  # fence stripped
    system = wire.requests[0].body["system"]
    assert system.startswith(DOC) and system.count(DOC) == 1
    assert "JSON" in system and '"summary"' in system and '"required"' in system


def test_strip_code_fence_leaves_plain_text_alone() -> None:
    assert strip_code_fence('{"a": 1}') == '{"a": 1}'
    assert strip_code_fence("```\n[1, 2]\n```") == "[1, 2]"
    assert strip_code_fence("see ```x``` here") == "see ```x``` here"


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "transient"),
    [(429, True), (500, True), (503, True), (400, False), (401, False), (404, False)],
)
def test_http_errors_map_to_provider_errors(
    kind: str, wire: WireServer, status: int, transient: bool
) -> None:
    # A misbehaving proxy that echoes the key in its error body must not leak it either.
    wire.reply(Reply(status=status, error_message=f"Incorrect API key provided: {KEY}"))
    with pytest.raises(ProviderError) as info:
        make(kind, wire).complete(ask())
    err = info.value
    assert isinstance(err, TransientProviderError) is transient
    assert str(status) in str(err)
    assert "Incorrect API key provided: ***" in str(err)  # the server's reason, redacted
    if status == 401:
        assert "authentication failed" in str(err)
    no_key_anywhere(err)
    assert len(wire.requests) == 1  # the SDK's own retries are off; the Runtime retries


def test_anthropic_overloaded_529_is_transient(wire: WireServer) -> None:
    wire.reply(Reply(status=529, error_message="Overloaded"))
    with pytest.raises(TransientProviderError, match="529"):
        make("anthropic", wire).complete(ask())


def test_error_in_stream_after_it_started(kind: str, wire: WireServer) -> None:
    error_type = "server_error" if kind == "openai" else "overloaded_error"
    wire.reply(
        Reply(
            chunks=["partial ", "answer"],
            error_event_after=2,
            error_type=error_type,
            error_message="Overloaded",
        )
    )
    with pytest.raises(TransientProviderError, match="Overloaded") as info:
        make(kind, wire).complete(ask(), on_delta=lambda _: None)
    no_key_anywhere(info.value)
    wire.reply(Reply(chunks=["x"], error_event_after=1, error_type="invalid_request_error"))
    with pytest.raises(ProviderError) as info2:
        make(kind, wire).complete(ask(stream=True))
    assert not isinstance(info2.value, TransientProviderError)


def test_slow_server_times_out_promptly(kind: str, wire: WireServer) -> None:
    # the server answers only after the module's timeout: a provider that did not give up
    # would get "too late" (or be stopped by the timeout), never this error
    wire.reply(Reply(text="too late", delay=60))
    with pytest.raises(TransientProviderError, match="timed out") as info:
        make(kind, wire, timeout=0.2).complete(ask())
    no_key_anywhere(info.value)


def test_per_request_timeout_overrides_the_provider_default(kind: str, wire: WireServer) -> None:
    wire.reply(Reply(text="too late", delay=60))  # (after the module's timeout)
    with pytest.raises(TransientProviderError):
        make(kind, wire, timeout=60).complete(ask(timeout=0.2))


def test_stream_that_stalls_times_out(kind: str, wire: WireServer) -> None:
    wire.reply(  # a stall longer than the module's timeout: only the provider's ends it
        Reply(chunks=["one ", "two ", "three"], stall_after=FIRST_TEXT[kind] + 1, stall_for=60)
    )
    seen: list[str] = []
    with pytest.raises(TransientProviderError, match="timed out"):
        make(kind, wire, timeout=0.2).complete(ask(), on_delta=seen.append)
    assert seen  # some text arrived before the stall
    assert until(lambda: wire.hangups == 1)  # and the connection was closed


def test_stream_that_dies_midway_is_an_error_not_a_hang(kind: str, wire: WireServer) -> None:
    wire.reply(Reply(chunks=["one ", "two ", "three ", "four"], die_after=4))
    with pytest.raises(TransientProviderError, match="connection") as info:  # (a hang: timeout)
        make(kind, wire).complete(ask(), on_delta=lambda _: None)
    no_key_anywhere(info.value)


def test_stream_that_ends_before_the_final_event(kind: str, wire: WireServer) -> None:
    # The HTTP body ends cleanly, but without finish_reason / message_stop.
    wire.reply(Reply(chunks=["one ", "two ", "three ", "four"], end_after=3))
    with pytest.raises(TransientProviderError, match="ended before"):
        make(kind, wire).complete(ask(), on_delta=lambda _: None)


def test_ctrl_c_in_on_delta_propagates_and_provider_still_works(
    kind: str, wire: WireServer
) -> None:
    # After the first text the server stalls past the module's timeout: if the provider did
    # not close the stream on KeyboardInterrupt, or the next request reused that connection,
    # this would hang.
    wire.reply(
        Reply(chunks=["one ", "two ", "three"], stall_after=FIRST_TEXT[kind] + 1, stall_for=60)
    )
    provider = make(kind, wire, fresh=True)

    def interrupt(chunk: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        provider.complete(ask(), on_delta=interrupt)
    assert until(lambda: wire.hangups == 1)  # the provider closed the stream
    wire.reply(Reply(chunks=["fine ", "again"]))
    seen: list[str] = []
    response = provider.complete(ask(), on_delta=seen.append)
    assert response.text == "fine again" and seen == ["fine ", "again"]
    assert len(wire.requests) == 2


# -- keys, network switch, imports -------------------------------------------------------------


def test_api_key_is_sent_only_as_the_auth_header(kind: str, wire: WireServer) -> None:
    wire.reply(Reply(text="hi"), Reply(chunks=["h", "i"], tool_calls=[("noop", {})]))
    provider = make(kind, wire, fresh=True)
    responses = [provider.complete(ask()), provider.complete(ask(), on_delta=lambda _: None)]
    for recorded in wire.requests:
        carrying = [name for name, value in recorded.headers.items() if KEY in value]
        assert len(carrying) == 1 and carrying[0] in ("authorization", "x-api-key")
        if carrying[0] == "authorization":
            assert recorded.headers["authorization"] == f"Bearer {KEY}"
        assert KEY.encode() not in recorded.raw and KEY not in recorded.path
    for response in responses:
        assert KEY not in repr(response)
    assert KEY not in repr(provider) and KEY not in str(provider)
    assert wire.url in repr(provider)


def test_local_server_without_key_gets_a_placeholder(
    kind: str, wire: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ollama / vLLM / LM Studio: only a base URL, from the environment, no key anywhere.
    monkeypatch.setenv("OPENPROGRAM_MODEL", "local-model")
    if kind == "openai":
        monkeypatch.setenv("OPENAI_BASE_URL", wire.openai_base_url)
        provider: Any = OpenAIProvider(timeout=5)
    else:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", wire.anthropic_base_url)
        provider = AnthropicProvider(timeout=5)
    wire.reply(Reply(text="local"))
    assert provider.complete(ask()).text == "local"
    assert wire.url in provider.base_url
    headers = wire.requests[0].headers  # anthropic < 2 sends the key as x-api-key
    assert "not-needed" in headers.get("authorization", headers.get("x-api-key", ""))


def test_blocked_switch_stops_remote_requests_before_sending(kind: str, wire: WireServer) -> None:
    try:
        remote = WireServer(host="127.0.0.2")  # loopback to the kernel, not to network.py
    except OSError:
        pytest.skip("cannot bind 127.0.0.2 here")
    with remote:
        remote.reply(Reply(text="should not be reached"))
        blocked = make(kind, remote, fresh=True)
        with allow_model_requests(False):
            with pytest.raises(ModelRequestsBlocked):
                blocked.complete(ask())
            with pytest.raises(ModelRequestsBlocked):  # the vendor's default endpoint
                (OpenAIProvider if kind == "openai" else AnthropicProvider)(api_key=KEY).complete(
                    ask()
                )
            assert remote.requests == []
            wire.reply(Reply(text="local is fine"))
            assert make(kind, wire).complete(ask()).text == "local is fine"
        with allow_model_requests(True):  # proves the test would have seen a leak
            assert blocked.complete(ask()).text == "should not be reached"
        assert len(remote.requests) == 1


def test_importing_the_providers_does_not_import_the_sdks() -> None:
    code = (
        "import sys\n"
        "import openprogram.providers.openai_provider\n"
        "import openprogram.providers.anthropic_provider\n"
        "assert 'openai' not in sys.modules and 'anthropic' not in sys.modules\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 0, done.stderr


def test_wire_server_without_a_scripted_reply_answers_500(wire: WireServer) -> None:
    with pytest.raises(TransientProviderError, match="no scripted reply"):
        make("openai", wire).complete(ask())


class EndlessStream(BaseHTTPRequestHandler):
    """A model server that ignores max_tokens: its chat-completions stream never ends (one
    token a chunk, no finish_reason) until the client hangs up or the test is over."""

    server: EndlessServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.server.script is not None:  # a reply that ends: these chunks, then [DONE]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for piece in [*self.server.script, "[DONE]"]:
                self.wfile.write(
                    f"data: {json.dumps(piece) if piece != '[DONE]' else piece}\n\n".encode()
                )
            return
        if self.path == "/v1/chat/completions":
            chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
            role = {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}
            token = {**chunk, "choices": [{"index": 0, "delta": {"content": self.server.token}}]}
            head, line = f"data: {json.dumps(role)}\n\n", f"data: {json.dumps(token)}\n\n"
        elif self.path == "/v1/messages":
            usage = {"input_tokens": 3, "output_tokens": 1}
            message = {"id": "m", "type": "message", "role": "assistant", "model": "m"}
            start = {"type": "message_start", "message": {**message, "content": [], "usage": usage}}
            block = {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            }
            text = {"type": "text_delta", "text": self.server.token}
            delta = {"type": "content_block_delta", "index": 0, "delta": text}
            head = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in (start, block))
            line = f"event: content_block_delta\ndata: {json.dumps(delta)}\n\n"
        else:  # /tokenize and the like: not served
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()  # HTTP/1.0: the body runs until the connection closes
        try:
            self.wfile.write(head.encode())
            data = line.encode()
            while not self.server.over.is_set():
                self.wfile.write(data)
        except ConnectionError:
            self.server.hung_up.set()


class EndlessServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, token: str, script: list[Any] | None = None) -> None:
        super().__init__(("127.0.0.1", 0), EndlessStream)
        self.token = token  # what each chunk says
        self.script = script  # else: a chat-completions stream of these chunks, which ends
        self.over = threading.Event()  # the test is over: the stream ends (unfinished)
        self.hung_up = threading.Event()  # the client closed the connection mid-stream


@pytest.fixture(params=["tok ", "x" * 4096])
def endless(request: pytest.FixtureRequest) -> Iterator[EndlessServer]:
    server = EndlessServer(request.param)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    yield server
    server.over.set()
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize("kind", KINDS)
def test_a_server_that_streams_for_ever_is_cut_at_max_tokens(
    endless: EndlessServer, kind: str
) -> None:
    url, limit = f"http://127.0.0.1:{endless.server_address[1]}", DEFAULT_MAX_TOKENS
    if kind == "openai":
        provider: Any = OpenAIProvider(base_url=f"{url}/v1", api_key=KEY, timeout=5.0)
    else:  # Anthropic's own stream: events around the content's pieces
        provider = AnthropicProvider(base_url=url, api_key=KEY, timeout=5.0, model="claude-x")
        limit = ANTHROPIC_MAX_TOKENS
    shown: list[str] = []
    ended: dict[str, Any] = {}

    def call() -> None:  # a local server's long reply is streamed (default max_tokens 1024)
        try:
            ended["reply"] = provider.complete(ask(stream=True), on_delta=shown.append)
        except BaseException as exc:
            ended["error"] = exc

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(60)  # before: never returned (only Ctrl-C ended the call)
    assert not caller.is_alive(), f"still reading after {len(shown)} pieces"
    reply = ended["reply"]
    # ended as a reply cut at max_tokens ends
    assert reply.finish_reason == {"openai": "length", "anthropic": "max_tokens"}[kind]
    assert reply.metadata["stream_cut"] == (
        f"the server sent more than max_tokens={limit} allows; the stream was cut"
    )
    if endless.token == "tok ":  # more chunks than max_tokens allows
        assert limit <= len(shown) <= limit + 16
    else:  # far more characters than max_tokens tokens could hold
        assert len(shown) == limit * 64 // 4096 + 1
    assert reply.text == endless.token * len(shown)
    # never the count sent at the start (1 token): unknown, so the runtime estimates the text
    assert reply.usage is None or reply.usage.output_tokens >= len(shown)
    assert endless.hung_up.wait(60)  # the connection was closed, so the server stops


def test_a_reply_within_max_tokens_is_never_cut() -> None:
    """One chunk per token of 25 parallel tool calls' arguments (100 tokens, max_tokens 100),
    besides a header chunk per call, the role, the finish and the usage: 128 chunks, none
    of them a token too many."""
    base = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def piece(i: int, **function: str) -> dict[str, Any]:
        head = {"id": f"call_{i}", "type": "function"} if "name" in function else {}
        return chunk({"tool_calls": [{"index": i, **head, "function": function}]})

    script = [chunk({"role": "assistant", "content": ""})]
    for i in range(25):
        script.append(piece(i, name="get_weather", arguments=""))
        script += [piece(i, arguments=part) for part in ('{"city"', ': "', f"c{i}", '"}')]
    usage = {"prompt_tokens": 10, "completion_tokens": 100, "total_tokens": 110}
    script += [chunk({}, "tool_calls"), {**base, "choices": [], "usage": usage}]
    server = EndlessServer("", script)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        provider = OpenAIProvider(base_url=url, api_key=KEY, timeout=5.0)
        provider.profile().stream_with_tools = True  # (OpenAI's own API streams tool calls)
        reply = provider.complete(ask(stream=True, max_tokens=100, tools=[WEATHER_TOOL]))
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert (reply.finish_reason, reply.metadata.get("stream_cut")) == ("tool_calls", None)
    assert [c.arguments for c in reply.tool_calls] == [{"city": f"c{i}"} for i in range(25)]
    assert reply.usage is not None and reply.usage.output_tokens == 100
