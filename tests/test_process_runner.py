"""``process_runner``: an agentic function in a spawned child, attached to the parent's turn.

The functions the child runs are defined here at the top level: the child imports this
module by name (spawn passes ``sys.path`` along).
"""

from __future__ import annotations

import io
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import settled
from waiting import until
from wire_server import Reply, WireServer

from openprogram import ask_user, create_runtime, session_context
from openprogram.agent.process_runner import ProcessRun, run_in_process
from openprogram.agentic_programming import (
    Runtime,
    agentic_function,
    current_node,
    using_ask_user_handler,
)
from openprogram.errors import ProcessRunCancelled, ProcessRunError, UserError
from openprogram.providers.openai_provider import OpenAIProvider
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
    def started() -> bool:
        return any(e.get("node", {}).get("name") == name for e in events)

    assert until(lambda: started() or run.poll(0.05), 15), "the child never started"
    assert started(), "the child ended early"


def test_stop_is_graceful_first_then_kills(rt: Runtime, op_home: Path) -> None:
    with session_context(runtime=rt) as handle:
        events: list[dict[str, Any]] = []
        polite = ProcessRun(slow, (60,), on_event=events.append).start()
        wait_until_running(polite, events, "slow")
        polite.stop(timeout=300)  # the grace only bounds a hang: it ends when done
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


# -- nothing outlives its owner (issue 34) --------------------------------------------------------
@agentic_function
def detach(marker: str, mode: str) -> str:
    """Starts a process in a new session and a daemon (double fork), then returns at once
    (``returns``) or runs until stopped (``polite``, or ``stubborn``: ignores Ctrl-C)."""
    setsid = subprocess.Popen(["sleep", "600"], start_new_session=True)
    daemon = subprocess.run(  # sh leaves its background sleep behind: an orphan
        ["sh", "-c", "sleep 600 </dev/null >/dev/null 2>&1 & echo $!"],
        start_new_session=True,
        capture_output=True,
        text=True,
        check=True,
    )
    write_pids(marker, [os.getpid(), setsid.pid, int(daemon.stdout)])
    if mode != "returns":
        slow(600, stubborn=mode == "stubborn")
    return "started"


@agentic_function
def hold_the_child(marker: str, go: str) -> str:
    """The frame a child hangs under (in a parent process the test kills)."""
    return str(ProcessRun(wait_for_go, (marker, go)).start().wait())


@agentic_function
def wait_for_go(marker: str, go: str) -> str:
    """Starts a process in a new session, then works until told to finish."""
    setsid = subprocess.Popen(["sleep", "600"], start_new_session=True)
    write_pids(marker, [os.getpid(), setsid.pid])
    while not Path(go).exists():
        time.sleep(0.02)
    return "finished"


def write_pids(marker: str, pids: list[int]) -> None:
    Path(marker + ".tmp").write_text(json.dumps(pids))
    os.replace(marker + ".tmp", marker)


def read_pids(marker: Path, alive: Any) -> list[int]:
    """The pids the child wrote to ``marker`` (waiting for it while ``alive()``)."""
    assert until(lambda: marker.exists() or not alive(), 60), "the child never started"
    assert marker.exists(), "the child ended before it started anything"
    return [int(pid) for pid in json.loads(marker.read_text())]


def ended(pid: int, within: float = 20.0) -> bool:
    """Whether process ``pid`` has ended (a zombie has), waiting up to ``within`` s on its
    pidfd: readable the moment it exits."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], within)[0])
    finally:
        os.close(fd)


@pytest.fixture
def strays() -> Iterator[list[int]]:
    """Pids a test started indirectly: the ``sleep`` processes among them are killed after
    it, whatever happened (checked by their command line: a pid may have been reused)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\x00600"):
                os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


needs_proc = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="Linux (pidfd) only")


@needs_proc
@pytest.mark.parametrize("mode", ["returns", "polite", "stubborn"])
def test_what_the_child_started_ends_with_it_setsid_or_not(
    rt: Runtime, tmp_path: Path, mode: str, strays: list[int]
) -> None:
    marker = tmp_path / "pids"
    with session_context(runtime=rt):
        run = ProcessRun(detach, (str(marker), mode)).start()
        strays += read_pids(marker, lambda: not run.poll())
        if mode == "returns":
            assert run.wait(timeout=60) == "started"
        else:
            run.stop(timeout=0.5 if mode == "stubborn" else 10)
            with pytest.raises(ProcessRunCancelled):
                run.wait()
    assert strays and all(ended(pid) for pid in strays), f"still running: {strays}"


PARENT_EXITS = """
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from openprogram import session_context
from openprogram.agent.process_runner import ProcessRun
from test_process_runner import detach, read_pids
with session_context("s_exit", create_runtime_if_none=False):
    run = ProcessRun(detach, ({marker!r}, "stubborn")).start()
    read_pids(Path({marker!r}), lambda: not run.poll())
"""


