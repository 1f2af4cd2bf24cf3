"""Replay from recorded calls written out as data: what a test exported from a session runs.

``openprogram sessions export ID --pytest FILE`` writes each agentic call of a session as a
test whose LLM calls are listed in the file (function, own messages, settings, reply).
:func:`replaying` runs a block as one turn recorded in memory (nothing is written, no key,
no network) with a Runtime whose :class:`CassetteProvider` answers each call from that
list: the same function, own prompt and settings as
:class:`~openprogram.providers.replay.ReplayProvider` matches, in order.  A call with no
recorded answer raises :class:`~openprogram.errors.ReplayMiss` naming the call, the nearest
recording, the first field that differs and the prompt's diff; a block that ends with
recorded calls it never made fails too (the function makes fewer calls than it did).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from openprogram.agentic_programming.request_fields import request_settings
from openprogram.agentic_programming.runtime import Runtime
from openprogram.context.nodes import make_call
from openprogram.context.secrets import redact_secrets
from openprogram.errors import ReplayMiss
from openprogram.providers.base import LLMRequest, LLMResponse
from openprogram.providers.replay import (
    Asked,
    Cell,
    Recorded,
    frame_name,
    miss_detail,
    own_messages,
    prompt_text,
)
from openprogram.providers.replay_match import replayed_response, settings_match
from openprogram.store.memory import MemoryRecorder
from openprogram.store.vars import TurnState, get_call_id, get_store, using_turn


class CassetteProvider:
    """Answers LLM calls from ``calls`` (dicts: ``function``, ``messages``, ``settings``,
    ``reply``; optional ``tool_calls``, ``finish_reason``, ``node``, ``turn``), each once."""

    name = "replay"

    def __init__(self, calls: Sequence[Mapping[str, Any]], *, label: str, hint: str = "") -> None:
        self.model = "replay"
        self.label = label  # what the misses name: the test
        self.hint = hint  # how to refresh the recording
        self.calls = [_recorded(call, i, label) for i, call in enumerate(calls)]
        self.unused = list(self.calls)
        self._made: dict[str, int] = {}

    def complete(
        self, request: LLMRequest, on_delta: Callable[[str], None] | None = None
    ) -> LLMResponse:
        writer, frame = get_store(), get_call_id()
        node = writer.get(frame) if writer is not None and frame is not None else None
        function = frame_name(node)
        made = self._made.get(function, 0)
        self._made[function] = made + 1
        mine = own_messages(request)
        own = redact_secrets(prompt_text(mine))
        now = Asked(own, own, mine, request_settings(request))
        for rec in self.unused:
            same = rec.function == function and rec.own == own
            if same and settings_match(rec.settings, now.settings):
                self.unused.remove(rec)
                return replayed_response(rec.reply, rec.tool_calls, rec.finish_reason, on_delta)
        where = f"{self.label}: LLM call {made + 1} of function {function}"
        if not self.calls:
            raise ReplayMiss(f"replay: no recorded answer for {where}: it recorded no LLM calls")
        pool = [r for r in self.calls if r.function == function] or self.calls
        tail = f"\n{self.hint}" if self.hint else ""
        raise ReplayMiss(f"replay: no recorded answer for {where}; {miss_detail(pool, now)}{tail}")


def _recorded(call: Mapping[str, Any], index: int, label: str) -> Recorded:
    messages = list(call.get("messages") or [])
    own = prompt_text(messages)
    function = str(call.get("function"))
    return Recorded(
        node_id=str(call.get("node") or f"recorded call {index + 1}"),
        cell=Cell("", f"the recording of {label}", None),
        function=function,
        place=index,
        own=own,
        prompt=own,
        reply=str(call.get("reply") or ""),
        turn=int(call.get("turn") or 0),
        messages=messages,
        settings=call.get("settings") if isinstance(call.get("settings"), dict) else None,
        tool_calls=list(call.get("tool_calls") or []),
        finish_reason=call.get("finish_reason"),
        shown=f"recorded call {index + 1} of {label} (in function {function})",
    )


@contextmanager
def replaying(
    calls: Sequence[Mapping[str, Any]], *, label: str = "replay", hint: str = ""
) -> Iterator[CassetteProvider]:
    """Run the block as one turn recorded in memory, its LLM calls answered from ``calls``;
    fail when it leaves recorded calls unmade."""
    provider = CassetteProvider(calls, label=label, hint=hint)
    recorder = MemoryRecorder("replayed-test", 1, [], None)
    turn = make_call("turn", label, input={"text": label})
    recorder.append(turn, turn_level=True)
    state = TurnState(
        writer=recorder,
        turn_id=turn.id,
        runtime=Runtime(provider, model="replay", max_retries=0),
        call_id=turn.id,
        ask=_nobody_answers,
    )
    with using_turn(state):
        yield provider
    if provider.unused:
        left = ", ".join(f"call {r.place + 1} of function {r.function}" for r in provider.unused)
        tail = f"\n{hint}" if hint else ""
        raise AssertionError(f"{label} no longer makes the recorded {left}{tail}")


def _nobody_answers(question: str, choices: list[str] | None) -> str | None:
    return None  # a replayed test has no one to ask: the question ends unanswered
