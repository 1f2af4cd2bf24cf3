"""``replay``: answer every LLM call from the llm nodes recorded in a session (no key).

A call is identified by what makes it that call — the function it is made in, its place
among that frame's LLM calls, and a hash of the rendered prompt (every message the model
would see) — so a notebook re-run in a fresh session gets, call by call, the answers its
recorded run got, and an edited docstring or input is noticed.  A call with no recorded
answer raises :class:`ReplayMiss`, naming the cell and the function and showing how its
prompt differs from the closest recorded one; with a ``fallback`` provider (``openprogram
run --replay --record-misses``) the miss is answered live instead, and recorded as usual.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from openprogram.agentic_programming.prompt import sent_messages
from openprogram.providers.base import LLMRequest, LLMResponse, Provider, ProviderError
from openprogram.store.session.db import default_db
from openprogram.store.vars import get_call_id, get_store, get_turn_id

Key = tuple[str, int, str]  # (function, place in its frame, prompt hash)
MAX_DIFF_LINES = 12


class ReplayMiss(ProviderError):
    """An LLM call the recorded session has no answer for."""


def prompt_text(messages: Any) -> str:
    """The rendered prompt as text, one ``role: content`` block per message."""
    if not isinstance(messages, list):
        return ""
    parts = []
    for message in messages:
        if isinstance(message, dict):
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
            parts.append(f"{message.get('role')}: {text}")
    return "\n".join(parts)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Recorded:
    node_id: str
    function: str
    place: int
    prompt: str
    reply: str


def recorded_calls(
    nodes: list[Any], name_of: Callable[[str | None], str], messages_of: Callable[[Any], Any]
) -> list[Recorded]:
    """The answered llm nodes of a session (``nodes`` in seq order), each with its key parts
    (``messages_of(node)``: the whole prompt it was sent).  Rejected attempts (a
    ``choices`` reply that was not a choice) are answers too."""
    places: dict[str | None, int] = {}
    out: list[Recorded] = []
    for node in nodes:
        if node.kind != "llm":
            continue
        key = node.caller if node.caller is not None else f"turn {node.turn}"
        place = places.get(key, 0)
        places[key] = place + 1
        answered = node.status == "completed" or node.metadata.get("rejected")
        if not answered or node.output is None:
            continue
        prompt = prompt_text(messages_of(node))
        out.append(Recorded(node.id, name_of(node.caller), place, prompt, str(node.output)))
    return out


def closest(prompt: str, candidates: list[Recorded]) -> Recorded | None:
    best, score = None, -1.0
    for rec in candidates:
        matcher = difflib.SequenceMatcher(None, rec.prompt, prompt, autojunk=False)
        if matcher.real_quick_ratio() <= score or matcher.quick_ratio() <= score:
            continue
        ratio = matcher.ratio()
        if ratio > score:
            best, score = rec, ratio
    return best


def prompt_diff(recorded: str, now: str) -> str:
    lines = list(
        difflib.unified_diff(
            recorded.splitlines(), now.splitlines(), "recorded", "now", n=1, lineterm=""
        )
    )
    shown = [line[:160] for line in lines[2 : 2 + MAX_DIFF_LINES]]
    if len(lines) > 2 + MAX_DIFF_LINES:
        shown.append(f"… ({len(lines) - 2 - MAX_DIFF_LINES} more diff lines)")
    return "\n".join(shown)


class ReplayProvider:
    name = "replay"

    def __init__(
        self, session_id: str, *, db: Any = None, fallback: Provider | None = None
    ) -> None:
        session = (db or default_db()).open(session_id)
        self.session_id = session_id
        self.model = "replay"
        self.fallback = fallback

        def name_of(node_id: str | None) -> str:
            return _frame_name(session, node_id)

        def messages_of(node: Any) -> Any:
            return sent_messages(session, node)

        self._calls = recorded_calls(session.nodes(), name_of, messages_of)
        self._by_key: dict[Key, list[Recorded]] = {}
        for rec in self._calls:
            self._by_key.setdefault((rec.function, rec.place, text_hash(rec.prompt)), []).append(
                rec
            )
        self._places: dict[str, int] = {}

    def complete(
        self, request: LLMRequest, on_delta: Callable[[str], None] | None = None
    ) -> LLMResponse:
        writer = get_store()
        session = writer.session if writer is not None else None
        frame = get_call_id()
        frame_key = frame if frame is not None else f"turn {get_turn_id()}"
        place = self._places.get(frame_key, 0)
        self._places[frame_key] = place + 1
        function = _frame_name(session, frame)
        prompt = prompt_text(request.messages)
        found = self._by_key.get((function, place, text_hash(prompt)))
        if found:
            reply = found.pop(0).reply
            if on_delta is not None:
                on_delta(reply)
            return LLMResponse(text=reply, model="replay", finish_reason="stop")
        if self.fallback is not None:
            return self.fallback.complete(request, on_delta)
        raise ReplayMiss(self._miss(_cell_label(session, frame), function, place, prompt))

    def _miss(self, cell: str, function: str, place: int, prompt: str) -> str:
        same = [r for r in self._calls if r.function == function] or self._calls
        near = closest(prompt, same)
        where = f"{cell}, function {function}, LLM call {place + 1} in its frame"
        if near is None:
            return (
                f"replay: session {self.session_id} has no recorded answer for {where}: "
                "it records no LLM calls; run with a real provider to record one"
            )
        if near.prompt == prompt:
            detail = "the same prompt was recorded, but its answers are used up"
        else:
            detail = "its prompt differs from the closest recorded one:\n" + prompt_diff(
                near.prompt, prompt
            )
        return (
            f"replay: session {self.session_id} has no recorded answer for {where}; {detail}\n"
            "(run with a real provider, or `openprogram run --replay --record-misses`, "
            "to record one)"
        )


def _frame_name(session: Any, node_id: str | None) -> str:
    if session is None or node_id is None:
        return "<turn>"
    try:
        node = session.get(node_id)
    except Exception:
        return "<unknown>"
    return "<turn>" if node.kind in ("turn", "root") else str(node.name)


def _cell_label(session: Any, frame: str | None) -> str:
    """``cell [3] (triage("the app…"))`` for a notebook turn: the top of the frame's
    callers; else that top call's name."""
    top = None
    node_id, seen = frame, set()
    while session is not None and node_id is not None and node_id not in seen:
        seen.add(node_id)
        try:
            top = session.get(node_id)
        except Exception:
            break
        node_id = top.caller
    if top is None:
        return "a call outside any turn"
    text = top.input.get("text") if isinstance(top.input, dict) else None
    if top.kind == "turn" and isinstance(text, str):
        body = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("%%")]
        first = body[0].strip()[:60] if body else ""
        return f"{top.name} ({first})" if first else str(top.name)
    return f"the turn of {top.name}"
