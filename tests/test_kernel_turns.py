"""``%%openprogram`` turns in a real ipykernel (jupyter_client): Ctrl-C mid-LLM-call, the
metadata comm after a turn, and ``kill -9`` of the kernel mid-cell (recovery on open)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from waiting import until

from openprogram.context.nodes import Call
from openprogram.store.session.store import SessionStore

REPO = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120)]

SLOW_PROVIDER = """
import time
from openprogram import agentic_function
from openprogram.providers import create_runtime
from openprogram.providers.test import FunctionProvider

@agentic_function
def triage(ticket: str, runtime=None) -> str:
    \"\"\"Classify the support ticket as bug, feature or question.\"\"\"
    return runtime.exec(ticket, choices=["bug", "feature", "question"])

def slow(request):
    _mark = {marker!r}
    if _mark:
        open(_mark + ".started", "w").close()  # the LLM call is in flight: the test's cue
    time.sleep({seconds})
    if _mark:
        open(_mark + ".finished", "w").close()
    return "bug"

from openprogram_magics import use_runtime
use_runtime(create_runtime(FunctionProvider(slow), backoff=0.0))
"""


class Kernel:
    def __init__(self, km: Any, kc: Any) -> None:
        self.km, self.kc = km, kc

    def send(self, code: str) -> str:
        return str(self.kc.execute(code, store_history=True, allow_stdin=False))

    def reply(self, msg_id: str, timeout: float = 60) -> dict[str, Any]:
        while True:
            msg = self.kc.get_shell_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") == msg_id:
                return dict(msg["content"])

    def iopub(self, msg_id: str, timeout: float = 60) -> list[dict[str, Any]]:
        out = []
        while True:
            msg = self.kc.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            out.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return out

    def run(self, code: str, *, ok: bool = True) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        msg_id = self.send(code)
        reply = self.reply(msg_id)
        msgs = self.iopub(msg_id)
        if ok:
            assert reply["status"] == "ok", reply
        return reply, msgs


def start_kernel(home: Path) -> tuple[Any, Any]:
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ)
    env["OPENPROGRAM_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return start_new_kernel(kernel_name="python3", cwd=str(home.parent), env=env)


@pytest.fixture
def kernel(op_home: Path) -> Iterator[Kernel]:
    km, kc = start_kernel(op_home)
    k = Kernel(km, kc)
    try:
        k.run("%load_ext openprogram_magics\n%openprogram provider test")
        yield k
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def on_disk(home: Path, sid: str) -> list[Call]:
    store = SessionStore(home)  # a fresh reader, as another process would open it
    try:
        return store.open(sid).nodes()
    finally:
        store.close()


def stdout(msgs: list[dict[str, Any]]) -> str:
    return "".join(
        m["content"]["text"]
        for m in msgs
        if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"
    )


def slow_provider(seconds: float, marker: Path | None = None) -> str:
    """The cell that makes the kernel's runtime a provider taking ``seconds`` to answer
    (with ``marker``: it creates ``<marker>.started`` as the call begins, ``.finished`` if
    the sleep ran to its end)."""
    return SLOW_PROVIDER.format(seconds=seconds, marker=str(marker) if marker else "")


def wait_for(path: Path, timeout: float = 60) -> None:
    """Until ``path`` exists (a marker the kernel writes); fails after ``timeout``."""
    assert until(path.exists, timeout), f"{path.name} never appeared"


def test_interrupt_mid_llm_call_then_the_next_cell_continues(kernel: Kernel, op_home: Path) -> None:
    marker = op_home.parent / "slow-call"
    kernel.run(slow_provider(60, marker) + "\n%openprogram new --id nb_ctrlc")
    msg_id = kernel.send('%%openprogram\n_before = 1\ntriage("slow")')
    wait_for(marker.with_suffix(".started"))  # Ctrl-C while the provider is answering
    kernel.km.interrupt_kernel()
    reply = kernel.reply(msg_id, timeout=30)
    kernel.iopub(msg_id)
    assert not marker.with_suffix(".finished").exists()  # the sleep was cut short
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    nodes = on_disk(op_home, "nb_ctrlc")
    assert next(n for n in nodes if n.kind == "turn").status == "interrupted"
    assert next(n for n in nodes if n.kind == "function").status == "cancelled"
    assert next(n for n in nodes if n.kind == "llm").status == "cancelled"

    _, msgs = kernel.run(
        "import json, openprogram.store as _s, openprogram.agentic_programming.function as _f\n"
        "print(json.dumps([_s._store.get() is None, _s._current_turn_id.get() is None,\n"
        "  _f._current_runtime.get() is None, _f._call_id.get() is None, _f._depth.get()]))"
    )
    assert stdout(msgs).strip() == "[true, true, true, true, 0]"

    kernel.run(slow_provider(0))
    _, msgs = kernel.run('%%openprogram\nafter = triage("fast")\nprint(after)')
    assert "bug" in stdout(msgs)
    turns = [n for n in on_disk(op_home, "nb_ctrlc") if n.kind == "turn"]
    assert [t.status for t in turns] == ["interrupted", "completed"]
    assert turns[1].predecessor == turns[0].id
    # the kernel told the frontend where the session is: a fire-and-forget comm
    opens = [m for m in msgs if m["msg_type"] == "comm_open"]
    metadata = [
        m["content"]["data"]["metadata"]
        for m in opens
        if m["content"]["target_name"] == "openprogram.metadata"
    ]
    assert metadata == [  # the last turn is not for the file: the output carries it
        {"session_id": "nb_ctrlc", "version": 1, "provider": "test"}
    ]
    # the output carries it too, for frontends without the extension
    bundles = [
        m["content"]["data"]
        for m in msgs
        if m["msg_type"] in ("display_data", "update_display_data")
        and "application/vnd.openprogram.session+json" in m["content"]["data"]
    ]
    assert bundles[-1]["application/vnd.openprogram.session+json"]["session_id"] == "nb_ctrlc"


def test_kill_9_mid_cell_recovers_on_open(op_home: Path) -> None:
    km, kc = start_kernel(op_home)
    k = Kernel(km, kc)
    try:
        k.run("%load_ext openprogram_magics\n%openprogram provider test")
        marker = op_home.parent / "killed-call"
        k.run(slow_provider(60, marker))
        k.run("%openprogram new --id nb_killed")  # --session names only a session there is
        k.run('%%openprogram --session nb_killed\nstr("a turn that finishes")')
        k.send('%%openprogram --session nb_killed\ntriage("never answered")')
        wait_for(marker.with_suffix(".started"))  # kill -9 while the LLM call is in flight
        pid = km.provisioner.process.pid
        os.kill(pid, signal.SIGKILL)
        km.provisioner.process.wait(timeout=10)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    nodes = on_disk(op_home, "nb_killed")
    turns = [n for n in nodes if n.kind == "turn"]
    assert [t.status for t in turns] == ["completed", "interrupted"]
    killed = [n for n in nodes if n.turn == turns[1].turn]
    assert {n.kind: n.status for n in killed} == {
        "turn": "interrupted",
        "function": "interrupted",
        "llm": "interrupted",
    }
    assert all(n.metadata.get("recovered") for n in killed)
    # the session goes on: a new kernel continues it from the recovered state
    km, kc = start_kernel(op_home)
    k = Kernel(km, kc)
    try:
        k.run("%load_ext openprogram_magics\n%openprogram provider test")
        k.run("%%openprogram --session nb_killed\nx = 1")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    turns = [n for n in on_disk(op_home, "nb_killed") if n.kind == "turn"]
    assert [t.status for t in turns] == ["completed", "interrupted", "completed"]
    recorded = SessionStore(op_home).list_sessions()[0]
    assert recorded["turns"] == 3  # the recovered turn counted once, as the index has it


MAP_PROVIDER = """
import re
import time
import openprogram.scale.run as _run
from openprogram import agentic_function
from openprogram.providers import create_runtime
from openprogram.providers.test import FunctionProvider

