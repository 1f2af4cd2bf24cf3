"""What a request asks for besides its messages, as the ``llm`` node records it.

Replay matches the whole request (:mod:`openprogram.providers.replay_match`): the messages,
and these settings — the tools offered, ``tool_choice``, the response format, the
``choices`` gate, ``max_tokens`` and the sampling settings the call passed
(``runtime.exec(..., temperature=0, seed=1)``).  Only what the calling code asks for is
kept: not the transport (base URL, headers, timeout), not whether the reply streams, not a
budget's cap on ``max_tokens`` nor the environment's default (they change between runs of
the same code), and never a credential.  Pure.
"""

from __future__ import annotations

from typing import Any

from openprogram.agentic_programming.provider import LLMRequest
from openprogram.context.nodes import sanitize

#: the settings compared after the messages, in the order a difference is reported
SETTINGS = (
    "tools",
    "tool_choice",
    "response_format",
    "choices",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "output_mode",
)
_ON_REQUEST = ("tools", "tool_choice", "response_format", "temperature")


def request_settings(request: LLMRequest) -> dict[str, Any]:
    """The settings of ``request`` that are set, JSON-safe (the ``llm`` node's ``request``)."""
    out: dict[str, Any] = {}
    for key in SETTINGS:
        value = getattr(request, key) if key in _ON_REQUEST else None
        if value is None:
            value = request.extra.get(key)
        if value is not None:
            out[key] = sanitize(value)
    return out
