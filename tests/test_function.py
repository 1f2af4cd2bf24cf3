"""``@agentic_function`` under ``session_context`` and in a plain script (issue 3).

The seed's table row by row — the docstring reaches the model (once), nodes persist, a
second exec sees the first, later turns see earlier ones, nested calls carry ``caller``,
``runtime`` is injected — then every exit path of a decorated call, sync and async.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_vars_clear, reopen

from openprogram import agentic_function, create_runtime, session_context
from openprogram.agentic_programming import function as fn_mod
from openprogram.agentic_programming.function import get_call_id
from openprogram.agentic_programming.runtime import Runtime
from openprogram.context.nodes import Call
from openprogram.errors import AgenticRecursionError
from openprogram.providers.test import TestProvider

DOC = "Classify the ticket as bug, feature or question."
REPO = Path(__file__).resolve().parent.parent


def count_in_messages(messages: list[dict[str, Any]], text: str) -> int:
    return sum(str(m.get("content", "")).count(text) for m in messages)


@agentic_function
def triage(ticket: str, runtime: Runtime | None = None) -> str:
    """Classify the ticket as bug, feature or question."""
    assert runtime is not None
    return str(runtime.exec(ticket, choices=["bug", "feature", "question"]))


# -- the seed's table ----------------------------------------------------------------------
def test_docstring_reaches_the_provider_exactly_once(rt: Runtime, test_provider: TestProvider):
    with session_context(runtime=rt):
        assert triage("the app crashes on save") == "bug"
    (request,) = test_provider.requests
    assert count_in_messages(request.messages, DOC) == 1
    assert request.messages[0] == {"role": "system", "content": DOC}
    assert request.messages[-1]["content"] == "the app crashes on save"
    assert_vars_clear()


def test_nodes_persist_and_a_fresh_store_reads_them(rt: Runtime, op_home: Path):
    with session_context(runtime=rt) as handle:
        triage("the app crashes on save")
    nodes = reopen(op_home, handle.session_id)
    fn = next(n for n in nodes if n.kind == "function")
    llm = next(n for n in nodes if n.kind == "llm")
    assert fn.name == "triage" and fn.status == "completed"
    assert fn.metadata["doc"] == DOC
    assert fn.input == {"ticket": "the app crashes on save"}  # runtime is not an input
    assert fn.output == "bug"
    assert isinstance(fn.metadata["duration_ms"], float)
    assert llm.status == "completed" and llm.caller == fn.id and llm.output == "bug"


def test_second_exec_in_the_same_frame_sees_the_first(rt: Runtime, test_provider: TestProvider):
    @agentic_function
    def two_steps(topic: str, runtime: Runtime | None = None) -> str:
        """Research the topic in two steps."""
        assert runtime is not None
        runtime.exec(f"first look at {topic}")
        return str(runtime.exec("now summarise"))

    test_provider.reply = "FIRST-REPLY"
    with session_context(runtime=rt):
        two_steps("volcanoes")
    first, second = test_provider.requests
    assert count_in_messages(first.messages, "first look at volcanoes") == 1
    texts = [m["content"] for m in second.messages]
    assert "first look at volcanoes" in texts and "FIRST-REPLY" in texts
    assert texts.index("first look at volcanoes") < texts.index("FIRST-REPLY")
    assert texts[-1] == "now summarise"
    assert count_in_messages(second.messages, "Research the topic in two steps.") == 1


def test_a_later_turn_sees_earlier_turns_as_history(rt: Runtime, test_provider: TestProvider):
    with session_context(runtime=rt) as first:
        triage("the app crashes on save")
    with session_context(first.session_id, runtime=rt) as second:
        assert not second.created
        triage("please add dark mode")
    later = test_provider.requests[-1].messages
    assert any("the app crashes on save" in str(m["content"]) for m in later[:-1])
    assert later[-1]["content"] == "please add dark mode"
    assert count_in_messages(later, DOC) == 1  # the same function again: still once


def test_nested_calls_carry_caller(rt: Runtime, op_home: Path):
    seen: dict[str, str | None] = {}

    @agentic_function
    def inner(x: int, runtime: Runtime | None = None) -> str:
        """Inner step."""
        assert runtime is not None
        seen["inner"] = get_call_id()
        return str(runtime.exec(f"inner {x}"))

    @agentic_function
    def outer(runtime: Runtime | None = None) -> str:
        """Outer step."""
        seen["outer"] = get_call_id()
        return inner(1)

    with session_context(runtime=rt) as handle:
        outer()
        assert get_call_id() is None
    nodes = {n.id: n for n in reopen(op_home, handle.session_id)}
    outer_node = nodes[seen["outer"] or ""]
    inner_node = nodes[seen["inner"] or ""]
    llm = next(n for n in nodes.values() if n.kind == "llm")
    assert outer_node.caller is None
    assert inner_node.caller == outer_node.id
    assert llm.caller == inner_node.id
    assert rt.provider is not None
    messages = rt.provider.requests[-1].messages  # type: ignore[attr-defined]
    assert count_in_messages(messages, "Inner step.") == 1
    assert count_in_messages(messages, "Outer step.") == 0  # only the current frame's doc


def test_runtime_is_injected_from_the_ambient_runtime(rt: Runtime):
    got: list[Any] = []

    @agentic_function
    def which(runtime: Runtime | None = None) -> None:
        got.append(runtime)

    other = create_runtime(TestProvider(), backoff=0.0)
    with session_context(runtime=rt):
        which()
        which(runtime=other)  # an explicit runtime wins
        which(other)
    assert got == [rt, other, other]


def test_configured_form_names_the_node(rt: Runtime, op_home: Path):
    @agentic_function(name="custom_name")
    def f() -> int:
        return 1

    with session_context(runtime=rt) as handle:
        f()
    names = [n.name for n in reopen(op_home, handle.session_id) if n.kind == "function"]
    assert names == ["custom_name"]


# -- a plain script with no context ------------------------------------------------------
SCRIPT = textwrap.dedent(
    """
    import json, sys
    from openprogram import agentic_function, ask_user

    @agentic_function
    def step(x, runtime=None):
        \"\"\"Answer the question about x.\"\"\"
        reply = runtime.exec(f"question {x} of " + sys.argv[1])
        print(json.dumps(runtime.provider.requests[-1].messages), flush=True)
        return reply

    step(1)
    step(2)
    print(json.dumps({"asked": ask_user("anyone there?")}), flush=True)
    """
)


def run_script(tmp_path: Path, home: Path, tag: str, session: str | None = None):
    script = tmp_path / "plain.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "ANTHROPIC"))}
    env.update(OPENPROGRAM_HOME=str(home), OPENPROGRAM_PROVIDER="test", PYTHONPATH=str(REPO))
    env.pop("OPENPROGRAM_SESSION", None)
    if session:
        env["OPENPROGRAM_SESSION"] = session
    return subprocess.run(
        [sys.executable, str(script), tag],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_plain_script_opens_one_adhoc_session_and_continues_it(tmp_path: Path):
    home = tmp_path / "script_home"
    first = run_script(tmp_path, home, "run-one")
    assert first.returncode == 0, first.stderr
    announced = [line for line in first.stderr.splitlines() if "OPENPROGRAM_SESSION=" in line]
    assert len(announced) == 1, first.stderr  # announced once, not once per call
    sid = announced[0].split("OPENPROGRAM_SESSION=")[1].split()[0]
    sessions = [p.name for p in (home / "sessions").iterdir() if not p.name.startswith(".")]
    assert sessions == [sid]  # one session for the process, never one per call
    lines = first.stdout.splitlines()
    assert json.loads(lines[-1]) == {"asked": None}  # no tty: unanswered at once
    second_step = json.loads(lines[1])
    assert any("question 1 of run-one" in str(m["content"]) for m in second_step[:-1])
    nodes = reopen(home, sid)
    turns = {n.turn for n in nodes if n.kind in ("function", "ask_user")}
    assert len(turns) == 3  # step, step, ask_user: three turns of the one session
    assert [n.status for n in nodes if n.kind == "ask_user"] == ["unanswered"]

    again = run_script(tmp_path, home, "run-two", session=sid)
    assert again.returncode == 0, again.stderr
    assert "OPENPROGRAM_SESSION=" not in again.stderr  # it was given, nothing new to say
    sessions = [p.name for p in (home / "sessions").iterdir() if not p.name.startswith(".")]
    assert sessions == [sid]
    continued = json.loads(again.stdout.splitlines()[0])
    history = " ".join(str(m["content"]) for m in continued[:-1])
    assert "question 1 of run-one" in history and "question 2 of run-one" in history
    assert len([n for n in reopen(home, sid) if n.kind == "function"]) == 4


def test_bare_calls_in_process_share_one_session(
    monkeypatch: pytest.MonkeyPatch, op_home: Path, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setattr(fn_mod, "_process_session", None)
    monkeypatch.setenv("OPENPROGRAM_PROVIDER", "test")

    @agentic_function
    def bare(x: int) -> int:
        return x * 2

    assert bare(1) == 2 and bare(2) == 4
    assert_vars_clear()
    err = capsys.readouterr().err
    assert err.count("OPENPROGRAM_SESSION=") == 1
    (session,) = [p for p in (op_home / "sessions").iterdir() if not p.name.startswith(".")]
    nodes = reopen(op_home, session.name)
    assert [n.output for n in nodes if n.kind == "function"] == [2, 4]
    assert len({n.turn for n in nodes if n.kind == "function"}) == 2


# -- every exit path -----------------------------------------------------------------------
def finished_function(home: Path, session_id: str, name: str) -> list[Call]:
    nodes = reopen(home, session_id)
    assert not [n for n in nodes if n.is_open], "a node stayed running"
    found = [n for n in nodes if n.kind == "function" and n.name == name]
    for node in found:
        assert isinstance(node.metadata.get("duration_ms"), float)
    return found


def test_return_path(rt: Runtime, op_home: Path):
    @agentic_function
    def ok(x: int) -> dict[str, int]:
        return {"x": x}

    with session_context(runtime=rt) as handle:
        assert ok(3) == {"x": 3}
        assert get_call_id() is None and fn_mod._depth.get() == 0
    assert_vars_clear()
    (node,) = finished_function(op_home, handle.session_id, "ok")
    assert node.status == "completed" and node.output == {"x": 3}


def test_exception_path(rt: Runtime, op_home: Path):
    @agentic_function
    def boom() -> None:
        raise ValueError("broken on purpose")

    with session_context(runtime=rt) as handle:
        with pytest.raises(ValueError, match="broken on purpose"):
            boom()
        assert get_call_id() is None and fn_mod._depth.get() == 0
    assert_vars_clear()
    (node,) = finished_function(op_home, handle.session_id, "boom")
    assert node.status == "error"
    assert node.metadata["error"] == "ValueError: broken on purpose"
    assert "broken on purpose" in node.metadata["traceback"]
    assert "in boom" in node.metadata["traceback"]


def test_keyboard_interrupt_path(rt: Runtime, op_home: Path):
    @agentic_function
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), session_context(runtime=rt) as handle:
        interrupted()
    assert_vars_clear()
    (node,) = finished_function(op_home, handle.session_id, "interrupted")
    assert node.status == "cancelled"
    with session_context(handle.session_id, runtime=rt):  # and the next call works
        assert triage("next") == "bug"


def test_recursion_cap_path(rt: Runtime, op_home: Path):
    @agentic_function(max_depth=4)
    def down(n: int) -> int:
        return down(n + 1)

    with session_context(runtime=rt) as handle:
        with pytest.raises(AgenticRecursionError, match="nested deeper than 4"):
            down(0)
        assert get_call_id() is None and fn_mod._depth.get() == 0
    assert_vars_clear()
    nodes = finished_function(op_home, handle.session_id, "down")
    assert len(nodes) == 5  # four frames and the refused fifth, each recorded
    assert {n.status for n in nodes} == {"error"}
    assert all("AgenticRecursionError" in n.metadata["error"] for n in nodes)
    callers = [n.caller for n in sorted(nodes, key=lambda n: n.seq)]
    assert (
        callers[0] is None
        and callers[1:] == [n.id for n in sorted(nodes, key=lambda n: n.seq)][:-1]
    )


def test_async_function_every_path(rt: Runtime, op_home: Path):
    @agentic_function
    async def fine(x: int, runtime: Runtime | None = None) -> str:
        """Async doc."""
        assert runtime is rt
        await asyncio.sleep(0)
        return f"ok {x}"

    @agentic_function
    async def fails() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("async failure")

    @agentic_function
    async def interrupted() -> None:
        raise KeyboardInterrupt

    started = asyncio.Event()

    @agentic_function
    async def sleeper() -> None:
        started.set()
        await asyncio.sleep(30)  # until cancelled

    async def main() -> None:
        assert await fine(1) == "ok 1"
        with pytest.raises(RuntimeError):
            await fails()
        with pytest.raises(KeyboardInterrupt):
            await interrupted()
        task = asyncio.ensure_future(sleeper())
        await started.wait()  # its node is open: cancelling ends it
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert get_call_id() is None and fn_mod._depth.get() == 0

    with session_context(runtime=rt) as handle:
        asyncio.run(main())
    assert_vars_clear()
    status = {n.name: n.status for n in reopen(op_home, handle.session_id) if n.kind == "function"}
    assert status == {
        "fine": "completed",
        "fails": "error",
        "interrupted": "cancelled",
        "sleeper": "cancelled",
    }
    assert not [n for n in reopen(op_home, handle.session_id) if n.is_open]


def test_an_unprintable_result_still_finishes_the_node(rt: Runtime, op_home: Path):
    class Weird:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    @agentic_function
    def odd() -> Weird:
        return Weird()

    with session_context(runtime=rt) as handle:
        odd()
    (node,) = finished_function(op_home, handle.session_id, "odd")
    assert node.status == "completed" and "Weird" in str(node.output)


# -- nothing lost if the process is killed ----------------------------------------------------
KILLED_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from openprogram import agentic_function, create_runtime, session_context
    from openprogram.providers.test import FunctionProvider

    def slow(request):
        print("READY", flush=True)
        time.sleep(60)

    @agentic_function
    def long_job(topic, runtime=None):
        \"\"\"Work on the topic for a long time.\"\"\"
        runtime.exec(f"first pass on {topic}")

    with session_context(sys.argv[1], runtime=create_runtime(FunctionProvider(slow))):
        long_job("glaciers")
    """
)


