"""The live DAG widget without a browser: traits, the messages it sends, details on demand."""

from __future__ import annotations

import json
from typing import Any

import pytest
from dag_sample import payload_bytes, sample_nodes

from openprogram.view import (
    DETAIL_LIMIT,
    MORE_LIMIT,
    node_detail,
)
from openprogram_magics.widget import DagWidget, show_dag

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


class Recorder:
    """Every message the widget puts on its comm: trait updates and custom messages."""

    def __init__(self, widget: DagWidget) -> None:
        self.messages: list[dict[str, Any]] = []
        widget._send = lambda msg, buffers=None: self.messages.append(json.loads(json.dumps(msg)))

    def custom(self, kind: str | None = None) -> list[dict[str, Any]]:
        out = [m["content"] for m in self.messages if m.get("method") == "custom"]
        return [m for m in out if kind is None or m["type"] == kind]

    def synced(self, trait: str) -> list[Any]:
        return [
            m["state"][trait]
            for m in self.messages
            if m.get("method") == "update" and trait in m.get("state", {})
        ]


def node(
    nid: str, seq: int, kind: str = "llm", status: str = "running", **fields: Any
) -> dict[str, Any]:
    base: dict[str, Any] = {
        "v": 1,
        "id": nid,
        "seq": seq,
        "turn": 1,
        "role": "llm",
        "name": nid,
        "input": None,
        "output": None,
        "caller": None,
        "predecessor": None,
        "metadata": {"kind": kind, "status": status},
        "created_at": 0.0,
    }
    return {**base, **fields}


@pytest.fixture
def session() -> list[dict[str, Any]]:
    return sample_nodes(120, fork_every=5)


def head_of(nodes: list[dict[str, Any]]) -> str:
    return [n["id"] for n in nodes if n["metadata"]["kind"] == "turn"][-1]


