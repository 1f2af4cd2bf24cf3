"""What an exported session test imports (``openprogram/testing.py``): ``replaying`` answers
a block's LLM calls from recorded ones and refuses a call it has no answer for, naming it;
``as_recorded`` is a value as a session records it (JSON data, secrets masked)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from openprogram import agentic_function
from openprogram.agentic_programming.runtime import Runtime
from openprogram.errors import ReplayMiss
from openprogram.testing import as_recorded, replaying

KEY = "sk-testing-" + "Zq9" * 8


@agentic_function
def triage(ticket: str, runtime: Runtime | None = None) -> str:
    """Classify the ticket."""
    assert runtime is not None
    return str(runtime.exec(ticket))


def recorded_call(ticket: str, reply: str) -> dict[str, object]:
    """The call ``triage(ticket)`` makes, as an exported test holds it."""
    messages = [
        {"role": "system", "content": "Classify the ticket."},
        {"role": "user", "content": ticket},
    ]
    return {"function": "triage", "messages": messages, "settings": {}, "reply": reply}


def test_a_recorded_call_is_answered_and_an_unknown_one_is_named() -> None:
    with replaying([recorded_call("crash on save", "bug")], label="test_one"):
        assert triage("crash on save") == "bug"
    with (
        pytest.raises(AssertionError, match="test_edited no longer makes the recorded call 1"),
        replaying([recorded_call("crash on save", "bug")], label="test_edited"),
        pytest.raises(ReplayMiss, match="test_edited: LLM call 1 of function triage"),
    ):
        triage("crash when saving")  # the prompt changed: no recorded answer
    with replaying([], label="test_empty"), pytest.raises(ReplayMiss) as missed:
        triage("the app crashes on save")
    assert "test_empty: LLM call 1 of function triage" in str(missed.value)
    assert "it recorded no LLM calls" in str(missed.value)


@dataclass
class Ticket:
    title: str
    token: str


def test_a_value_as_recorded_is_json_data_with_secrets_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    recorded = as_recorded({"ticket": Ticket("crash", KEY), "tags": ("ui", "save")})
    assert recorded == {"ticket": {"title": "crash", "token": "***"}, "tags": ["ui", "save"]}