@needs_proc
def test_a_parent_that_exits_ends_the_runs_still_going(
    tmp_path: Path, op_home: Path, strays: list[int]
) -> None:
    marker = tmp_path / "pids"
    script = PARENT_EXITS.format(tests=str(Path(__file__).parent), marker=str(marker))
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    strays += read_pids(marker, lambda: True)
    assert all(ended(pid) for pid in strays), f"still running: {strays}"
    (frame,) = [n for n in fresh_nodes(op_home, "s_exit") if n.name == "detach"]
    assert frame.status == "interrupted"


@needs_proc
def test_a_child_started_from_a_thread_that_ended_runs_on(
    rt: Runtime, tmp_path: Path, strays: list[int]
) -> None:
    """The kernel's parent-death signal is sent when the *thread* that started the child
    ends: the child tells that from its parent process ending, and runs on."""
    marker, go = tmp_path / "pids", tmp_path / "go"
    with session_context(runtime=rt):
        run = ProcessRun(wait_for_go, (str(marker), str(go)))

        def start_and_leave() -> None:  # the thread ends once the child is running
            run.start()
            strays.extend(read_pids(marker, lambda: not run.poll()))

        starter = threading.Thread(target=start_and_leave)
        starter.start()
        starter.join()
        go.touch()
        assert run.wait(timeout=60) == "finished"


PARENT = """
import sys
sys.path.insert(0, {tests!r})
from openprogram import session_context
from test_process_runner import hold_the_child
with session_context({sid!r}, create_runtime_if_none=False):
    hold_the_child({marker!r}, {go!r})
"""


@needs_proc
def test_a_child_ends_with_its_killed_parent_and_writes_nothing_after(
    tmp_path: Path, op_home: Path, strays: list[int]
) -> None:
    marker, go = tmp_path / "pids", tmp_path / "go"
    script = PARENT.format(
        tests=str(Path(__file__).parent), sid="s_orphan", marker=str(marker), go=str(go)
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        strays += read_pids(marker, lambda: parent.poll() is None)
    finally:
        parent.kill()  # SIGKILL mid-tool: no cleanup of any kind in the parent
        parent.wait()
    child, detached = strays
    store = SessionStore(op_home)
    recovered = {n.name: n for n in store.open("s_orphan").nodes()}  # the parent's recovery
    store.close()
    anchor = recovered["hold_the_child"]
    assert anchor.status == "interrupted"
    go.touch()  # a child still running would finish now and write `completed`
    assert ended(child)
    nodes = fresh_nodes(op_home, "s_orphan")
    (frame,) = [n for n in nodes if n.name == "wait_for_go"]
    assert (frame.caller, frame.status) == (anchor.id, "interrupted")
    assert not [n for n in nodes if n.status == "completed" and n.kind != "root"]
    assert ended(detached), "what the child started outlived the parent"


SECRET = "plain-words-for-a-key-0451"  # looks like no key: masked only because it is known


def everything_written(home: Path) -> Iterator[tuple[str, bytes]]:
    """(where, bytes) for every file under ``home`` (loose git objects inflated) and every
    git object of every session (``git cat-file --batch-all-objects``)."""
    for path in sorted(p for p in settled(home).rglob("*") if p.is_file()):
        data = path.read_bytes()
        yield str(path), data
        if "/.git/objects/" in str(path) and "/pack/" not in str(path):
            yield f"{path} (inflated)", zlib.decompress(data)
    for git_dir in home.rglob(".git"):
        objects = subprocess.run(
            ["git", "cat-file", "--batch-all-objects", "--batch"],
            cwd=git_dir.parent,
            capture_output=True,
            check=True,
        ).stdout
        yield f"{git_dir} (all objects)", objects


def test_a_key_the_parent_knows_is_masked_in_what_the_child_writes(
    wire: WireServer, op_home: Path
) -> None:
    wire.reply(Reply(text=f"your key is {SECRET}, keep it safe"))
    provider = OpenAIProvider("gpt-x", api_key=SECRET, base_url=wire.openai_base_url)
    rt = create_runtime(provider, backoff=0.0, max_retries=0)
    with session_context(runtime=rt) as handle:
        run_in_process(summarize, "what is my key?")
        llm = next(n for n in handle.writer.session.nodes() if n.kind == "llm")
    assert llm.output == "your key is ***, keep it safe"  # written by the child, masked
    scanned = 0
    for where, data in everything_written(op_home):
        scanned += 1
        assert SECRET.encode() not in data, f"the key was written to {where}"
    assert scanned > 10


def test_a_bare_call_outside_any_session_records_to_the_process_session(
    rt: Runtime, op_home: Path
) -> None:
    assert ProcessRun(summarize, ("no turn",), runtime=rt).start().wait(timeout=60) == (
        "[test reply] no turn"
    )
    (session_id,) = [p.name for p in (op_home / "sessions").iterdir()]
    assert {n.name for n in fresh_nodes(op_home, session_id)} >= {"summarize", "test"}