def test_a_function_node_survives_sigkill(tmp_path: Path):
    import signal

    home = tmp_path / "killed_home"
    script = tmp_path / "killed.py"
    script.write_text(KILLED_SCRIPT)
    env = dict(os.environ, OPENPROGRAM_HOME=str(home), PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, str(script), "killed_session"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"  # mid-exec, nothing committed yet
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    nodes = reopen(home, "killed_session")  # a fresh store recovers the dead journal
    (fn,) = [n for n in nodes if n.kind == "function"]
    (llm,) = [n for n in nodes if n.kind == "llm"]
    assert fn.name == "long_job" and fn.input == {"topic": "glaciers"}
    assert fn.metadata["doc"] == "Work on the topic for a long time."
    assert fn.status == "interrupted" and fn.metadata["recovered"] is True
    assert llm.status == "interrupted" and llm.caller == fn.id
    assert llm.input["content"] == "first pass on glaciers"
    assert not [n for n in nodes if n.is_open]


def test_parallel_calls_from_the_context_executor_stay_in_the_turn(rt: Any, op_home: Path) -> None:
    from openprogram import ContextThreadPoolExecutor

    @agentic_function
    def triage(ticket: str, runtime: Any = None) -> str:
        """Classify the ticket as bug, feature or question."""
        return str(runtime.exec(ticket, choices=["bug", "feature", "question"]))

    @agentic_function
    def batch(tickets: list[str]) -> list[str]:
        """Triage many tickets at once."""
        with ContextThreadPoolExecutor(max_workers=4) as pool:
            return list(pool.map(triage, tickets))

    with session_context(runtime=rt) as s:
        assert batch([f"ticket {i}" for i in range(8)]) == ["bug"] * 8
    nodes = reopen(op_home, s.session_id)
    (outer,) = [n for n in nodes if n.name == "batch"]
    inner = [n for n in nodes if n.name == "triage"]
    assert len(inner) == 8 and {n.caller for n in inner} == {outer.id}
    assert all(n.status == "completed" for n in nodes)
