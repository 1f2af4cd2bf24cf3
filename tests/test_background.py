"""Long runs that do not block: ``openprogram.background(fn)`` and
``%%openprogram --background`` run on a thread as one turn of the session, report
progress from the nodes they write, stop after the call in flight (a second stop kills),
and a killed kernel leaves nothing ``running`` and a run that resumes."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from openprogram import agentic_function, background, create_runtime
from openprogram.agent.background import BackgroundRun, Progress
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.stopping import (
    check_stop,
    killable,
    raise_in_thread,
    using_stop_flag,
)
from openprogram.context.nodes import Call
from openprogram.errors import RunKilled, RunStopped
from openprogram.providers.base import LLMRequest, LLMResponse, Usage
from openprogram.providers.test import FunctionProvider
from openprogram_magics.cells.background import MIME_PROGRESS
from tests.test_magics import Shell
from tests.waiting import until
from tests.wire_server import Reply


class Gate:
    """A provider whose calls wait until the test lets each one through."""

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.allowed = threading.Semaphore(0)
        self.provider = FunctionProvider(self.reply)

    def reply(self, request: LLMRequest) -> LLMResponse:
        self.entered.release()
        assert self.allowed.acquire(timeout=30), "the test never let the call through"
        return LLMResponse("ok", usage=Usage(10, 5))

    def let_through(self, n: int = 1) -> None:
        for _ in range(n):
            assert self.entered.acquire(timeout=30)
            self.allowed.release()


@agentic_function
def step(i: int, runtime=None) -> str:  # type: ignore[no-untyped-def]
    """Do one step."""
    return str(runtime.exec(f"step {i}"))


def steps(n: int) -> list[str]:
    return [step(i) for i in range(n)]


def nodes_of(run: BackgroundRun) -> list[Call]:
    assert run.session_id
    return default_db().open(run.session_id).nodes()


def test_a_background_run_returns_at_once_and_reports_progress_from_its_nodes(
    op_home: Path,
) -> None:
    gate = Gate()
    seen: list[Progress] = []
    run = background(steps, 3, runtime=create_runtime(gate.provider))
    run.on_progress(seen.append)
    assert run.running and run.progress().calls == 0  # nothing answered yet
    gate.let_through(3)
    assert run.wait(30) == ["ok", "ok", "ok"]
    final = run.progress()
    llms = [n for n in nodes_of(run) if n.kind == "llm"]
    assert (final.state, final.calls, final.tokens) == ("completed", 3, 45)
    assert final.calls == len(llms) and final.tokens == sum(
        n.metadata["usage"]["input_tokens"] + n.metadata["usage"]["output_tokens"] for n in llms
    )
    assert "step" in {p.stage for p in seen} and [p.calls for p in seen if p.calls][:1] == [1]


def test_stop_ends_the_run_after_the_call_in_flight(op_home: Path) -> None:
    gate = Gate()
    run = background(steps, 10, runtime=create_runtime(gate.provider))
    gate.let_through(1)
    assert gate.entered.acquire(timeout=30)  # the second call is in flight
    assert run.stop().startswith("stopping after the current call")
    gate.allowed.release()  # it finishes; no third call is sent
    with pytest.raises(RunStopped):
        run.wait(30)
    assert len(gate.provider.requests) == 2 and run.progress().state == "stopped"
    nodes = nodes_of(run)
    assert [n.status for n in nodes if n.kind == "llm"] == ["completed", "completed"]
    assert not [n for n in nodes if n.status == "running"]
    assert [n.status for n in nodes if n.kind == "function"] == ["completed"] * 2 + ["cancelled"]


def test_a_second_stop_kills_a_call_that_does_not_return(op_home: Path) -> None:
    forever, entered = threading.Event(), threading.Event()

    def hang(request: LLMRequest) -> str:
        entered.set()
        while not forever.wait(0.01):  # a provider stuck in Python code
            pass
        return "never"

    run = background(steps, 1, runtime=create_runtime(FunctionProvider(hang)))
    assert entered.wait(30)
    run.stop()
    assert run.running  # the first stop waits for the call
    assert run.stop() == "killed"
    with pytest.raises(RunKilled):
        run.wait(10)
    assert {n.kind: n.status for n in nodes_of(run) if n.kind != "root"} == {
        "function": "cancelled",
        "llm": "cancelled",
    }
    forever.set()


def test_the_kill_flag_alone_ends_a_call_in_flight_and_the_next_call() -> None:
    # A kill raised into the run's thread can land in a thread being started at that
    # moment instead (CPython matches thread states by ident); the flag still ends the wait.
    release, entered = threading.Event(), threading.Event()
    stop, kill = threading.Event(), threading.Event()
    outcome: list[BaseException] = []

    def call() -> str:
        entered.set()
        release.wait()
        return "late"

    def waiter() -> None:
        with using_stop_flag(stop, kill):
            try:
                killable(call)
            except BaseException as exc:
                outcome.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    assert entered.wait(30)
    stop.set()
    kill.set()
    thread.join(30)
    release.set()
    assert not thread.is_alive() and [type(e) for e in outcome] == [RunKilled]
    with using_stop_flag(stop, kill), pytest.raises(RunKilled):
        check_stop()  # the run's next LLM call: killed, not just stopped


def _calls_until_killed(
    stop: threading.Event, kill: threading.Event, looping: threading.Event, ended: list[Any]
) -> None:
    """A run that keeps calling (each call starts a helper thread) until it is killed."""
    with using_stop_flag(stop, kill):
        try:
            while True:
                killable(lambda: 1)
                looping.set()
        except RunKilled as exc:
            ended.append(exc)


def test_a_kill_while_the_run_starts_a_thread_still_ends_the_run() -> None:
    # A run calling the model starts a thread per call (killable).  CPython gives an
    # exception raised into the run's thread to the first thread state with its ident, and
    # a thread being started carries its starter's: a kill there used to hit the new
    # thread, and the run then waited in Thread.start() for good (~1 stop in 10 here).
    for _trial in range(100):
        stop, kill, looping = threading.Event(), threading.Event(), threading.Event()
        ended: list[Any] = []
        thread = threading.Thread(
            target=_calls_until_killed, args=(stop, kill, looping, ended), daemon=True
        )
        thread.start()
        assert looping.wait(30)
        stop.set()
        raise_in_thread(thread, RunKilled)  # what a second stop() does
        kill.set()
        thread.join(30)
        assert not thread.is_alive() and [type(e) for e in ended] == [RunKilled]


@pytest.fixture
def shell(bare_shell: Shell) -> Shell:
    return bare_shell


def test_a_background_cell_returns_while_it_runs_and_other_cells_execute(shell: Shell) -> None:
    gate = Gate()
    shell.use_runtime(gate.provider)
    shell.ip.user_ns["steps"] = steps
    shell.run("%%openprogram --background\nfirst = steps(2)\nresult = steps(1)")
    run = shell.magics.background
    assert run is not None and run.running and "result" not in shell.ip.user_ns
    shell.run("%%openprogram\nmeanwhile = 6 * 7")  # another cell runs and returns
    assert shell.ip.user_ns["meanwhile"] == 42 and run.running
    gate.let_through(3)
    run.wait(30)
    assert shell.ip.user_ns["result"] == ["ok"]  # the body ran in the notebook's namespace
    progress = [
        o["data"][MIME_PROGRESS] for o in shell.display.outputs if MIME_PROGRESS in o["data"]
    ]
    assert progress[0]["state"] == "running" and progress[-1]["state"] == "completed"
    assert progress[-1]["calls"] == 3 and {1, 2} <= {p["calls"] for p in progress}
    nodes = default_db().open(str(run.session_id)).nodes()
    turns = [n for n in nodes if n.kind == "turn"]
    assert [t.status for t in turns] == ["completed", "completed"]
    assert turns[1].predecessor == turns[0].id  # the next cell chains after the background one


def test_a_background_cell_may_await_like_any_cell(shell: Shell) -> None:
    shell.use_runtime(FunctionProvider(lambda request: "awaited"))
    shell.run(
        "%%openprogram --background\nimport asyncio\n"
        "from openprogram.agentic_programming.function import get_current_runtime\n"
        "await asyncio.sleep(0)\nanswer = await get_current_runtime().aexec('go')"
    )
    run = shell.magics.background
    assert run is not None
    run.wait(30)
    assert shell.ip.user_ns["answer"] == "awaited"
    nodes = default_db().open(str(run.session_id)).nodes()
    assert [(n.kind, n.status) for n in nodes if n.kind in ("turn", "llm")] == [
        ("turn", "completed"),
        ("llm", "completed"),
    ]


def test_stop_command_stops_the_background_cell(shell: Shell) -> None:
    gate = Gate()
    shell.use_runtime(gate.provider)
    shell.ip.user_ns["steps"] = steps
    shell.run("%%openprogram -b\nsteps(5)")
    run = shell.magics.background
    assert run is not None
    gate.let_through(1)
    assert gate.entered.acquire(timeout=30)
    assert shell.line("stop").startswith("stopping")
    gate.allowed.release()
    with pytest.raises(RunStopped):
        run.wait(30)
    turn = next(n for n in default_db().open(str(run.session_id)).nodes() if n.kind == "turn")
    assert turn.status == "interrupted" and len(gate.provider.requests) == 2


SLOW_SCHEMA_PROVIDER = """
import json, time
from openprogram.providers import create_runtime
from openprogram.providers.test import FunctionProvider, sample_from_schema

