"""Questions beyond ``ask_user`` (issue 22): ``runtime.ask`` with choices, several, an own
answer, a timeout and a default; ``confirm``; ``form``; an explicit decline; nobody to
answer.  Each is one ``ask_user`` node of the DAG, answered by the one handler."""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import reopen

from openprogram import agentic_function, session_context
from openprogram.agentic_programming.ask_user import using_ask_user_handler
from openprogram.agentic_programming.questions import DECLINE
from openprogram.agentic_programming.runtime import Runtime
from openprogram.context.nodes import Call
from openprogram.errors import UserError
from openprogram.providers.test import TestProvider


class Script:
    """A handler answering from a list, recording what it was asked."""

    def __init__(self, *answers: str | None) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, list[str] | None]] = []

    def __call__(self, question: str, choices: list[str] | None) -> str | None:
        self.asked.append((question, choices))
        return self.answers.pop(0)


def questions(handle: Any) -> list[Call]:
    return [n for n in handle.writer.session.nodes() if n.kind == "ask_user"]


def asking(rt: Runtime, handler: Callable[..., Any], fn: Callable[[], Any]) -> tuple[Any, Any]:
    with session_context(runtime=rt) as handle, using_ask_user_handler(handler):
        value = fn()
    return value, handle


def test_ask_with_choices_takes_a_name_or_a_number_and_several(rt: Runtime) -> None:
    handler = Script("2", "RED, 1", "pink")
    with session_context(runtime=rt) as handle, using_ask_user_handler(handler):
        one = rt.ask("Which colour?", choices=["red", "blue"])
        several = rt.ask("Which colours?", choices=["red", "blue"], multi=True)
        custom = rt.ask("Or another?", choices=["red", "blue"], allow_custom=True)
    assert (one, several, custom) == ("blue", ["red", "red"], "pink")
    assert handler.asked[0] == ("Which colour? (/decline declines)", ["red", "blue"])
    assert "several: comma-separated" in handler.asked[1][0]
    first, second, third = questions(handle)
    assert (first.name, first.status, first.output) == ("ask", "answered", "blue")
    assert first.metadata["outcome"] == "answered"
    assert second.input == {"question": "Which colours?", "choices": ["red", "blue"], "multi": True}
    assert third.input["allow_custom"] is True


def test_an_answer_that_does_not_fit_is_asked_again_then_the_default(rt: Runtime) -> None:
    handler = Script("green", "3", "yellow")
    value, handle = asking(
        rt, handler, lambda: rt.ask("Which?", choices=["red", "blue"], default="red")
    )
    assert value == "red"
    assert len(handler.asked) == 3 and "answer with one of red, blue" in handler.asked[1][0]
    (node,) = questions(handle)
    assert (node.status, node.metadata["outcome"], node.output) == ("unanswered", "invalid", "red")


def test_ask_with_a_timeout_returns_the_default_and_the_node_says_why(
    rt: Runtime, test_provider: TestProvider, op_home: Path
) -> None:
    asked, release = threading.Event(), threading.Event()

    def slow_user(question: str, choices: list[str] | None) -> str:
        asked.set()
        release.wait()  # nobody types until the test is over
        return "too late"

    @agentic_function
    def plan(runtime: Runtime | None = None) -> Any:
        """Plan, asking the user first."""
        assert runtime is not None
        pace = runtime.ask("Fast or slow?", choices=["fast", "slow"], timeout=0.2, default="slow")
        runtime.exec(f"Plan at a {pace} pace")
        return pace

    try:
        value, handle = asking(rt, slow_user, plan)
    finally:
        release.set()
    assert asked.is_set() and value == "slow"
    (node,) = [n for n in reopen(op_home, handle.session_id) if n.kind == "ask_user"]
    assert (node.status, node.metadata["outcome"], node.output) == ("unanswered", "timeout", "slow")
    assert node.input["timeout"] == 0.2 and node.input["default"] == "slow"
    assert node.caller == next(n.id for n in reopen(op_home, handle.session_id) if n.name == "plan")
    said = [m["content"] for m in test_provider.requests[-1].messages]
    assert (
        "Asked the user: Fast or slow?\nAnswer: (no answer: timeout; the default was used: slow)"
        in said
    )


def test_an_empty_answer_takes_the_default(rt: Runtime) -> None:
    value, _ = asking(rt, Script(""), lambda: rt.ask("Name?", default="Ada"))
    assert value == "Ada"


