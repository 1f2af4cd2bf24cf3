"""The provider interface: one request in, one response out.

A provider turns an :class:`LLMRequest` (rendered chat messages plus options) into an
:class:`LLMResponse`.  Providers are synchronous; the Runtime runs them on the calling
thread, so a sync ``runtime.exec`` works inside Jupyter's running event loop and Ctrl-C
reaches a streamed reply.  Transient failures (rate limits, 5xx, timeouts) are raised as
:class:`TransientProviderError` so the Runtime can retry them with backoff.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from openprogram.errors import OpenProgramError

Message = dict[str, Any]  # {"role": "system"|"user"|"assistant"|"tool", "content": str, ...}


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


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


DeltaCallback = Callable[[str], None]


@runtime_checkable
class Provider(Protocol):
    """What the Runtime needs from a provider."""

    name: str
    model: str

    def complete(self, request: LLMRequest, on_delta: DeltaCallback | None = None) -> LLMResponse:
        """Answer ``request``; when streaming, call ``on_delta`` with each text chunk."""
        ...


class ProviderError(OpenProgramError, RuntimeError):
    """The provider failed for good (bad request, auth, malformed reply)."""


class MissingCredentials(ProviderError):
    """The provider needs a key the environment does not have; the message names it."""


class TransientProviderError(ProviderError):
    """The provider failed in a way worth retrying (rate limit, 5xx, timeout, reset)."""
