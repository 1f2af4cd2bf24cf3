"""``Runtime.exec``: the ``choices`` / ``response_format`` gates, provider errors, timeouts
and Ctrl-C in a streamed reply — offline (FunctionProvider) and through the official SDKs
against the local wire server.  After each failure: the ``llm`` node ends ``error`` /
``cancelled``, nothing stays ``running``, every ContextVar is reset, the next call works.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import Reply, WireServer, assert_vars_clear, reopen, wire_provider
from pydantic import BaseModel

from openprogram import agentic_function, create_runtime, session_context
from openprogram.agentic_programming.function import get_call_id
from openprogram.agentic_programming.runtime import Runtime
from openprogram.context.nodes import Call
from openprogram.errors import ChoiceError, ResponseFormatError
from openprogram.providers.base import (
    LLMRequest,
    LLMResponse,
    ProviderError,
    TransientProviderError,
)
from openprogram.providers.test import FunctionProvider

CHOICES = ["bug", "feature", "question"]


def assert_clean(home: Path, session_id: str) -> list[Call]:
    """Nothing left running on disk and no ContextVar left set; returns the nodes."""
    assert_vars_clear()
    nodes = reopen(home, session_id)
    assert [n for n in nodes if n.is_open] == []
    return nodes


def scripted(*replies: str | BaseException) -> FunctionProvider:
    """A provider answering ``replies`` in order (an exception is raised instead)."""
    queue = list(replies)

    def answer(_request: LLMRequest) -> str:
        item = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(item, BaseException):
            raise item
        return item

    return FunctionProvider(answer)


def runtime(provider: Any, **options: Any) -> Runtime:
    return create_runtime(provider, backoff=0.0, **options)


@agentic_function
def classify(ticket: str, runtime: Runtime | None = None) -> Any:
    """Classify the ticket as bug, feature or question."""
    assert runtime is not None
    return runtime.exec(ticket, choices=CHOICES)


@agentic_function
def ask(content: str, runtime: Runtime | None = None, **options: Any) -> Any:
    """Answer plainly."""
    assert runtime is not None
    return runtime.exec(content, **options)


# -- choices -------------------------------------------------------------------------------
def test_choices_garbage_then_a_valid_pick(op_home: Path):
    provider = scripted("I would rather not say", "Feature.")
    with session_context(runtime=runtime(provider)) as handle:
        assert classify("add dark mode") == "feature"
    nodes = assert_clean(op_home, handle.session_id)
    first, second = [n for n in nodes if n.kind == "llm"]
    assert first.metadata["rejected"] is True and first.status == "error"
    assert first.output == "I would rather not say"
    assert "not one of the allowed choices" in first.metadata["error"]
    assert second.status == "completed" and second.output == "Feature."
    fn = next(n for n in nodes if n.kind == "function")
    assert first.caller == second.caller == fn.id and fn.output == "feature"
    retry = provider.requests[1].messages
    assert retry[-2] == {"role": "assistant", "content": "I would rather not say"}
    assert "bug, feature, question" in retry[-1]["content"]


def test_choices_garbage_every_time_is_a_clear_error(op_home: Path):
    provider = scripted("no idea")
    with session_context(runtime=runtime(provider, gate_attempts=3)) as handle:
        with pytest.raises(ChoiceError) as info:
            classify("??")
        assert "did not pick one of ['bug', 'feature', 'question'] after 3" in str(info.value)
        assert info.value.answers == ["no idea"] * 3
    nodes = assert_clean(op_home, handle.session_id)
    llms = [n for n in nodes if n.kind == "llm"]
    assert len(llms) == 3 == len(provider.requests)
    assert all(n.metadata.get("rejected") for n in llms)
    fn = next(n for n in nodes if n.kind == "function")
    assert fn.status == "error" and "ChoiceError" in fn.metadata["error"]


ESSAY = (
    "There are many ways to look at this ticket. Some would say it is a bug, others that "
    "it is really a feature request in disguise, and the rest would ask a question first."
)


@pytest.mark.parametrize(
    "reply, pick",
    [
        ("feature", "feature"),
        ("  **Feature**.", "feature"),
        ("'question'", "question"),
        ("Let me think about it.\nbug", "bug"),  # a final line that is a choice
        ('{"choice": "bug"}', "bug"),  # what the constrained (enum) modes return
        ('"feature"', "feature"),
        ("This looks like a feature request to me", None),  # mentions one: not an answer
        ("Answer: feature.\nbut maybe a bug", None),
        (ESSAY, None),
        ("", None),
    ],
)
def test_a_reply_counts_only_when_it_is_a_choice(reply: str, pick: str | None) -> None:
    from openprogram.agentic_programming.validate import pick_choice

    assert pick_choice(reply, CHOICES) == pick


def test_the_first_request_names_the_choices_and_an_essay_is_asked_again(op_home: Path):
    provider = scripted(ESSAY, "question")
    with session_context(runtime=runtime(provider)) as handle:
        assert classify("how do I export?") == "question"
    first = provider.requests[0].messages
    assert first[-1] == {"role": "user", "content": "how do I export?"}  # the content last
    assert first[-2]["content"].endswith("Allowed answers: bug, feature, question.")
    llms = [n for n in assert_clean(op_home, handle.session_id) if n.kind == "llm"]
    assert [n.status for n in llms] == ["error", "completed"]
    assert llms[0].metadata["rejected"] is True


class Ticket(BaseModel):
    kind: str
    priority: int


TICKET_SCHEMA = {
    "type": "object",
    "properties": {"kind": {"type": "string"}, "priority": {"type": "integer"}},
    "required": ["kind", "priority"],
}


@pytest.mark.parametrize("fmt", [Ticket, TICKET_SCHEMA], ids=["pydantic", "json-schema"])
def test_response_format_garbage_then_valid(op_home: Path, fmt: Any):
    provider = scripted("sure, it is a bug", '```json\n{"kind": "bug", "priority": 2}\n```')
    with session_context(runtime=runtime(provider)) as handle:
        value = ask("the app crashes", response_format=fmt)
    expected = {"kind": "bug", "priority": 2}
    assert (value.model_dump() if fmt is Ticket else value) == expected
    assert provider.requests[0].response_format == (
        Ticket.model_json_schema() if fmt is Ticket else TICKET_SCHEMA
    )
    nodes = assert_clean(op_home, handle.session_id)
    first, second = [n for n in nodes if n.kind == "llm"]
    assert first.metadata["rejected"] is True and "JSON" in first.metadata["error"]
    assert second.status == "completed"


@pytest.mark.parametrize("fmt", [Ticket, TICKET_SCHEMA], ids=["pydantic", "json-schema"])
def test_response_format_garbage_every_time(op_home: Path, fmt: Any):
    provider = scripted('{"kind": "bug"}')  # valid JSON, missing "priority"
    with (
        session_context(runtime=runtime(provider, gate_attempts=2)) as handle,
        pytest.raises(ResponseFormatError, match="after 2 attempts"),
    ):
        ask("the app crashes", response_format=fmt)
    nodes = assert_clean(op_home, handle.session_id)
    assert len([n for n in nodes if n.kind == "llm" and n.metadata.get("rejected")]) == 2


# -- provider errors, retries, Ctrl-C (offline) -------------------------------------------
def test_provider_error_ends_the_node_error_and_the_next_call_works(op_home: Path):
    provider = scripted(ProviderError("bad request: model not found"), "fine now")
    with session_context(runtime=runtime(provider)) as handle:
        with pytest.raises(ProviderError, match="model not found"):
            ask("hello")
        assert get_call_id() is None
        assert ask("hello again") == "fine now"
    nodes = assert_clean(op_home, handle.session_id)
    broken, ok = [n for n in nodes if n.kind == "llm"]
    assert broken.status == "error" and "model not found" in broken.metadata["error"]
    assert ok.status == "completed"
    assert [n.status for n in nodes if n.kind == "function"] == ["error", "completed"]
    assert len(provider.requests) == 2  # a permanent error is not retried


def test_transient_errors_are_retried_with_backoff(op_home: Path):
    provider = scripted(
        TransientProviderError("HTTP 503"), TransientProviderError("timed out"), "third time"
    )
    waits: list[float] = []
    rt = create_runtime(provider, max_retries=3, backoff=0.02, sleep=waits.append)
    with session_context(runtime=rt) as handle:
        assert ask("hello") == "third time"
    assert 0.01 <= waits[0] <= 0.02 and 0.02 <= waits[1] <= 0.04  # doubling, with jitter
    (node,) = [n for n in assert_clean(op_home, handle.session_id) if n.kind == "llm"]
    assert node.status == "completed"
    assert node.metadata["retries"] == [
        "TransientProviderError: HTTP 503",
        "TransientProviderError: timed out",
    ]
    assert node.metadata["retry_waits_s"] == [round(w, 3) for w in waits]


def test_transient_errors_exhausted(op_home: Path):
    provider = scripted(TransientProviderError("request timed out"))
    with (
        session_context(runtime=runtime(provider, max_retries=2)) as handle,
        pytest.raises(TransientProviderError, match="timed out"),
    ):
        ask("hello")
    assert len(provider.requests) == 3
    (node,) = [n for n in assert_clean(op_home, handle.session_id) if n.kind == "llm"]
    assert node.status == "error" and len(node.metadata["retries"]) == 2


class StreamingProvider:
    """Streams ``chunks`` through ``on_delta``; the callback itself may raise."""

    name = "streaming"
    model = "streaming"

    def __init__(self, chunks: list[str]) -> None:
        self.chunks = chunks

    def complete(
        self, request: LLMRequest, on_delta: Callable[[str], None] | None = None
    ) -> LLMResponse:
        for chunk in self.chunks:
            if on_delta is not None:
                on_delta(chunk)
        return LLMResponse(text="".join(self.chunks), finish_reason="stop")


def ctrl_c_after(n: int) -> tuple[list[str], Callable[[str], None]]:
    seen: list[str] = []

    def on_delta(chunk: str) -> None:
        seen.append(chunk)
        if len(seen) == n:
            raise KeyboardInterrupt

    return seen, on_delta


def test_ctrl_c_in_a_streamed_reply_cancels_the_node(op_home: Path):
    rt = runtime(StreamingProvider(["Once ", "upon ", "a ", "time"]))
    _seen, on_delta = ctrl_c_after(2)
    with pytest.raises(KeyboardInterrupt), session_context(runtime=rt) as handle:
        ask("tell a story", on_delta=on_delta)
    nodes = assert_clean(op_home, handle.session_id)
    (llm,) = [n for n in nodes if n.kind == "llm"]
    assert llm.status == "cancelled" and llm.metadata["error"].startswith("KeyboardInterrupt")
    assert llm.output == "Once upon " and llm.metadata["partial"] is True
    assert [n.status for n in nodes if n.kind == "function"] == ["cancelled"]
    with session_context(handle.session_id, runtime=rt):  # the next call works
        chunks: list[str] = []
        assert ask("again", on_delta=chunks.append) == "Once upon a time"
        assert chunks == ["Once ", "upon ", "a ", "time"]


def test_top_level_exec_outside_any_function(op_home: Path):
    provider = scripted("hi")
    with session_context(runtime=runtime(provider)) as handle:
        assert handle.runtime is not None and handle.runtime.exec("hello") == "hi"
    (llm,) = [n for n in assert_clean(op_home, handle.session_id) if n.kind == "llm"]
    assert llm.caller is None and llm.status == "completed"
    assert provider.requests[0].messages == [{"role": "user", "content": "hello"}]


# -- sync exec inside a running event loop (Jupyter) ---------------------------------------
def test_sync_exec_inside_a_running_event_loop(op_home: Path):
    import asyncio

    provider = scripted("from inside the loop")

    async def cell() -> Any:
        asyncio.get_running_loop()  # there is one, like in a notebook
        return ask("hello")

    with session_context(runtime=runtime(provider)) as handle:
        assert asyncio.run(cell()) == "from inside the loop"
    assert [n.status for n in assert_clean(op_home, handle.session_id)][1:] == [
        "completed",
        "completed",
    ]


def test_aexec_keeps_the_frame(op_home: Path):
    import asyncio

    provider = scripted("awaited")

    @agentic_function
    async def research(runtime: Runtime | None = None) -> Any:
        """Research asynchronously."""
        assert runtime is not None
        return await runtime.aexec("look it up")

    with session_context(runtime=runtime(provider)) as handle:
        assert asyncio.run(research()) == "awaited"
    nodes = assert_clean(op_home, handle.session_id)
    fn = next(n for n in nodes if n.kind == "function")
    llm = next(n for n in nodes if n.kind == "llm")
    assert llm.caller == fn.id  # the worker thread ran in the caller's context
    assert provider.requests[0].messages[0]["content"] == "Research asynchronously."


# -- the same through the official SDKs against the local wire server ----------------------
KEY = "sk-wire-test-KEY-42"


def sdk_provider(kind: str, server: WireServer, timeout: float = 5.0) -> Any:
    model = "gpt-wire" if kind == "openai" else "claude-wire"
    return wire_provider(kind, server, model=model, api_key=KEY, timeout=timeout)


SDKS = ["openai", "anthropic"]
pytest_wire = pytest.mark.timeout(30)


@pytest_wire
@pytest.mark.parametrize("kind", SDKS)
def test_sdk_docstring_and_500_then_success(kind: str, wire: WireServer, op_home: Path):
    wire.reply(Reply(status=500, error_message="upstream hiccup"), Reply(text="feature"))
    with session_context(runtime=runtime(sdk_provider(kind, wire))) as handle:
        assert classify("add dark mode") == "feature"
    assert len(wire.requests) == 2
    body = wire.requests[-1].body
    doc = "Classify the ticket as bug, feature or question."
    assert str(body).count(doc) == 1  # the docstring reached the vendor's API once
    (llm,) = [n for n in assert_clean(op_home, handle.session_id) if n.kind == "llm"]
    assert llm.status == "completed" and len(llm.metadata["retries"]) == 1
    assert "500" in llm.metadata["retries"][0]


@pytest_wire
def test_openai_choices_go_out_as_an_enum_and_step_down_when_refused(
    wire: WireServer, op_home: Path
) -> None:
    """Choices are constrained where the server can: a JSON schema enum first; a server that
    refuses it (HTTP 400 naming response_format) gets JSON mode with the same enum."""
    from openprogram.providers import capabilities

    capabilities.forget_profiles(wire.openai_base_url)
    wire.reply(
        Reply(status=400, error_message="response_format json_schema is not supported"),
        Reply(text='{"choice": "bug"}'),
    )
    with session_context(runtime=runtime(sdk_provider("openai", wire))) as handle:
        assert classify("the app crashes") == "bug"
    refused, sent = (r.body for r in wire.requests)
    enum = {"type": "string", "enum": CHOICES}
    assert refused["response_format"]["type"] == "json_schema"
    assert refused["response_format"]["json_schema"]["schema"]["properties"]["choice"] == enum
    assert sent["response_format"]["type"] == "json_object"
    assert sent["response_format"]["schema"]["properties"]["choice"] == enum
    (llm,) = [n for n in assert_clean(op_home, handle.session_id) if n.kind == "llm"]
    assert llm.metadata["output_mode"] == "json_object"
    capabilities.forget_profiles(wire.openai_base_url)


@pytest_wire
@pytest.mark.parametrize("kind", SDKS)
def test_sdk_stalled_stream_times_out(kind: str, wire: WireServer, op_home: Path):
    # a stall longer than the test's timeout: only the provider's own timeout ends it
    wire.reply(Reply(chunks=["Once ", "upon ", "a time"], stall_after=2, stall_for=600))
    wire.reply(Reply(text="recovered"))
    rt = runtime(sdk_provider(kind, wire, timeout=0.5), max_retries=0)
    with session_context(runtime=rt) as handle:
        with pytest.raises(TransientProviderError, match=r"timed out|ended|connection"):
            ask("tell a story", stream=True)
        assert ask("and now?") == "recovered"  # the next call works
    llms = [n for n in assert_clean(op_home, handle.session_id) if n.kind == "llm"]
    assert [n.status for n in llms] == ["error", "completed"]


@pytest_wire
@pytest.mark.parametrize("kind", SDKS)
def test_sdk_ctrl_c_mid_stream(kind: str, wire: WireServer, op_home: Path):
    wire.reply(Reply(chunks=["Once ", "upon ", "a ", "time"]), Reply(text="next"))
    rt = runtime(sdk_provider(kind, wire))
    seen, on_delta = ctrl_c_after(2)
    with pytest.raises(KeyboardInterrupt), session_context(runtime=rt) as handle:
        ask("tell a story", on_delta=on_delta)
    assert seen == ["Once ", "upon "]
    nodes = assert_clean(op_home, handle.session_id)
    (llm,) = [n for n in nodes if n.kind == "llm"]
    assert llm.status == "cancelled" and llm.output == "Once upon "
    with session_context(handle.session_id, runtime=rt):
        assert ask("go on") == "next"
