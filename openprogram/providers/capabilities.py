"""What a model server can do, learned per provider and base URL (pure logic, no I/O).

Real OpenAI-compatible servers differ from OpenAI's own API.  A :class:`Profile` per
``(provider, base URL)`` remembers, for this process, what a server refused so the next
request does not ask again:

* **structured output**, a ladder (pydantic-ai's ``NativeOutput`` / ``PromptedOutput`` are
  the model): ``native`` (a JSON schema as ``response_format``), ``json_object`` (JSON mode,
  the schema in the prompt and in the ``schema`` field that llama.cpp-style servers use to
  constrain decoding), ``prompted`` (the schema in the prompt only; the Runtime parses the
  reply and re-asks when it does not fit).  A server that refuses a mode is stepped down to
  the next one; a call may name its mode (``runtime.exec(..., output_mode="prompted")``).
  ``choices`` climb the same ladder with :func:`choice_schema` (an enum: the reply is
  ``{"choice": "bug"}``); in ``prompted`` mode they are asked as plain text;
* **streaming with tools**: only OpenAI's own API is sent streamed requests that carry
  tools (llama-cpp-python's server streams a tool choice as plain text, or an empty reply);
  a server whose stream with tools comes back empty is asked without streaming from then
  on (``stream_with_tools=True`` in a profile opts a server in);
* **usage in streams** and the **tokenizer endpoint**: a streamed reply without usage is
  counted by the server's tokenizer when it has one, else estimated (and marked so).

:func:`unsupported_parameter` reads an error body: an HTTP 4xx/5xx that says a request
parameter is not supported is a permanent refusal (:class:`UnsupportedParameter`), not a
transient error worth retrying.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from typing import Any

OUTPUT_MODES = ("native", "json_object", "prompted")

# request parameters a server may refuse, as they appear in its error bodies
PARAMETERS = (
    "response_format",
    "json_schema",
    "tool_choice",
    "stream_options",
    "max_completion_tokens",
    "parallel_tool_calls",
    "seed",
)
_REFUSALS = re.compile(
    r"not supported|unsupported|not support|input should be|unrecognized|unknown (?:field|param)"
    r"|extra (?:inputs|fields) (?:are|is) not permitted|literal_error|invalid value|not allowed"
    r"|not implemented",
    re.I,
)


@dataclass
class Profile:
    """What one server was seen to support (``None``: not known yet)."""

    output_mode: str = "native"  # the highest rung of the ladder not refused yet
    stream_with_tools: bool | None = None
    stream_usage: bool | None = None
    tokenize: bool | None = None  # the server's /extras/tokenize/count answers
    served_models: list[str] | None = None  # what its /models listed (None: not asked yet)


_profiles: dict[tuple[str, str], Profile] = {}
_lock = threading.Lock()


def profile_for(provider: str, base_url: str) -> Profile:
    """The process-wide profile of ``provider`` at ``base_url`` (made on first use)."""
    key = (provider, base_url.rstrip("/"))
    with _lock:
        return _profiles.setdefault(key, Profile())


def forget_profiles(base_url: str | None = None) -> None:
    """Forget what was learned of the server at ``base_url`` (None: of every server)."""
    with _lock:
        if base_url is None:
            _profiles.clear()
        for key in [k for k in _profiles if k[1] == (base_url or "").rstrip("/")]:
            del _profiles[key]


def checked_mode(mode: Any) -> str | None:
    """``output_mode`` as a call gave it (None: the profile decides); bad values say so."""
    if mode is None:
        return None
    if mode not in OUTPUT_MODES:
        raise ValueError(f"output_mode {mode!r}: choose one of {', '.join(OUTPUT_MODES)}")
    return str(mode)


def step_down(mode: str) -> str | None:
    """The next rung below ``mode`` (None: ``prompted`` is the last)."""
    at = OUTPUT_MODES.index(mode)
    return OUTPUT_MODES[at + 1] if at + 1 < len(OUTPUT_MODES) else None


def refused_output(parameter: str) -> bool:
    """Whether a refusal of ``parameter`` is a refusal of the structured-output mode."""
    return parameter in ("response_format", "json_schema")


def unsupported_parameter(body: str) -> str | None:
    """The request parameter an error body says is unsupported, or None."""
    if not body or not _REFUSALS.search(body):
        return None
    lowered = body.lower()
    for name in PARAMETERS:
        if name in lowered:
            return name
    return None


def choice_schema(choices: list[str]) -> dict[str, Any]:
    """The JSON schema that constrains a ``choices`` reply: ``{"choice": <one of them>}``
    (an object: OpenAI's native mode wants one at the root)."""
    return {
        "type": "object",
        "properties": {"choice": {"type": "string", "enum": [str(c) for c in choices]}},
        "required": ["choice"],
        "additionalProperties": False,
    }


def schema_instruction(schema: dict[str, Any]) -> str:
    """The prompt text that asks for JSON matching ``schema`` (JSON and prompted modes)."""
    return (
        "Reply with only a JSON value (no prose, no code fence) that matches this JSON "
        f"schema:\n{json.dumps(schema, separators=(',', ':'))}"
    )


def response_format_param(mode: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    """The ``response_format`` request field of ``mode`` (None: ``prompted`` sends none)."""
    if mode == "native":
        return {
            "type": "json_schema",
            "json_schema": {"name": "reply", "schema": schema, "strict": False},
        }
    if mode == "json_object":
        return {"type": "json_object", "schema": schema}
    return None


def with_instruction(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """``messages`` with ``text`` added to the system prompt (one system message first)."""
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system" and isinstance(out[0].get("content"), str):
        out[0]["content"] = f"{out[0]['content']}\n\n{text}"
    else:
        out.insert(0, {"role": "system", "content": text})
    return out
