"""The provider interface: one request in, one response out.

A provider turns an :class:`LLMRequest` (rendered chat messages plus options) into an
:class:`LLMResponse`.  Providers are synchronous; the Runtime runs them on the calling
thread, so a sync ``runtime.exec`` works inside Jupyter's running event loop and Ctrl-C
reaches a streamed reply.  Transient failures (rate limits, 5xx, timeouts) are raised as
:class:`TransientProviderError` so the Runtime can retry them with backoff; an error
that says the prompt does not fit the model's context window is known by
:func:`is_context_overflow` (the Runtime retries once with less history, a chat turn
compacts).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Message = dict[str, Any]  # {"role": "system"|"user"|"assistant"|"tool", "content": str, ...}

_OVERFLOW = re.compile(
    r"context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long|"
    r"context_length_exceeded|exceeds? the (model'?s? )?(maximum|context)|input is too long|"
    r"reduce the length",
    re.I,
)


def is_context_overflow(exc: BaseException) -> bool:
    """Whether a provider's error says the prompt does not fit the model's context."""
    return isinstance(exc, Exception) and bool(_OVERFLOW.search(str(exc)))


# how servers say by how much: OpenAI, vLLM and llama-cpp-python ("maximum context length is
# 4096 tokens. However, you requested 4830 tokens (4510 in the messages, 320 in the
# completion)"), Anthropic ("prompt is too long: 210000 tokens > 200000 maximum")
_ROOM_OPENAI = re.compile(
    r"maximum context length is (\d+) tokens.*?(\d+) in the messages, (\d+) in the completion",
    re.I | re.S,
)
_ROOM_ANTHROPIC = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum", re.I)


def overflow_room(exc: BaseException) -> tuple[int, int] | None:
    """``(room, sent)``: the prompt tokens the model has room for and those it was sent, as
    the error says (None when it does not say)."""
    text = str(exc)
    found = _ROOM_OPENAI.search(text)
    if found:
        window, sent, completion = (int(g) for g in found.groups())
        return max(0, window - completion), sent
    found = _ROOM_ANTHROPIC.search(text)
    if found:
        sent, window = (int(g) for g in found.groups())
        return window, sent
    return None


@dataclass(frozen=True)
class ToolCall:
    """A tool the model asked for, with the arguments exactly as it sent them (the ``llm``
    node keeps a redacted copy for people; the tool runs from this one).

    ``problem``: why the arguments could not be read (not JSON, not a JSON object); they
    are then ``{}`` and the tool loop sends the problem back for the model to fix."""

    id: str
    name: str
    arguments: dict[str, Any]
    problem: str | None = None


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}


@dataclass
class LLMRequest:
    messages: list[Message]
    model: str = ""
    # JSON-schema tool specs: {name, description, parameters}
    tools: list[dict[str, Any]] | None = None
    response_format: dict[str, Any] | None = None  # a JSON schema the reply must satisfy
    stream: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    timeout: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # with tools: "auto", "none", "required" or a tool's name (that tool must be called)
    tool_choice: str | None = None
    iteration: int = 1  # which model call of an exec's tool loop this is (1: the first)
    # messages[start:end] are the session's earlier turns, not this call's own prompt (the
    # replay provider matches a call by its own part, which inserted cells do not change)
    history: tuple[int, int] | None = None

    @property
    def system(self) -> str:
        """All system messages joined (Anthropic takes the system prompt separately)."""
        return "\n\n".join(str(m["content"]) for m in self.messages if m.get("role") == "system")


@dataclass
class LLMResponse:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    model: str = ""
    finish_reason: str | None = None
    # what the provider adds to the llm node's metadata: the output mode and fallbacks it
    # took, ``usage_estimated`` when the server reported no usage (openai_provider)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolRun:
    """One tool the tool loop ran: the call (exact arguments), what it returned or the
    error the model was shown, and its ``tool`` node."""

    call: ToolCall
    output: Any = None
    error: str | None = None
    node_id: str | None = None
    bad_arguments: bool = False  # the error is the arguments' (the model can fix them)


class Reply(str):
    """What the model said, as ``runtime.exec`` returns it: the text (a ``Reply`` *is* that
    string, so code that treats the result as text keeps working) plus what came with it.

    * ``tool_calls``: the calls of the last model reply, arguments exact (with ``tools=``
      callables the loop has run them, so this is empty unless ``max_iterations`` cut it);
    * ``tool_runs``: every tool the loop ran (:class:`ToolRun`);
    * ``usage``: tokens of every model call the exec made (loop rounds and retries summed);
    * ``finish_reason``: the provider's (``stop``, ``length``, ``tool_calls``…), or
      ``max_iterations`` when the tool loop reached its bound;
    * ``model``, ``node_id`` (the last ``llm`` node), ``iterations`` (model calls of the loop).

    Immutable.  ``str(reply)`` / ``reply.text`` is the plain string.
    """

    __match_args__ = ("text",)
    tool_calls: tuple[ToolCall, ...]
    tool_runs: tuple[ToolRun, ...]
    usage: Usage | None
    finish_reason: str | None
    model: str
    node_id: str | None
    iterations: int

    def __new__(
        cls,
        text: str = "",
        *,
        tool_calls: tuple[ToolCall, ...] | list[ToolCall] = (),
        tool_runs: tuple[ToolRun, ...] | list[ToolRun] = (),
        usage: Usage | None = None,
        finish_reason: str | None = None,
        model: str = "",
        node_id: str | None = None,
        iterations: int = 1,
    ) -> Reply:
        self = super().__new__(cls, text)
        fields = {
            "tool_calls": tuple(tool_calls),
            "tool_runs": tuple(tool_runs),
            "usage": usage,
            "finish_reason": finish_reason,
            "model": model,
            "node_id": node_id,
            "iterations": iterations,
        }
        for key, value in fields.items():
            object.__setattr__(self, key, value)
        return self

    @property
    def text(self) -> str:
        return str.__str__(self)

    def __str__(self) -> str:
        return str.__str__(self)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"a Reply is immutable (cannot set {key!r})")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"a Reply is immutable (cannot delete {key!r})")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_reply, (self.text, dict(self.__dict__)))


def _rebuild_reply(text: str, fields: dict[str, Any]) -> Reply:
    return Reply(text, **fields)


def add_usage(total: Usage | None, more: Usage | None) -> Usage | None:
    """``total`` + ``more`` (None when neither is known)."""
    if more is None:
        return total
    if total is None:
        return Usage(more.input_tokens, more.output_tokens)
    return Usage(total.input_tokens + more.input_tokens, total.output_tokens + more.output_tokens)


DeltaCallback = Callable[[str], None]


@runtime_checkable
class Provider(Protocol):
    """What the Runtime needs from a provider."""

    name: str
    model: str

    def complete(self, request: LLMRequest, on_delta: DeltaCallback | None = None) -> LLMResponse:
        """Answer ``request``; when streaming, call ``on_delta`` with each text chunk."""
        ...
