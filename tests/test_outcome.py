"""How a node ends, the same on every path: status, one error cap, redaction before the cut."""

from __future__ import annotations

import time

import pytest

from openprogram import agentic_function, session_context
from openprogram.agent.agent_loop import run_tool
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.ask_user import ask_user, using_ask_user_handler
from openprogram.context.nodes import Call, make_call
from openprogram.context.outcome import ERROR_CHARS, TRACEBACK_CHARS, finish

SECRET = "sk-live-0123456789abcdef"


@pytest.fixture(autouse=True)
def secret_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def straddling_the_error_cap() -> ValueError:
    # "ValueError: " + padding puts the secret across the ERROR_CHARS cut
    pad = "x" * (ERROR_CHARS - len("ValueError: ") - 5)
    return ValueError(pad + SECRET)


def test_finish_completes_with_output_and_duration() -> None:
    node = finish(make_call("function", "f"), output={"a": (1, 2)}, started=time.perf_counter())
    assert node.status == "completed" and node.output == {"a": [1, 2]}
    assert node.metadata["duration_ms"] >= 0 and "error" not in node.metadata


def test_an_error_is_redacted_before_it_is_cut() -> None:
    node = finish(make_call("function", "f"), exc=raised(straddling_the_error_cap()))
    error = node.metadata["error"]
    assert node.status == "error" and len(error) <= ERROR_CHARS
    assert SECRET[:5] not in error and error.endswith("x***")


def test_a_traceback_is_redacted_before_its_tail_is_kept() -> None:
    # the secret sits where the kept tail begins: cutting first would keep its end
    exc = raised(ValueError(SECRET + "y" * (TRACEBACK_CHARS - len(SECRET) + 3)))
    node = finish(make_call("function", "f"), exc=exc, with_traceback=True)
    assert len(node.metadata["traceback"]) <= TRACEBACK_CHARS
    assert SECRET[4:] not in node.metadata["traceback"]


def test_a_cancellation_has_no_traceback_and_an_explicit_status_wins() -> None:
    node = finish(make_call("function", "f"), exc=raised(KeyboardInterrupt()), with_traceback=True)
    assert node.status == "cancelled" and node.metadata["error"] == "KeyboardInterrupt"
    assert "traceback" not in node.metadata
    turn = finish(make_call("turn", "cell"), "interrupted", exc=KeyboardInterrupt())
    assert turn.status == "interrupted"


def nodes_of(sid: str, kind: str) -> list[Call]:
    db = default_db()
    db.close()
    return [n for n in db.open(sid).nodes() if n.kind == kind]


def test_every_path_writes_the_same_error_text() -> None:
    @agentic_function
    def failing() -> None:
        """Fail."""
        raise straddling_the_error_cap()

    def handler(question: str, choices: list[str] | None) -> str:
        raise straddling_the_error_cap()

    with session_context("same_error") as h, using_ask_user_handler(handler):
        with pytest.raises(ValueError):
            failing()
        with pytest.raises(ValueError):
            ask_user("ok?")
        run_tool({"name": "bad", "arguments": {}}, {"bad": failing}, lambda event: None)
    errors = {
        kind: [n.metadata["error"] for n in nodes_of(h.session_id, kind)]
        for kind in ("function", "ask_user", "tool")
    }
    texts = {text for found in errors.values() for text in found}
    assert len(texts) == 1, errors  # one cap, one redaction, on every path
    (text,) = texts
    assert len(text) <= ERROR_CHARS and SECRET[:5] not in text


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str exploded")


class NotText(Exception):
    def __str__(self) -> str:
        return 42  # type: ignore[return-value]


@pytest.mark.parametrize("kind", [BadStr, NotText])
def test_an_exception_whose_str_fails_propagates_unchanged_and_the_node_ends_error(
    kind: type[Exception],
) -> None:
    @agentic_function
    def fails(x: str, runtime=None) -> None:  # type: ignore[no-untyped-def]
        """Fail."""
        raise kind("x")

    with session_context() as s, pytest.raises(kind):
        fails("a")
    (node,) = [n for n in default_db().open(s.session_id).nodes() if n.name == "fails"]
    failed = "RuntimeError" if kind is BadStr else "TypeError"
    assert node.status == "error"
    assert node.metadata["error"] == f"<{kind.__name__} (str() failed: {failed})>"
