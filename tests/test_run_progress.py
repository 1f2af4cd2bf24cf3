"""What a long command-line run shows while it runs (``view/run_progress.py``): the stage
(function) running, each model call sent and ended, the tokens so far — a line per event
in a log, one line redrawn in a terminal — from the node writes of the run's session."""

from __future__ import annotations

import io
from pathlib import Path

from openprogram import agentic_function, create_runtime, session_context
from openprogram.agentic_programming.runtime import Runtime
from openprogram.providers.test import TestProvider
from openprogram.store.session.store import SessionStore
from openprogram.view.run_progress import RunProgress, showing_progress


@agentic_function
def survey(topic: str, runtime: Runtime | None = None) -> str:
    """Survey the topic."""
    assert runtime is not None
    return str(runtime.exec(topic))


@agentic_function
def research(topic: str) -> str:
    """Research the topic."""
    return survey(topic)


def events(text: str) -> list[str]:
    """Each line's label and event, without the counts and the elapsed time."""
    return [line.split(" · ")[0] for line in text.splitlines()]


def test_a_run_writes_a_line_per_stage_and_call_of_its_session_to_a_log(tmp_path: Path) -> None:
    log = io.StringIO()
    store = SessionStore(tmp_path / "home")
    runtime = create_runtime(TestProvider())
    try:
        with showing_progress("research", lambda: "nb_progress", log):
            with session_context("nb_progress", db=store, runtime=runtime):
                research("sparse attention")
            with session_context("nb_other", db=store, runtime=runtime):
                research("another session's run")  # not this run's: not shown
    finally:
        store.close()
    assert events(log.getvalue()) == [
        "research: survey started",
        "research: survey: call 1 sent",
        "research: survey: call 1 completed",
    ]
    assert "1 call · " in log.getvalue().splitlines()[-1]


def test_a_terminal_gets_one_line_redrawn_and_each_call_counted_once() -> None:
    tty = io.StringIO()
    progress = RunProgress("chat", tty, live=True)
    llm = {"id": "n1", "metadata": {"kind": "llm", "status": "completed", "usage": {}}}
    progress.on_write({**llm, "metadata": {**llm["metadata"], "usage": {"input_tokens": 1200}}})
    progress.on_write({"id": "n2", "metadata": {"kind": "llm", "status": "error"}})
    progress.on_write(llm)  # the same call written again: counted once
    progress.end()
    shown = tty.getvalue()
    assert shown.count("\r") == 2 and shown.endswith("\n") and "\n" not in shown[:-1]
    assert "chat: call 2 error · 2 calls · 1,200 tokens so far" in shown