def answer(request):
    item = int(re.match(r"t(\\d+)", request.messages[-1]["content"]).group(1))
    if item == 5:
        open({marker!r}, "w").close()  # the test's cue: Ctrl-C now, while item 5 runs
    deadline = time.monotonic() + 60
    while item >= 5 and time.monotonic() < deadline and not any(
        r._stop.is_set() for r in _run._active
    ):
        time.sleep(0.01)  # items from 5 on end once the map has taken Ctrl-C as a stop
    return "bug"

@agentic_function
def triage(ticket: str, runtime=None) -> str:
    \"\"\"Classify the support ticket as bug, feature or question.\"\"\"
    return runtime.exec(ticket, choices=["bug", "feature", "question"])

from openprogram_magics import use_runtime
use_runtime(create_runtime(FunctionProvider(answer), backoff=0.0))
"""


def test_ctrl_c_in_a_cell_running_a_map_records_every_item(kernel: Kernel, op_home: Path) -> None:
    marker = op_home.parent / "item-5-runs"
    kernel.run(MAP_PROVIDER.format(marker=str(marker)) + "\n%openprogram new --id nb_map")
    msg_id = kernel.send(
        "%%openprogram\nimport openprogram\n"
        'labels = openprogram.map(triage, [f"t{i}" for i in range(40)], max_in_flight=4)'
    )
    wait_for(marker)
    kernel.km.interrupt_kernel()
    reply = kernel.reply(msg_id, timeout=60)
    kernel.iopub(msg_id)
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    nodes = on_disk(op_home, "nb_map")
    (turn,) = [n for n in nodes if n.kind == "turn"]
    calls = [n for n in nodes if n.caller == turn.id]
    assert [c.metadata["item"] for c in calls] == list(range(40))
    statuses = [c.status for c in calls]
    assert statuses[5] == "completed" and statuses[-1] == "cancelled"
    assert set(statuses) == {"completed", "cancelled"} and turn.status == "interrupted"
