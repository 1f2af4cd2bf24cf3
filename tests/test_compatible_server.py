"""An OpenAI-compatible server (Ollama, vLLM, LM Studio, llama-cpp-python) named only by its
base URL: the model it serves is learnt and recorded, a long reply streams so a slow server
is not taken for a dead one, a request given up on is hung up before it is asked again, and
the request timeout is a setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import Reply, WireServer

from openprogram import create_runtime, session_context
from openprogram.agent.session_db import default_db
from openprogram.errors import UserError
from openprogram.providers.openai_provider import OpenAIProvider
from openprogram.providers.sdk import request_timeout


@pytest.fixture(autouse=True)
def _only_a_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENPROGRAM_MODEL", "OPENPROGRAM_TIMEOUT", "OPENPROGRAM_MAX_TOKENS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENPROGRAM_ALLOW_MODEL_REQUESTS", "0")  # loopback only


def provider(wire: WireServer, **options: object) -> OpenAIProvider:
    return OpenAIProvider(base_url=wire.openai_base_url, api_key="sk-local", **options)  # type: ignore[arg-type]


def llm_models(session_id: str) -> list[str]:
    nodes = default_db().open(session_id).nodes()
    return [n.metadata.get("model") for n in nodes if n.kind == "llm"]


def test_only_a_base_url_sends_and_records_the_servers_model(
    wire: WireServer, op_home: Path
) -> None:
    wire.served = ["smollm2"]
    wire.reply(Reply(text="one"), Reply(text="two"))
    runtime = create_runtime(provider(wire))
    with session_context(runtime=runtime) as handle:
        runtime.exec("first", max_tokens=16)
        runtime.exec("second", max_tokens=16)
    assert [r.body["model"] for r in wire.requests] == ["smollm2", "smollm2"]
    assert llm_models(handle.session_id) == ["smollm2", "smollm2"]  # not gpt-4o-mini
    assert wire.model_lists == 1  # learnt once per server


def test_a_server_listing_several_models_asks_the_user_to_choose(
    wire: WireServer, op_home: Path
) -> None:
    wire.served = ["llama3.2", "qwen2.5", "phi4"]
    runtime = create_runtime(provider(wire))
    with session_context(runtime=runtime), pytest.raises(UserError) as caught:
        runtime.exec("hello", max_tokens=16)
    said = str(caught.value)
    assert "serves 3 models (llama3.2, qwen2.5, phi4)" in said and "--model" in said
    assert wire.requests == []  # nothing was sent under a name the server does not serve


def test_a_chosen_model_is_sent_as_chosen_and_nothing_is_listed(
    wire: WireServer, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire.served = ["smollm2"]
    monkeypatch.setenv("OPENPROGRAM_MODEL", "my-model")
    wire.reply(Reply(text="ok"))
    runtime = create_runtime(provider(wire))
    with session_context(runtime=runtime):
        runtime.exec("hello", max_tokens=16)
    assert wire.requests[0].body["model"] == "my-model" and wire.model_lists == 0


def test_a_server_without_a_model_list_gets_the_default_name(
    wire: WireServer, op_home: Path
) -> None:
    wire.reply(Reply(text="ok"))  # GET /models answers 404
    runtime = create_runtime(provider(wire))
    with session_context(runtime=runtime):
        runtime.exec("hello", max_tokens=16)
    assert wire.requests[0].body["model"] == "gpt-4o-mini" and wire.model_lists == 1


def test_a_long_reply_streams_and_outlives_the_timeout(wire: WireServer, op_home: Path) -> None:
    """A slow server sending a long answer, a piece at a time, for longer in all than the
    request timeout: the reply arrives whole (the timeout is a silence, not a duration)."""
    pieces = [f"w{i} " for i in range(30)]
    wire.reply(Reply(chunks=pieces, pace=0.1))  # ~3 s in all, a piece every 0.1 s
    runtime = create_runtime(provider(wire, timeout=1.5), max_retries=0)
    with session_context(runtime=runtime):
        reply = runtime.exec("write a lot")  # default max_tokens: a long reply may come
    assert str(reply) == "".join(pieces)
    assert wire.requests[0].body["stream"] is True


def test_a_short_reply_comes_whole_with_the_servers_usage(wire: WireServer, op_home: Path) -> None:
    wire.reply(Reply(text="yes", usage=(21, 1)))
    runtime = create_runtime(provider(wire))
    with session_context(runtime=runtime):
        reply = runtime.exec("yes or no?", max_tokens=8)
    assert "stream" not in wire.requests[0].body
    assert reply.usage is not None and reply.usage.input_tokens == 21


def test_a_retry_hangs_up_on_the_answer_it_gave_up_on(wire: WireServer, op_home: Path) -> None:
    """The first answer stops coming (the server is still 'generating' it); the retry is
    sent only after the abandoned stream was closed, so a server that serves one request
    at a time stops generating it instead of making the retry wait behind it."""
    wire.reply(Reply(chunks=["a ", "b "], stall_after=1, stall_for=60), Reply(text="fine"))
    runtime = create_runtime(provider(wire, timeout=0.5), max_retries=1, backoff=0.0)
    with session_context(runtime=runtime):
        reply = runtime.exec("go")
    assert str(reply) == "fine"
    assert len(wire.requests) == 2 and all(r.body["stream"] is True for r in wire.requests)
    assert wait_for(lambda: wire.hangups == 1)  # the stalled answer saw the client leave


def wait_for(condition: object, polls: int = 3000) -> bool:
    import threading

    tick = threading.Event()
    for _ in range(polls):
        if condition():  # type: ignore[operator]
            return True
        tick.wait(0.01)
    return False


def test_the_request_timeout_is_a_setting(
    wire: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert request_timeout({}) == 120.0
    assert request_timeout({"OPENPROGRAM_TIMEOUT": "600"}) == 600.0
    for bad in ("0", "-5", "soon", "nan", "inf"):
        with pytest.raises(UserError, match="OPENPROGRAM_TIMEOUT"):
            request_timeout({"OPENPROGRAM_TIMEOUT": bad})
    monkeypatch.setenv("OPENPROGRAM_TIMEOUT", "450")
    assert provider(wire).timeout == 450.0
    assert provider(wire, timeout=30).timeout == 30.0  # an explicit one wins
    assert create_runtime(provider(wire), timeout=90).timeout == 90.0  # per request