def test_decline_is_explicit_and_recorded(rt: Runtime) -> None:
    value, handle = asking(rt, Script(DECLINE), lambda: rt.ask("Your age?", default="42"))
    assert value is None  # a decline is not the default
    (node,) = questions(handle)
    assert (node.status, node.metadata["outcome"]) == ("unanswered", "declined")


def test_nobody_to_answer_ends_at_once_with_the_default(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    class NotATty:
        def isatty(self) -> bool:
            return False

    monkeypatch.setattr(sys, "stdin", NotATty())  # the terminal handler: nobody there
    with session_context(runtime=rt) as handle:
        # a timeout of an hour is never waited for: nobody can answer, so it ends now
        value = rt.ask("Anyone?", timeout=3600, default="no one")
        yes = rt.confirm("Proceed?", default=True, timeout=3600)
    assert (value, yes) == ("no one", True)
    assert [n.metadata["outcome"] for n in questions(handle)] == ["no_one", "no_one"]
    assert not [n for n in handle.writer.session.nodes() if n.is_open]


@pytest.mark.parametrize(
    ("answers", "expected", "outcome"),
    [
        (["y"], True, "answered"),
        (["maybe", "NO"], False, "answered"),
        ([DECLINE], False, "declined"),
    ],
)
def test_confirm(rt: Runtime, answers: list[str], expected: bool, outcome: str) -> None:
    value, handle = asking(rt, Script(*answers), lambda: rt.confirm("Delete the draft?"))
    assert value is expected
    (node,) = questions(handle)
    assert (node.name, node.metadata["outcome"], node.input["choices"]) == (
        "confirm",
        outcome,
        ["yes", "no"],
    )


FIELDS = [
    "title",
    {"name": "year", "type": "int", "prompt": "Published in"},
    {"name": "venue", "choices": ["journal", "conference"], "default": "journal"},
    {"name": "peer_reviewed", "type": "bool"},
]


def test_form_asks_each_field_and_types_the_answers(rt: Runtime) -> None:
    handler = Script("Attention", "twenty", "2017", "", "yes")
    value, handle = asking(rt, handler, lambda: rt.form(FIELDS, title="The paper"))
    assert value == {"title": "Attention", "year": 2017, "venue": "journal", "peer_reviewed": True}
    assert handler.asked[1][0] == "The paper — Published in"
    assert "a int; again:" in handler.asked[2][0]  # 'twenty' is not a number: asked again
    (node,) = questions(handle)  # the whole form is one node
    assert (node.name, node.status, node.output) == ("form", "answered", value)
    assert node.input["fields"][1] == {"name": "year", "prompt": "Published in", "type": "int"}


def test_a_declined_form_is_none_and_a_timed_out_one_keeps_the_defaults(rt: Runtime) -> None:
    declined, _ = asking(rt, Script("Attention", DECLINE), lambda: rt.form(FIELDS))
    assert declined is None
    release = threading.Event()

    def gone(question: str, choices: list[str] | None) -> str:
        if question.startswith("a"):
            return "x"
        release.wait()
        return "late"

    fields = [{"name": "a"}, {"name": "b", "default": 2}]
    try:
        value, handle = asking(rt, gone, lambda: rt.form(fields, timeout=0.2))
    finally:
        release.set()
    assert value == {"a": "x", "b": 2}
    (node,) = questions(handle)
    assert (node.metadata["outcome"], node.metadata["answered"]) == ("timeout", ["a"])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda rt: rt.form("title"), "form() takes a list of fields"),
        (lambda rt: rt.form([{"nom": "x"}]), "a form field is"),
        (lambda rt: rt.form(["a", "a"]), "two form fields have the same name"),
        (lambda rt: rt.form([{"name": "x", "type": "date"}]), "type is one of"),
        (lambda rt: rt.ask("?", timeout=-1), "timeout= is a number of seconds"),
        (lambda rt: rt.ask("?", choices="ab"), "choices= is a list of strings"),
    ],
)
def test_bad_questions_are_one_line_errors(
    rt: Runtime, call: Callable[[Runtime], Any], message: str
) -> None:
    with session_context(runtime=rt), pytest.raises(UserError, match=re.escape(message)):
        call(rt)


def test_ask_user_is_the_same_mechanism(rt: Runtime) -> None:
    from openprogram import ask_user

    handler = Script("anything at all")
    value, handle = asking(rt, handler, lambda: ask_user("Free text?", choices=["a", "b"]))
    assert value == "anything at all" and handler.asked == [("Free text?", ["a", "b"])]
    (node,) = questions(handle)
    assert (node.name, node.input) == (
        "ask_user",
        {"question": "Free text?", "choices": ["a", "b"]},
    )