def slow(request):
    time.sleep(0.4)
    return json.dumps(sample_from_schema(request.response_format))

from openprogram_magics import use_runtime
use_runtime(create_runtime(FunctionProvider(slow), backoff=0.0))
from openprogram.programs.research import ResearchWork, research_agent
ResearchWork("work", task="a task")
"""


@pytest.mark.kernel
@pytest.mark.timeout(120)
def test_a_killed_kernel_leaves_nothing_running_and_the_run_resumes(
    op_home: Path, tmp_path: Path
) -> None:
    from openprogram.programs.research import PIPELINE, run_research
    from tests.test_kernel_turns import Kernel, on_disk, start_kernel

    km, kc = start_kernel(op_home)
    k = Kernel(km, kc)
    work = op_home.parent / "work"
    try:
        k.run("%load_ext openprogram_magics\n%openprogram provider test")
        k.run(SLOW_SCHEMA_PROVIDER)
        k.run("%openprogram new --id nb_bg")  # --session names only a session there is
        k.run('%%openprogram --background --session nb_bg\nresearch_agent("work")')
        assert until((work / "gaps.json").exists, 60)
        os.kill(km.provisioner.process.pid, signal.SIGKILL)
        km.provisioner.process.wait(timeout=10)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    nodes = on_disk(op_home, "nb_bg")
    assert nodes and not [n for n in nodes if n.status == "running"]
    assert next(n for n in nodes if n.kind == "turn").status == "interrupted"
    from openprogram.providers.test import TestProvider

    done = [s for s in PIPELINE if (work / f"{s}.json").exists()]
    resumed = run_research(
        None, work_dir=work, session_id="nb_bg", runtime=create_runtime(TestProvider())
    )
    assert resumed.stages == list(PIPELINE[len(done) :]) and "survey" not in resumed.stages
    assert json.loads((work / "review.json").read_text())["decision"] == "revise"


def test_a_second_stop_kills_a_call_blocked_in_a_socket_read(op_home: Path, wire: Any) -> None:
    from tests.helpers import wire_provider

    wire.reply(Reply(text="late", delay=20.0))  # the server answers in 20 s; reads block
    provider = wire_provider("openai", wire, api_key="k", timeout=60.0, model="wire-model")
    run = background(steps, 1, runtime=create_runtime(provider, backoff=0.0))
    assert until(lambda: wire.requests, 10)  # the call is blocked in its read
    run.stop()
    assert run.stop() == "killed"
    with pytest.raises(RunKilled):
        run.wait(5)  # not the 20 s the read would take
    llm = [n for n in nodes_of(run) if n.kind == "llm"]
    assert [n.status for n in llm] == ["cancelled"] and llm[0].output in (None, "")


PAINT = '''
from openprogram import agentic_function, ask_user

@agentic_function
def paint(runtime=None) -> str:
    """Paint the wall in the colour the user picks."""
    colour = ask_user("Which colour?", choices=["teal", "red"])
    return f"painted {colour}"

def wait_background():
    get_ipython().magics_manager.registry["OpenProgramMagics"].background.wait(30)
'''


@pytest.mark.kernel
@pytest.mark.timeout(120)
def test_ask_user_in_a_background_cell_asks_through_that_cells_stdin(op_home: Path) -> None:
    """After the cell returned, the question is an ``input_request`` under the background
    cell's request (where the frontend shows the input box) and the answer reaches the
    running function; a request without stdin (nbclient) gets no answer, never a hang."""
    from tests.test_kernel_turns import Kernel, on_disk, start_kernel

    km, kc = start_kernel(op_home)
    k = Kernel(km, kc)
    try:
        k.run("%load_ext openprogram_magics\n%openprogram provider test")
        k.run(PAINT)
        msg_id = kc.execute("%%openprogram --background\npainted = paint()", allow_stdin=True)
        assert k.reply(msg_id)["status"] == "ok"  # the cell returned at once
        request = kc.get_stdin_msg(timeout=30)
        assert request["parent_header"]["msg_id"] == msg_id
        assert request["content"]["prompt"] == "Which colour? [teal/red] "
        assert k.run("6 * 7")[0]["status"] == "ok"  # other cells run while it waits
        kc.input("teal")
        _, msgs = k.run("wait_background()\nprint(painted)")
        assert "painted teal" in "".join(m["content"].get("text", "") for m in msgs)

        k.run("%%openprogram --background\nunasked = paint()")  # allow_stdin=False
        _, msgs = k.run("wait_background()\nprint(unasked)")
        assert "painted None" in "".join(m["content"].get("text", "") for m in msgs)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    (session,) = [p.name for p in (op_home / "sessions").iterdir() if not p.name.startswith(".")]
    asks = [n for n in on_disk(op_home, session) if n.kind == "ask_user"]
    assert [(a.status, a.output) for a in asks] == [("answered", "teal"), ("unanswered", None)]
