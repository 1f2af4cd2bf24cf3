"""The node model (``Call``) and the pure DAG logic (``Graph.visible_for``) on hand-built graphs."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from openprogram.context.graph import Graph
from openprogram.context.nodes import (
    FORMAT_VERSION,
    Call,
    make_call,
)
from openprogram.context.render import render_messages
from openprogram.errors import NodeFormatError


# -- Call --------------------------------------------------------------------------------------
def test_call_round_trips_through_json_with_a_format_version() -> None:
    call = make_call(
        "function",
        "summarize",
        input={"text": "é ✓ 中文", "n": 3, "nested": [1, {"a": None}]},
        caller="n_parent",
        predecessor="n_prev",
        doc="Summarize the text.",
    )
    call.seq, call.turn, call.output = 7, 2, {"summary": "short", "score": 0.5}
    data = json.loads(json.dumps(call.to_dict()))
    assert data["v"] == FORMAT_VERSION
    back = Call.from_dict(data)
    assert back == call
    assert (back.kind, back.status, back.role) == ("function", "running", "code")
    assert back.to_dict() == call.to_dict()


def test_a_node_written_by_a_newer_openprogram_is_refused_with_how_to_fix() -> None:
    data = make_call("llm", "test").to_dict()
    data["v"] = FORMAT_VERSION + 1
    with pytest.raises(NodeFormatError, match="upgrade openprogram"):
        Call.from_dict(data)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"id": None}, "'id'"),
        ({"id": ""}, "'id'"),
        ({"role": 3}, "'role'"),
        ({"role": "robot"}, "unknown role"),
        ({"seq": "7"}, "'seq'"),
        ({"seq": True}, "'seq'"),
        ({"caller": 12}, "'caller'"),
        ({"predecessor": ["x"]}, "'predecessor'"),
        ({"created_at": "yesterday"}, "could not convert"),
    ],
)
def test_malformed_node_dicts_raise_node_format_error(change: dict[str, Any], needle: str) -> None:
    data = make_call("function", "f").to_dict()
    data["seq"] = 1
    data.update(change)
    with pytest.raises(NodeFormatError, match=needle):
        Call.from_dict(data)


@pytest.mark.parametrize("data", [None, [], "node", 3])
def test_a_node_that_is_not_an_object_is_refused(data: Any) -> None:
    with pytest.raises(NodeFormatError, match="JSON object"):
        Call.from_dict(data)


def test_credentials_passed_as_inputs_never_reach_a_node() -> None:
    call = make_call("function", "connect", input={"api_key": "sk-123", "host": "x", "n": 1})
    assert call.input == {"api_key": "***", "host": "x", "n": 1}
    assert "sk-123" not in json.dumps(call.to_dict())


# -- Graph -------------------------------------------------------------------------------------
class Builder:
    """Hand-builds a DAG; ``seq`` increases in creation order like the store's."""

    def __init__(self) -> None:
        self.nodes: dict[str, Call] = {}
        self.seq = 0

    def add(self, kind: str, name: str = "", **kw: Any) -> Call:
        status = kw.pop("status", "completed")
        call = make_call(kind, name or kind, status=status, **kw)
        call.seq = self.seq
        self.seq += 1
        self.nodes[call.id] = call
        return call

    def graph(self, head: str | None) -> Graph:
        return Graph.from_nodes(self.nodes, head)


def conversation(turns: int) -> tuple[Builder, list[Call]]:
    b = Builder()
    root = b.add("root")
    prev, out = root, []
    for i in range(turns):
        prev = b.add("turn", f"cell{i}", input={"text": f"turn {i}"}, predecessor=prev.id)
        out.append(prev)
    return b, out


