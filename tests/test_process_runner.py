"""``process_runner``: an agentic function in a spawned child, attached to the parent's turn.

The functions the child runs are defined here at the top level: the child imports this
module by name (spawn passes ``sys.path`` along).
"""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import pytest

from openprogram import ask_user, session_context
from openprogram.agent.process_runner import (
    ProcessRun,
    ProcessRunCancelled,
    ProcessRunError,
    run_in_process,
)
from openprogram.agentic_programming import (
    Runtime,
    agentic_function,
    current_node,
    using_ask_user_handler,
)
from openprogram.errors import UserError
from openprogram.store.session.store import SessionStore


# -- run in the child ---------------------------------------------------------------------------
@agentic_function
def summarize(text: str, runtime: Runtime | None = None) -> str:
    """Summarize the text in one sentence."""
    assert runtime is not None
    return str(runtime.exec(text))


@agentic_function
def outer(text: str) -> str:
    """Delegate to summarize."""
    return summarize(text)


@agentic_function
def explode(value: int) -> None:
    """Fails on purpose."""
    raise ValueError(f"bad input {value}")


@agentic_function
def colour() -> str | None:
    """Asks the user."""
    return ask_user("Which colour?", choices=["red", "blue"])


@agentic_function
def slow(seconds: float, stubborn: bool = False) -> None:
    """Runs for a long time; a stubborn run ignores Ctrl-C."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            time.sleep(0.02)
        except KeyboardInterrupt:
            if not stubborn:
                raise


# -- run in the parent --------------------------------------------------------------------------
@agentic_function
def parent_step(text: str, events: list[dict[str, Any]]) -> tuple[str, str]:
    """The frame the child's nodes hang under."""
    me = current_node()
    assert me is not None
    run = ProcessRun(outer, (text,), on_event=events.append)
    return me.id, run.start().wait(timeout=30)


def fresh_nodes(op_home: Path, session_id: str) -> list[Any]:
    """The session as a new process would open it (recovery included)."""
    return SessionStore(op_home).open(session_id).nodes()


def test_child_nodes_hang_under_the_parent_frame_and_reach_the_session(
    rt: Runtime, op_home: Path
) -> None:
    events: list[dict[str, Any]] = []
    with session_context(runtime=rt) as handle:
        frame_id, result = parent_step("the sky is blue", events)
        by_name = {n.name: n for n in handle.writer.session.nodes()}  # refreshed, not reopened
    assert result == "[test reply] the sky is blue"
    assert by_name["outer"].caller == frame_id
    assert by_name["summarize"].caller == by_name["outer"].id
    llm = by_name["test"]
    assert llm.kind == "llm" and llm.caller == by_name["summarize"].id
    assert llm.metadata["messages"][0] == {
        "role": "system",
        "content": "Summarize the text in one sentence.",
    }
    assert {"outer", "summarize", "test"} <= {e["node"]["name"] for e in events if "node" in e}
    on_disk = {n.name: n for n in fresh_nodes(op_home, handle.session_id)}
    assert on_disk["outer"].caller == frame_id
    assert all(n.status == "completed" for n in on_disk.values())


def test_an_exception_in_the_child_is_a_clear_error(rt: Runtime) -> None:
    with session_context(runtime=rt) as handle, pytest.raises(ProcessRunError) as info:
        run_in_process(explode, 42)
    assert str(info.value) == (
        "test_process_runner:explode failed in its child process: ValueError: bad input 42"
    )
    assert "raise ValueError" in info.value.traceback
    node = next(n for n in handle.writer.session.nodes() if n.name == "explode")
    assert node.status == "error"


def test_a_function_the_child_cannot_import_is_refused_up_front() -> None:
    def local() -> None:
        pass

    with pytest.raises(UserError, match="top level of an importable module"):
        ProcessRun(local)


def test_ask_user_is_answered_by_the_parent(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO())  # no terminal, even under `pytest -s`
    with session_context(runtime=rt) as handle:
        with using_ask_user_handler(lambda question, choices: f"blue ({question} {choices})"):
            answered = run_in_process(colour)
        unanswered = run_in_process(colour)  # no handler and no terminal: never a hang
    assert answered == "blue (Which colour? ['red', 'blue'])"
    assert unanswered is None
    asks = [n for n in handle.writer.session.nodes() if n.kind == "ask_user"]
    assert [n.status for n in asks] == ["answered", "unanswered"]


def wait_until_running(run: ProcessRun, events: list[dict[str, Any]], name: str) -> None:
    deadline = time.monotonic() + 15
    while not any(e.get("node", {}).get("name") == name for e in events):
        assert time.monotonic() < deadline, "the child never started"
        assert not run.poll(0.05), "the child ended early"


def test_stop_is_graceful_first_then_kills(rt: Runtime, op_home: Path) -> None:
    with session_context(runtime=rt) as handle:
        events: list[dict[str, Any]] = []
        polite = ProcessRun(slow, (60,), on_event=events.append).start()
        wait_until_running(polite, events, "slow")
        polite.stop(timeout=10)
        with pytest.raises(ProcessRunCancelled):
            polite.wait()
        assert polite.process is not None and polite.process.exitcode == 0  # it cleaned up

        events.clear()
        stubborn = ProcessRun(slow, (60, True), on_event=events.append).start()
        wait_until_running(stubborn, events, "slow")
        stubborn.stop(timeout=0.5)
        with pytest.raises(ProcessRunCancelled, match="killed"):
            stubborn.wait()
        statuses = sorted(n.status for n in handle.writer.session.nodes() if n.name == "slow")
    assert statuses == ["cancelled", "interrupted"]
    assert not [n for n in fresh_nodes(op_home, handle.session_id) if n.is_open]