def last_function(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    return [n for n in nodes if n["metadata"]["kind"] == "function"][-1]


def test_a_5000_node_session_summary_stays_under_2_mb() -> None:
    nodes = sample_nodes(5000, fork_every=9)
    for i, n in enumerate(nodes):  # worst case: every preview full, a third of them CJK
        n["output"] = ("长上下文中的稀疏注意力" if i % 3 == 0 else "sparse attention ") * 40
        n["input"] = n["output"]
    widget = DagWidget(nodes, head_of(nodes))
    assert len(widget.summary) == 5000
    assert payload_bytes(widget.summary) <= 2_000_000
    assert max(len(s["preview"]) for s in widget.summary) <= 120


def test_the_detail_of_a_5mb_output_is_truncated_and_show_more_returns_more() -> None:
    big = node("big", 1, output="x" * 5_000_000, input={"q": "y" * 50_000})
    detail = node_detail(big)
    out = detail["output"]
    assert out["truncated"] is True and out["length"] == 5_000_000
    assert len(out["text"]) == DETAIL_LIMIT
    assert detail["input"]["truncated"] and len(detail["input"]["text"]) == DETAIL_LIMIT
    assert payload_bytes(detail) < 3 * DETAIL_LIMIT

    more = node_detail(big, full_field="output")
    assert len(more["output"]["text"]) == MORE_LIMIT and more["output"]["truncated"]
    assert len(more["input"]["text"]) == DETAIL_LIMIT  # only the asked field grows
    with pytest.raises(ValueError, match="unknown detail field"):
        node_detail(big, full_field="secrets")


def test_an_llm_detail_shows_prompt_docstring_reply_tokens_cost_and_error() -> None:
    llm = node(
        "l1",
        3,
        status="error",
        output="the reply",
        metadata={
            "kind": "llm",
            "status": "error",
            "doc": "Summarize the paper.",
            "model": "gpt-4o-mini",
            "usage": {"input_tokens": 1200, "output_tokens": 80},
            "cost": 0.0021,
            "duration_ms": 812.4,
            "error": "ValueError: not a valid choice",
            "traceback": "Traceback (most recent call last): ...",
            "messages": [
                {"role": "system", "content": "Summarize the paper."},
                {"role": "user", "content": "z" * 60_000},
                {"role": "user", "content": "short question"},
            ],
        },
    )
    d = node_detail(llm)
    assert d["doc"]["text"] == "Summarize the paper."
    assert d["output"]["text"] == "the reply"
    assert d["tokens"] == {"input": 1200, "output": 80, "total": 1280}
    assert (d["cost"], d["model"], d["duration_ms"]) == (0.0021, "gpt-4o-mini", 812.4)
    assert d["error"]["text"].startswith("ValueError") and "Traceback" in d["traceback"]["text"]
    msgs = d["messages"]
    assert [m["role"] for m in msgs["items"]] == ["system", "user", "user"]
    assert msgs["items"][2]["content"]["text"] == "short question"  # short ones stay whole
    assert msgs["items"][1]["content"]["truncated"] and msgs["truncated"]
    assert sum(len(m["content"]["text"]) for m in msgs["items"]) <= DETAIL_LIMIT


def test_construction_syncs_summaries_and_folds_all_but_the_last_turns(
    session: list[dict[str, Any]],
) -> None:
    widget = DagWidget(session, head_of(session), title="research", last_turns=2)
    orders = [s["order"] for s in widget.summary]
    assert orders == sorted(orders) and len(orders) == len(session)  # row order
    assert widget.head_id == head_of(session) and widget.title == "research"
    turns_with_calls = [s["id"] for s in widget.summary if s["kind"] == "turn" and s.get("kids")]
    assert set(widget.folded) == set(turns_with_calls[:-2])
    assert widget.selected is None and widget.detail is None
    hidden = [s for s in widget.summary if s["y"] is None]
    assert hidden and all(s.get("caller") for s in hidden)


def test_upsert_sends_only_what_changed_and_syncs_the_summary_trait_once_on_flush(
    session: list[dict[str, Any]],
) -> None:
    widget = DagWidget(session, head_of(session))
    wire = Recorder(widget)
    fn = last_function(session)
    first = node("live-1", 10_000, caller=fn["id"])

    sent = widget.upsert(first)

    [msg] = wire.custom("upsert")
    assert [s["id"] for s in msg["nodes"]] == [s["id"] for s in sent]
    ids = {s["id"] for s in msg["nodes"]}
    assert "live-1" in ids and fn["id"] in ids  # the new node and its caller's child count
    assert len(ids) <= 4  # not the whole graph
    new = next(s for s in msg["nodes"] if s["id"] == "live-1")
    assert (new["kind"], new["status"], new["caller"]) == ("llm", "running", fn["id"])

    done = {**first, "output": "42", "metadata": {"kind": "llm", "status": "completed"}}
    widget.upsert(done)
    second = wire.custom("upsert")[-1]
    assert [(s["id"], s["status"], s["preview"]) for s in second["nodes"]] == [
        ("live-1", "completed", "42")
    ]
    assert wire.synced("summary") == []  # no whole-graph re-send per node...
    assert "live-1" not in {s["id"] for s in widget.summary}

    widget.flush()
    [synced] = wire.synced("summary")  # ...but once, on flush
    assert {"live-1", fn["id"]} <= {s["id"] for s in synced}
    assert next(s for s in widget.summary if s["id"] == "live-1")["status"] == "completed"
    widget.flush()
    assert len(wire.synced("summary")) == 1  # nothing new: nothing re-sent


def test_the_summary_trait_is_synced_when_the_cell_ends(session: list[dict[str, Any]]) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    widget = DagWidget(session, head_of(session))
    wire = Recorder(widget)
    widget.upsert(node("live-1", 10_000, caller=last_function(session)["id"]))
    assert wire.synced("summary") == []
    shell.events.trigger("post_execute")
    assert len(wire.synced("summary")) == 1
    assert widget._after_cell not in shell.events.callbacks["post_execute"]


def test_flush_refreshes_the_static_fallback_of_its_displays(
    session: list[dict[str, Any]],
) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    widget = DagWidget(session, head_of(session))
    with capture_output() as cap:
        widget.display()
        widget.upsert(node("live-1", 10_000, caller=last_function(session)["id"], name="LIVE"))
        widget.flush()
    first, update = cap.outputs
    assert WIDGET_MIME in first.data and "LIVE" not in first.data["text/html"]
    assert (
        update.update and "LIVE" in update.data["text/html"] and "LIVE" in update.data["text/plain"]
    )


def test_moving_head_to_a_branch_relays_out_the_lanes(session: list[dict[str, Any]]) -> None:
    widget = DagWidget(session, head_of(session))
    wire = Recorder(widget)
    branch = next(n for n in session if n["name"].endswith("′"))
    assert next(s for s in widget.summary if s["id"] == branch["id"])["lane"] > 0

    widget.upsert(
        node("t-new", 20_000, "turn", "running", predecessor=branch["id"]), head_id="t-new"
    )

    assert widget.head_id == "t-new" and wire.synced("head_id") == ["t-new"]
    [msg] = wire.custom("upsert")
    lanes = {s["id"]: s["lane"] for s in msg["nodes"]}
    assert lanes["t-new"] == 0 and lanes[branch["id"]] == 0  # the branch is now the trunk


def test_select_replies_with_the_detail_as_the_frontend_would_ask(
    session: list[dict[str, Any]],
) -> None:
    widget = DagWidget(session, head_of(session))
    wire = Recorder(widget)
    fn = last_function(session)

    widget._handle_custom_msg({"type": "select", "id": fn["id"]}, [])

    [reply] = wire.custom("detail")
    assert reply["id"] == fn["id"] and reply["detail"]["kind"] == "function"
    assert reply["detail"]["doc"]["text"] == fn["metadata"]["doc"]
    assert widget.selected == fn["id"] and widget.detail == reply["detail"]

    widget._handle_custom_msg({"type": "select", "id": "nope"}, [])
    assert wire.custom("detail")[-1] == {
        "type": "detail",
        "id": "nope",
        "detail": None,
        "error": "no node 'nope' here",
    }
    widget._handle_custom_msg({"type": "select"}, [])  # malformed: ignored
    widget._handle_custom_msg("junk", [])
    assert len(wire.custom("detail")) == 2


def test_show_more_returns_the_long_field(session: list[dict[str, Any]]) -> None:
    big = node("big", 10_000, caller=last_function(session)["id"], output="o" * 300_000)
    widget = DagWidget([*session, big], head_of(session))
    wire = Recorder(widget)

    widget._handle_custom_msg({"type": "select", "id": "big"}, [])
    widget._handle_custom_msg({"type": "more", "id": "big", "field": "output"}, [])
    first, more = wire.custom("detail")
    assert len(first["detail"]["output"]["text"]) == DETAIL_LIMIT
    assert len(more["detail"]["output"]["text"]) == 300_000
    assert more["detail"]["expanded"] == "output" and not more["detail"]["output"]["truncated"]

    widget._handle_custom_msg({"type": "more", "id": "big", "field": "__class__"}, [])
    assert wire.custom("detail")[-1]["error"] == "no field '__class__'"


def test_folds_made_in_the_browser_do_not_echo_and_reach_the_static_view(
    session: list[dict[str, Any]],
) -> None:
    widget = DagWidget(session, head_of(session))
    wire = Recorder(widget)
    turn = next(s for s in widget.summary if s["kind"] == "turn" and s.get("kids"))
    widget.set_state({"folded": [turn["id"]]})  # how ipywidgets applies a browser update
    assert wire.custom() == []  # the browser already re-flowed its rows
    assert f"+{turn['desc']} folded" in widget.to_text()

    widget.upsert(node("live-1", 10_000, caller=last_function(session)["id"]))
    assert len(wire.custom("upsert")[0]["nodes"]) <= 4  # rows moved by the fold not re-sent


def test_the_mime_bundle_carries_the_widget_and_a_static_fallback(
    session: list[dict[str, Any]],
) -> None:
    widget = DagWidget(session, head_of(session), title="my session")
    bundle = widget._repr_mimebundle_()
    assert bundle is not None
    data, _meta = bundle
    assert WIDGET_MIME in data
    assert "<svg" in data["text/html"] and "my session" in data["text/html"]
    assert "<script" not in data["text/html"]
    html_nodes = data["text/html"].count('<g class="op-node"')
    assert html_nodes == len(session)
    text = data["text/plain"]
    assert text.startswith("session DAG") and "← HEAD" in text
    assert "\n  ■ function " in text  # nested calls are indented under their turn


def test_show_dag_needs_a_session_or_nodes_and_folds_old_turns() -> None:
    with pytest.raises(ValueError, match="session id"):
        show_dag()
    nodes = sample_nodes(600)
    widget = show_dag(nodes=nodes, head_id=head_of(nodes), last_turns=3)
    turns = [s["id"] for s in widget.summary if s["kind"] == "turn" and s.get("kids")]
    assert [t for t in turns if t not in widget.folded] == turns[-3:]
    shown = {s["id"] for s in widget.summary if s["y"] is not None}
    assert len(shown) < len(nodes) // 3


def test_show_dag_loads_a_stored_session(db: Any) -> None:
    from openprogram.context.nodes import make_call

    session = db.create_session("dagview_demo")
    turn = session.begin_turn()
    cell = session.append(make_call("turn", "cell 1", input="x = 1"), turn=turn, advance_head=True)
    fn = make_call("function", "survey", caller=cell.id, status="completed", doc="Survey.")
    session.append(fn, turn=turn)

    widget = show_dag("dagview_demo")

    assert widget.head_id == cell.id and widget.title == "dagview_demo"
    kinds = {s["id"]: s["kind"] for s in widget.summary}
    assert kinds[cell.id] == "turn" and kinds[fn.id] == "function"
    assert "root" in kinds.values()


def test_status_updates_in_place_match_a_full_relayout(session: list[dict[str, Any]]) -> None:
    """Live updates that only end nodes (status, output, duration) skip the re-layout; what
    the browser ends up with must equal a widget built from scratch on the final nodes."""
    import random

    rng = random.Random(7)
    head = head_of(session)
    live = DagWidget(session, head)
    Recorder(live)
    fast = []
    in_place = live._update_in_place
    live._update_in_place = lambda nodes: fast.append(in_place(nodes)) or fast[-1]  # type: ignore[method-assign]
    final = {n["id"]: n for n in session}
    for _ in range(150):
        target = rng.choice(session)
        status = rng.choice(["completed", "error", "cancelled", "running"])
        updated = {
            **final[target["id"]],
            "output": f"out-{rng.randrange(1000)}",
            "metadata": {**final[target["id"]]["metadata"], "status": status, "duration_ms": 3},
        }
        final[target["id"]] = updated
        live.upsert(updated)
    live.flush()
    assert sum(r is not None for r in fast) > 100  # the fast path was really taken
    fresh = DagWidget(list(final.values()), head)

    def by_id(summary: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {s["id"]: s for s in summary}

    assert by_id(live.summary) == by_id(fresh.summary)


def test_a_closed_widget_is_freed(session: list[dict[str, Any]]) -> None:
    """Nothing but the caller keeps a closed widget (anywidget once tied every instance to
    its stylesheet's change signal: a kernel kept each cell's DAG widget for good)."""
    import gc
    import weakref

    widget = DagWidget(session, head_id=head_of(session))
    gone = weakref.ref(widget)
    widget.close()
    del widget
    gc.collect()
    assert gone() is None


def test_a_restarted_widget_shows_the_new_graph_alone_in_one_message(
    session: list[dict[str, Any]],
) -> None:
    """How a kernel reuses a widget for the next cell (openprogram_magics.live_views)."""
    widget = DagWidget(session, head_of(session), title="cell 1")
    widget.select(last_function(session)["id"])
    wire = Recorder(widget)
    turn = node("t-2", 1, kind="turn")
    widget.restart([turn], head_id="t-2", title="cell 2", session_id="s_2")
    [update] = [m for m in wire.messages if m.get("method") == "update"]  # one state message
    state = update["state"]
    assert [s["id"] for s in state["summary"]] == ["t-2"]
    assert (state["head_id"], state["title"]) == ("t-2", "cell 2")
    assert state["selected"] is None and state["detail"] is None
    assert wire.custom() == []  # no upsert of the old graph's rows
    assert widget.to_text().count("\n") < 3 and "t-2" in widget.to_text()
    # and it goes on as a new widget would: live nodes arrive as upserts
    widget.upsert(node("live-1", 2, caller="t-2"))
    [msg] = wire.custom("upsert")
    assert {s["id"] for s in msg["nodes"]} == {"t-2", "live-1"}
