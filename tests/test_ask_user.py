"""``ask_user``: an ``ask_user`` node (``awaiting`` → ``answered`` / ``unanswered``), a
pluggable answer handler, and no silent hang when nobody can answer."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import reopen

from openprogram import agentic_function, ask_user, session_context
from openprogram.agentic_programming.ask_user import (
    set_default_ask_user_handler,
    using_ask_user_handler,
)
from openprogram.agentic_programming.runtime import Runtime
from openprogram.providers.test import TestProvider


class NotATty:
    def isatty(self) -> bool:
        return False

    def readline(self, *_: Any) -> str:  # pragma: no cover - must never be reached
        raise AssertionError("ask_user read a stdin that is no terminal: it would hang there")


@agentic_function
def plan_trip(city: str, runtime: Runtime | None = None) -> Any:
    """Plan a trip, asking the user what they like."""
    assert runtime is not None
    ask_user(f"What do you like to do in {city}?", choices=["museums", "food"])
    return runtime.exec(f"Plan a day in {city}")


def test_handler_answers_and_the_node_goes_awaiting_to_answered(
    rt: Runtime, test_provider: TestProvider, op_home: Path
):
    states: list[str] = []

    def handler(question: str, choices: list[str] | None) -> str:
        from openprogram.agentic_programming.function import current_node
        from openprogram.store.vars import get_store

        writer = get_store()
        assert writer is not None
        asking = [n for n in writer.session.nodes() if n.kind == "ask_user"]
        states.extend(n.status for n in asking)  # what the DAG says while we are asked
        assert current_node() is not None and current_node().name == "plan_trip"  # type: ignore[union-attr]
        assert choices == ["museums", "food"]
        return "food"

    with session_context(runtime=rt) as handle, using_ask_user_handler(handler):
        plan_trip("Lyon")
    assert states == ["awaiting"]
    nodes = reopen(op_home, handle.session_id)
    (asked,) = [n for n in nodes if n.kind == "ask_user"]
    fn = next(n for n in nodes if n.kind == "function")
    assert asked.status == "answered" and asked.output == "food"
    assert asked.input == {
        "question": "What do you like to do in Lyon?",
        "choices": ["museums", "food"],
    }
    assert asked.caller == fn.id
    # the answer is an earlier step the next exec of the frame sees
    messages = test_provider.requests[-1].messages
    assert any("Answer: food" in str(m["content"]) for m in messages)


def test_no_handler_and_no_tty_returns_none_at_once(
    rt: Runtime, op_home: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(sys, "stdin", NotATty())
    with session_context(runtime=rt) as handle:
        assert ask_user("Is anyone there?") is None  # never a silent hang: stdin is not read
    (asked,) = [n for n in reopen(op_home, handle.session_id) if n.kind == "ask_user"]
    assert asked.status == "unanswered" and asked.output is None


def test_handler_interrupted_ends_the_node_cancelled(rt: Runtime, op_home: Path):
    def handler(question: str, choices: list[str] | None) -> str:
        raise KeyboardInterrupt

    with (
        pytest.raises(KeyboardInterrupt),
        session_context(runtime=rt) as handle,
        using_ask_user_handler(handler),
    ):
        ask_user("Continue?")
    nodes = reopen(op_home, handle.session_id)
    assert [n.status for n in nodes if n.kind == "ask_user"] == ["cancelled"]
    assert not [n for n in nodes if n.is_open]


def test_default_handler_and_context_handler_precedence(rt: Runtime):
    set_default_ask_user_handler(lambda q, c: "from default")
    try:
        with session_context(runtime=rt):
            assert ask_user("q") == "from default"
            with using_ask_user_handler(lambda q, c: "from context"):
                assert ask_user("q") == "from context"
            assert ask_user("q") == "from default"
    finally:
        set_default_ask_user_handler(None)


def test_ask_user_does_not_move_head(rt: Runtime, op_home: Path):
    with session_context(runtime=rt, create_runtime_if_none=False) as handle:
        before = handle.writer.head_id
        with using_ask_user_handler(lambda q, c: "yes"):
            ask_user("ok?")
        assert handle.writer.head_id == before


def test_a_broken_handler_ends_the_node_error(rt: Runtime, op_home: Path):
    def handler(question: str, choices: list[str] | None) -> str:
        raise RuntimeError("widget went away")

    with (
        pytest.raises(RuntimeError),
        session_context(runtime=rt) as handle,
        using_ask_user_handler(handler),
    ):
        ask_user("Continue?")
    (asked,) = [n for n in reopen(op_home, handle.session_id) if n.kind == "ask_user"]
    assert asked.status == "error" and "widget went away" in asked.metadata["error"]