def test_a_frame_sees_its_docstring_once_earlier_turns_and_its_finished_steps() -> None:
    b, (t1, t2) = conversation(2)
    b.add("function", "earlier", caller=t1.id, doc="Earlier doc.")
    fn = b.add("function", "plan", caller=t2.id, doc="Plan the trip.", status="running")
    s1 = b.add("llm", "test", caller=fn.id, input={"content": "first"}, output="ok")
    rejected = b.add("llm", "test", caller=fn.id, status="error", rejected=True)
    running = b.add("function", "inner", caller=fn.id, status="running")
    awaiting = b.add("ask_user", "ask", caller=fn.id, status="awaiting")
    s2 = b.add("tool", "search", caller=fn.id, output=["hit"])
    failed = b.add("function", "broken", caller=fn.id, status="error", error="boom")
    b.add("llm", "test", caller=s2.id)  # a grandchild is not a step of this frame

    seen = b.graph(head=t2.id).visible_for(fn.id)

    assert seen.doc == "Plan the trip."
    assert [n.id for n in seen.history] == [t1.id]  # no root, not the current turn
    assert [n.id for n in seen.steps] == [s1.id, s2.id, failed.id]
    for hidden in (rejected, running, awaiting):
        assert hidden.id not in {n.id for n in seen.steps}


def test_the_rendered_prompt_carries_the_docstring_exactly_once() -> None:
    b, (t1,) = conversation(1)
    outer = b.add("function", "outer", caller=t1.id, doc="OUTER INSTRUCTION")
    inner = b.add("function", "inner", caller=outer.id, doc="INNER INSTRUCTION")
    b.add("llm", "test", caller=inner.id, input={"content": "step"}, output="done")
    messages = render_messages(b.graph(t1.id).visible_for(inner.id), "next")
    text = json.dumps(messages)
    assert text.count("INNER INSTRUCTION") == 1
    assert "OUTER INSTRUCTION" not in text
    assert messages[0] == {"role": "system", "content": "INNER INSTRUCTION"}
    assert messages[-1] == {"role": "user", "content": "next"}


def test_history_is_oldest_first_and_bounded() -> None:
    b, turns = conversation(30)
    current = b.add("turn", "now", predecessor=turns[-1].id, status="running")
    fn = b.add("function", "f", caller=current.id)
    seen = b.graph(current.id).visible_for(fn.id, max_turns=5)
    assert [n.id for n in seen.history] == [t.id for t in turns[-5:]]
    everything = b.graph(current.id).visible_for(fn.id, max_turns=100)
    assert [n.id for n in everything.history] == [t.id for t in turns]


def test_a_top_level_exec_sees_the_history_up_to_head_and_no_docstring() -> None:
    b, turns = conversation(3)
    seen = b.graph(turns[-1].id).visible_for(None)
    assert seen.doc is None
    assert seen.steps == []
    assert [n.id for n in seen.history] == [t.id for t in turns]


def test_a_nested_frame_takes_history_from_its_own_turn_not_head() -> None:
    b, (t1, t2, t3) = conversation(3)
    fn = b.add("function", "f", caller=t2.id)  # e.g. a forked/older turn still running
    seen = b.graph(head=t3.id).visible_for(fn.id)
    assert [n.id for n in seen.history] == [t1.id]


def _within(seconds: float, fn: Any) -> Any:
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "Graph looped on a cycle"
    return result[0]


def test_a_cycle_in_predecessor_edges_does_not_hang() -> None:
    b, (t1, t2) = conversation(2)
    t1.predecessor = t2.id  # corrupted data: t1 <-> t2
    fn = b.add("function", "f", caller=t2.id)
    seen = _within(5, lambda: b.graph(t2.id).visible_for(fn.id))
    ids = [n.id for n in seen.history]
    assert ids[-1] == t1.id and len(ids) == len(set(ids)) <= 2  # each node at most once
    top = _within(5, lambda: b.graph(t2.id).visible_for(None))
    assert sorted(n.id for n in top.history) == sorted([t1.id, t2.id])


def test_a_cycle_in_caller_edges_does_not_hang() -> None:
    b, (t1,) = conversation(1)
    a = b.add("function", "a", caller=t1.id)
    c = b.add("function", "c", caller=a.id, doc="C doc")
    a.caller = c.id  # corrupted data: a <-> c
    seen = _within(5, lambda: b.graph(t1.id).visible_for(c.id))
    assert seen.doc == "C doc"
    assert len(_within(5, lambda: b.graph(t1.id).ancestors(c.id))) == 2


def test_missing_nodes_end_the_walk_instead_of_failing() -> None:
    b, (t1,) = conversation(1)
    fn = b.add("function", "f", caller="n_gone")
    t1.predecessor = "n_also_gone"
    seen = b.graph(t1.id).visible_for(fn.id)
    assert seen.history == []
    assert b.graph(t1.id).visible_for("n_unknown").doc is None
