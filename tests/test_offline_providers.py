"""The offline providers (public API, not test hacks) and ``create_runtime()`` resolution."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from openprogram import agentic_function, create_runtime, session_context
from openprogram.agentic_programming.runtime import Runtime
from openprogram.errors import NoProviderConfigured, ReplayMiss, UserError
from openprogram.providers import create_provider
from openprogram.providers.base import LLMRequest, LLMResponse, ProviderError, Usage
from openprogram.providers.replay import ReplayProvider
from openprogram.providers.test import FunctionProvider, TestProvider


@agentic_function
def answer(question: str, runtime: Runtime | None = None, **options: Any) -> Any:
    """Answer the question briefly."""
    assert runtime is not None
    return runtime.exec(question, **options)


class Plan(BaseModel):
    title: str
    steps: list[str]
    days: int


# -- test ----------------------------------------------------------------------------------
def test_test_provider_is_deterministic_and_records_requests():
    replies = []
    providers = [TestProvider(), TestProvider()]
    for provider in providers:
        with session_context(runtime=create_runtime(provider)):
            replies.append([answer("what is 2+2?"), answer("and 3+3?")])
    assert replies[0] == replies[1] == ["[test reply] what is 2+2?", "[test reply] and 3+3?"]
    first, second = providers[0].requests
    assert providers[0].last_request is second
    assert first.messages[0] == {"role": "system", "content": "Answer the question briefly."}
    assert first.model == "test" and second.messages[-1]["content"] == "and 3+3?"
    assert TestProvider.__test__ is False


def test_test_provider_is_schema_and_choice_aware():
    provider = TestProvider(reply="fixed reply")
    with session_context(runtime=create_runtime(provider)):
        assert answer("pick", choices=["red", "green"]) == "red"
        plan = answer("plan it", response_format=Plan)
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        assert answer("count", response_format=schema) == {"n": 0}
        assert answer("say something") == "fixed reply"
    assert isinstance(plan, Plan) and plan.steps == ["a"]
    assert provider.requests[1].response_format == Plan.model_json_schema()


def test_test_provider_streams_and_reports_usage():
    provider = TestProvider(reply="one two three")
    chunks: list[str] = []
    response = provider.complete(
        LLMRequest(messages=[{"role": "user", "content": "count to three"}]), chunks.append
    )
    assert "".join(chunks).strip() == "one two three"
    assert response.usage == Usage(3, 3) and response.finish_reason == "stop"


# -- function ------------------------------------------------------------------------------
def test_function_provider_is_driven_by_a_callable():
    def decide(request: LLMRequest) -> str | LLMResponse:
        last = str(request.messages[-1]["content"])
        if last.startswith("usage"):
            return LLMResponse(text="with usage", usage=Usage(5, 2))
        return last.upper()

    provider = FunctionProvider(decide)
    with session_context(runtime=create_runtime(provider)) as handle:
        assert answer("shout this") == "SHOUT THIS"
        assert answer("usage please") == "with usage"
    assert len(provider.requests) == 2 and provider.name == "function"
    from openprogram.store.session.store import SessionStore

    store = SessionStore(handle.db.home)
    llms = [n for n in store.open(handle.session_id).nodes() if n.kind == "llm"]
    store.close()
    assert llms[1].metadata["usage"] == {"input_tokens": 5, "output_tokens": 2}
    assert llms[0].metadata["model"] == "function"


# -- replay --------------------------------------------------------------------------------
def record_session() -> str:
    replies = iter(["first answer", "second answer", "third answer"])
    provider = FunctionProvider(lambda _request: next(replies))
    with session_context(runtime=create_runtime(provider)) as handle:
        answer("q1")
        answer("q2")
        answer("q1")  # the same content twice: replayed in order
    return handle.session_id


def test_replay_answers_from_a_recorded_session_in_order():
    recorded = record_session()
    replay = create_runtime(ReplayProvider(recorded))
    with session_context(runtime=replay):
        assert answer("q1") == "first answer"
        assert answer("q2") == "second answer"
        assert answer("q1") == "third answer"
        # a fourth call was never recorded: the error names the function and shows how
        # its prompt (three earlier steps) differs from the closest recorded one
        with pytest.raises(ReplayMiss, match=r"LLM call 1 of function answer") as miss:
            answer("q1")
        shown = "+user: Earlier, answer was called with question='q1' and returned 'third answer'"
        assert shown in str(miss.value)  # the earlier step the closest recording lacked
        with pytest.raises(
            ProviderError, match=r"(?s)LLM call 1 of function answer.*real provider"
        ):
            answer("never-asked")


def test_replay_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    recorded = record_session()
    monkeypatch.setenv("OPENPROGRAM_PROVIDER", "replay")
    monkeypatch.setenv("OPENPROGRAM_REPLAY_SESSION", recorded)
    with session_context() as handle:
        assert handle.runtime is not None and handle.runtime.provider is not None
        assert handle.runtime.provider.name == "replay"
        assert answer("q1") == "first answer"
        assert answer("q2") == "second answer"
    monkeypatch.delenv("OPENPROGRAM_REPLAY_SESSION")
    with pytest.raises(UserError, match="OPENPROGRAM_REPLAY_SESSION"):
        create_runtime()


# -- create_runtime() resolution -----------------------------------------------------------
def provider_of(**env: str) -> str:
    mp = pytest.MonkeyPatch()
    try:
        for name, value in env.items():
            mp.setenv(name, value)
        runtime = create_runtime()
        assert runtime.provider is not None
        return runtime.provider.name
    finally:
        mp.undo()


def test_resolution_order():
    assert provider_of(OPENPROGRAM_PROVIDER="test") == "test"
    assert provider_of(OPENAI_API_KEY="sk-x") == "openai"
    assert provider_of(OPENAI_BASE_URL="http://localhost:11434/v1") == "openai"
    assert provider_of(ANTHROPIC_API_KEY="sk-ant-x") == "anthropic"
    assert provider_of(OPENAI_API_KEY="sk-x", ANTHROPIC_API_KEY="sk-ant-x") == "openai"
    both = {"OPENAI_API_KEY": "sk-x", "ANTHROPIC_API_KEY": "sk-ant-x"}
    assert provider_of(OPENPROGRAM_PROVIDER="anthropic", **both) == "anthropic"
    assert provider_of(OPENPROGRAM_PROVIDER="test", **both) == "test"


def test_explicit_beats_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENPROGRAM_PROVIDER", "anthropic")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.setenv("OPENPROGRAM_MODEL", "env-model")
    assert create_runtime("test").provider.name == "test"  # type: ignore[union-attr]
    assert create_runtime("test").model == "env-model"
    assert create_runtime("test", "given-model").model == "given-model"
    mine = FunctionProvider(lambda _r: "x")
    assert create_runtime(mine).provider is mine


def test_nothing_configured_says_how_to_fix_it():
    with pytest.raises(NoProviderConfigured) as info:
        create_runtime()
    message = str(info.value)
    for hint in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "OPENPROGRAM_PROVIDER"):
        assert hint in message
    with pytest.raises(UserError, match="unknown provider 'nope'; choose one of test"):
        create_provider("nope")


def test_no_provider_still_records_the_dag(op_home: Path):
    with session_context() as handle:
        assert handle.runtime is not None and not handle.runtime.configured
        with pytest.raises(NoProviderConfigured, match="OPENPROGRAM_PROVIDER=test"):
            answer("anyone?")
    from openprogram.store.session.store import SessionStore

    store = SessionStore(op_home)
    nodes = store.open(handle.session_id).nodes()
    store.close()
    (fn,) = [n for n in nodes if n.kind == "function"]
    assert fn.metadata["doc"] == "Answer the question briefly." and fn.status == "error"
    assert not [n for n in nodes if n.is_open]


# -- sync exec inside a running event loop; aexec ------------------------------------------
def test_exec_and_aexec_inside_asyncio_run(test_provider: TestProvider, rt: Runtime):
    async def notebook_cell() -> list[Any]:
        sync = answer("sync inside the loop")
        awaited = await rt.aexec("awaited")
        return [sync, awaited]

    with session_context(runtime=rt):
        assert asyncio.run(notebook_cell()) == [
            "[test reply] sync inside the loop",
            "[test reply] awaited",
        ]
    assert len(test_provider.requests) == 2
