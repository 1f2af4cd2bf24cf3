"""Agentic tools in a killable process (issue 22): with ``tools_in_process`` a chat turn's
agentic tool runs in a child process as a runtime block — its execution tree streams into
the turn while it runs, a stop ends that process alone, and nothing is left ``running``.

The functions the child runs are defined here at the top level: the child imports this
module by name (spawn passes ``sys.path`` along).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import reopen

from openprogram import agentic_function, create_runtime
from openprogram.agent import dispatcher as D
from openprogram.agent.dispatcher import runtime_attach
from openprogram.agentic_programming.stopping import using_stop_flag
from openprogram.errors import RunStopped
from openprogram.providers.base import LLMRequest, LLMResponse, ToolCall
from openprogram.providers.test import FunctionProvider


@agentic_function
def crunch(marker: str, rounds: int = 0) -> str:
    """Crunch the numbers (runs until stopped when rounds is 0; ignores Ctrl-C)."""
    Path(marker).write_text(str(os.getpid()))
    done = 0
    while rounds == 0 or done < rounds:
        try:
            time.sleep(0.02)
            done += 1
        except KeyboardInterrupt:
            pass  # stubborn: only the kill ends it
    return f"crunched {done} rounds in {os.getpid()}"


def model_calling(arguments: dict[str, Any]) -> FunctionProvider:
    def reply(request: LLMRequest) -> LLMResponse:
        if any("Earlier step: crunch(" in str(m["content"]) for m in request.messages):
            return LLMResponse("finished")
        return LLMResponse("", tool_calls=[ToolCall("c1", "crunch", arguments)])

    return FunctionProvider(reply)


def test_an_agentic_tool_runs_in_a_child_process_under_its_tool_node(
    tmp_path: Path, op_home: Path
) -> None:
    marker = tmp_path / "pid"
    rt = create_runtime(model_calling({"marker": str(marker), "rounds": 2}), backoff=0.0)
    events: list[dict[str, Any]] = []
    result = D.process_user_turn(
        D.TurnRequest(
            None,
            "crunch",
            runtime=rt,
            tools={"crunch": crunch},
            tools_in_process=True,
            on_event=events.append,
        )
    )
    assert result.status == "completed" and result.text == "finished"
    child = int(marker.read_text())
    assert child != os.getpid()
    nodes = {n.kind: n for n in reopen(op_home, result.session_id) if n.name == "crunch"}
    tool, frame = nodes["tool"], nodes["function"]
    (block,) = [e for e in events if e["type"] == "runtime_block"]
    assert (block["node_id"], block["pid"]) == (tool.id, child)
    assert block["target"] == "test_runtime_blocks:crunch"
    assert tool.output == f"crunched 2 rounds in {child}"
    assert (frame.caller, frame.status) == (tool.id, "completed")  # the child's tree, attached
    assert any(e["type"] == "node" and e["node"]["metadata"]["kind"] == "function" for e in events)


def test_a_stop_kills_the_child_alone_and_leaves_nothing_running(
    tmp_path: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime_attach, "STOP_GRACE_S", 0.5)  # the child ignores SIGINT
    marker = tmp_path / "pid"
    rt = create_runtime(model_calling({"marker": str(marker)}), backoff=0.0)
    events: list[dict[str, Any]] = []
    running = threading.Event()
    stop = threading.Event()
    outcome: list[BaseException | D.TurnResult] = []

    def on_event(event: dict[str, Any]) -> None:
        events.append(event)
        node = event.get("node") or {}
        if event["type"] == "node" and node.get("metadata", {}).get("kind") == "function":
            running.set()  # the child's frame reached the live DAG

    def turn() -> None:
        request = D.TurnRequest(
            "chat_block",
            "crunch forever",
            runtime=rt,
            tools={"crunch": crunch},
            tools_in_process=True,
            on_event=on_event,
        )
        try:
            with using_stop_flag(stop):
                outcome.append(D.process_user_turn(request))
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=turn)
    worker.start()
    assert running.wait(60), "the child's frame never reached the turn"
    stop.set()
    worker.join(60)
    assert not worker.is_alive()

    (raised,) = outcome
    assert isinstance(raised, RunStopped)
    child = int(marker.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # the child process is gone; this one (the kernel) runs on
    nodes = reopen(op_home, "chat_block")
    assert not [n for n in nodes if n.is_open]  # nothing running, nothing awaiting
    status = {n.kind: n.status for n in nodes if n.kind in ("tool", "reply", "function")}
    assert status == {"tool": "cancelled", "reply": "cancelled", "function": "interrupted"}
    tool = next(n for n in nodes if n.kind == "tool")
    reply = next(n for n in nodes if n.kind == "reply")
    assert reply.metadata["reason"] == "cancelled"
    assert [e["pid"] for e in events if e["type"] == "runtime_block"] == [child]
    assert "child process was ended" in tool.metadata["error"]
