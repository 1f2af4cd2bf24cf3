"""Whether a recorded call answers a request, and where the nearest one differs.

A replayed call must ask for what the recorded one asked: the same own messages (the
frame's docstring, earlier steps and content; the session's earlier turns are left out,
[0040](../../docs/decisions/0040-replay-by-identity.md)) and the same settings
(:data:`~openprogram.agentic_programming.request_fields.SETTINGS`: tools, ``tool_choice``,
response format, ``choices``, ``max_tokens``, temperature and the other sampling settings).
Whether it streams is not compared: a recording made streamed answers a call that is not,
and the other way round.  A recording made before the settings were recorded (no
``request`` in its ``llm`` node) matches on its messages alone.

Both sides are compared as redacted JSON (the recording was redacted when it was written,
:mod:`openprogram.store.session.records`): a key in a prompt matches its ``***``.  Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from openprogram.agentic_programming.provider import LLMResponse, ToolCall
from openprogram.agentic_programming.request_fields import SETTINGS
from openprogram.context.secrets import redact_secrets

SHOWN = 60  # characters of a value shown on each side of a difference


def canonical(value: Any) -> Any:
    """``value`` as the recording holds it: JSON, with known secrets redacted."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
    return json.loads(redact_secrets(text))


def settings_match(recorded: Mapping[str, Any] | None, now: Mapping[str, Any]) -> bool:
    """Whether a recording's settings are the request's (None: recorded before settings
    were kept — it matches any)."""
    return recorded is None or canonical(dict(recorded)) == canonical(dict(now))


@dataclass(frozen=True)
class Difference:
    """The first field where a recording and a request differ, with both values (short)."""

    field: str
    recorded: str
    now: str

    def line(self) -> str:
        return f"{self.field}: recorded {self.recorded}, now {self.now}"


def first_difference(
    recorded_messages: Sequence[Any],
    recorded_settings: Mapping[str, Any] | None,
    messages: Sequence[Any],
    settings: Mapping[str, Any],
) -> Difference | None:
    """Where a recording first differs from a request: its messages first, then each
    setting in :data:`SETTINGS` order (a recording without settings: messages only)."""
    rec, now = canonical(list(recorded_messages)), canonical(list(messages))
    found = _first_path(rec, now, "messages")
    if found is not None or recorded_settings is None:
        return found
    rec_s, now_s = canonical(dict(recorded_settings)), canonical(dict(settings))
    for key in (*SETTINGS, *sorted((set(rec_s) | set(now_s)) - set(SETTINGS))):
        found = _first_path(rec_s.get(key, _UNSET), now_s.get(key, _UNSET), key)
        if found is not None:
            return found
    return None


class _Unset:
    def __repr__(self) -> str:
        return "(not set)"


_UNSET: Any = _Unset()


def _first_path(a: Any, b: Any, path: str) -> Difference | None:
    """The first leaf where JSON values ``a`` and ``b`` differ, named by its path
    (``messages[2].content``, ``tools[0].description``)."""
    if a == b:
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            found = _first_path(a.get(key, _UNSET), b.get(key, _UNSET), f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            left = a[i] if i < len(a) else _UNSET
            right = b[i] if i < len(b) else _UNSET
            found = _first_path(left, right, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    left, right = _shown(a), _shown(b)
    if isinstance(a, str) and isinstance(b, str):
        left, right = _around_change(a, b)
    return Difference(path, left, right)


def _shown(value: Any) -> str:
    if isinstance(value, _Unset):
        return repr(value)
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def _around_change(a: str, b: str) -> tuple[str, str]:
    """Both strings, quoted, cut to :data:`SHOWN` characters from a little before the first
    character where they differ."""
    same = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        same += 1
    start = max(0, same - 20)

    def cut(text: str) -> str:
        part = text[start : start + SHOWN]
        shown = json.dumps(part, ensure_ascii=False)
        return ("…" if start else "") + shown + ("…" if start + SHOWN < len(text) else "")

    return cut(a), cut(b)


def replayed_response(
    reply: str, tool_calls: Any, finish_reason: Any, on_delta: Any = None
) -> LLMResponse:
    """The response a recording gives: its text (streamed in one piece to ``on_delta`` when
    the call streams, whether or not the recorded one did) and the tools it called."""
    calls = [
        ToolCall(
            id=str(call.get("id") or f"call_{i}"),
            name=str(call.get("name")),
            arguments=dict(call["arguments"]) if isinstance(call.get("arguments"), dict) else {},
            problem=call.get("problem"),
        )
        for i, call in enumerate(tool_calls if isinstance(tool_calls, list) else [])
        if isinstance(call, dict) and call.get("name")
    ]
    if on_delta is not None and reply:
        on_delta(reply)
    finish = str(finish_reason) if finish_reason else ("tool_calls" if calls else "stop")
    return LLMResponse(text=reply, tool_calls=calls, model="replay", finish_reason=finish)
