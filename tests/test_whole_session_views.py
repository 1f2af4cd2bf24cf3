"""Whole-session views of a long session drawn from its index: `openprogram sessions show`
and `%openprogram dag`'s widget read the node files of the rows they display, no others.

Reads are counted at ``Session.get`` and ``Session.get_many`` (the ways the views read a
node, whether from a file or from git); ``Session.nodes()`` (every node) must not be
called at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import openprogram_magics.widget as widget_mod
from openprogram.cli import main
from openprogram.context.nodes import COMPLETED, make_call
from openprogram.store.session.session import Session
from openprogram.view import compute_layout
from openprogram.view.saved import read_saved
from openprogram_magics.widget import DAG_MIME, SavedDag, show_dag

TURNS = 320  # > 300 visible rows: the tree prints only the last 300


def build(db: Any, sid: str, turns: int = TURNS) -> None:
    """``turns`` turns, each a turn node with one function under it (its output says which
    turn), committed 40 turns at a time."""
    session = db.create_session(sid)
    for t in range(turns):
        turn = session.begin_turn()
        top = make_call("turn", f"cell {t}", input=f"step({t})", status=COMPLETED)
        session.append(top, turn=turn, advance_head=True)
        fn = make_call("function", f"plan_{t}", caller=top.id, status=COMPLETED)
        fn.output = f"planned step {t}"
        fn.metadata["duration_ms"] = 1500
        session.append(fn, turn=turn)
        if t % 40 == 39 or t == turns - 1:
            session.commit(f"turns to {t}")


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Ids of the nodes read whole, in order."""
    got: list[str] = []
    real_get = Session.get

    def get(self: Session, node_id: str) -> Any:
        got.append(node_id)
        return real_get(self, node_id)

    real_get_many = Session.get_many

    def get_many(self: Session, node_ids: Any) -> Any:  # the older ones in one git batch
        ids = list(node_ids)
        got.extend(ids)
        return real_get_many(self, ids)

    def nodes(self: Session) -> Any:
        raise AssertionError("a whole-session view read every node")

    monkeypatch.setattr(Session, "get", get)
    monkeypatch.setattr(Session, "get_many", get_many)
    monkeypatch.setattr(Session, "nodes", nodes)
    yield got


def test_sessions_show_reads_only_the_rows_it_prints(
    db: Any, reads: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    build(db, "long_show")
    session = db.open("long_show")
    expected = compute_layout(session.light_nodes(), session.head_id, last_turns=2)
    printed = [p.id for p in expected.visible()[-300:]]
    reads.clear()

    assert main(["sessions", "show", "long_show", "--last", "2"]) == 0

    out = capsys.readouterr().out
    assert set(reads) == set(printed)  # the 300 rows printed, nothing folded or earlier
    assert "… 23 earlier rows not shown" in out  # root + 320 turns + 2 unfolded calls
    tree = out.split("\n\n", 1)[1].splitlines()
    assert tree[-1].startswith("  ■ function plan_319 [completed] 1.50 s")  # read whole
    assert tree[-2].startswith("● cell 319 [completed]") and "← HEAD" in tree[-2]
    assert tree[-5].startswith("● cell 317 [completed]") and "▸ +1 folded" in tree[-5]


def test_the_whole_session_widget_reads_only_what_it_shows(
    db: Any, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(widget_mod, "ALL_SUMMARIES_MAX", 100)  # this session counts as large
    build(db, "long_dag")
    reads.clear()

    widget = show_dag("long_dag", last_turns=2, eager_max=100)

    layout = widget._layout
    shown = [p.id for p in layout.visible()]
    assert set(reads) == set(shown[-300:])  # the static drawing's rows, no hidden call
    by_id = {s["id"]: s for s in widget.summary}
    assert set(by_id) == set(shown)  # folded-away calls are summarized when unfolded
    old_turn = by_id[shown[1]]  # turn 0, an index entry: name, kind, status, time, folds
    assert old_turn["light"] and old_turn["name"] == "cell 0" and old_turn["kind"] == "turn"
    assert old_turn["kids"] == 1 and old_turn["at"] > 0 and "preview" not in old_turn
    newest = by_id[shown[-3]]  # read whole: its preview and duration are there
    assert newest["name"] == "plan_318" and "light" not in newest
    assert newest["ms"] == 1500 and newest["preview"] == "planned step 318"

    # the saved data: every shown row; details only of the nodes read
    saved = read_saved(SavedDag(widget)._repr_mimebundle_()[0][DAG_MIME])  # type: ignore[index]
    assert len(saved["summary"]) == len(shown)
    assert set(saved["details"]) <= set(reads) and shown[-1] in saved["details"]


def test_rows_unfolds_and_clicks_read_their_nodes_on_demand(
    db: Any, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(widget_mod, "ALL_SUMMARIES_MAX", 100)
    build(db, "long_lazy")
    widget = show_dag("long_lazy", last_turns=2, eager_max=100)
    sent: list[dict[str, Any]] = []
    widget._send = lambda msg, buffers=None: sent.append(json.loads(json.dumps(msg)))

    def custom(kind: str) -> list[dict[str, Any]]:
        msgs = [m["content"] for m in sent if m.get("method") == "custom"]
        return [m for m in msgs if m["type"] == kind]

    first_turns = [s["id"] for s in widget.summary if s["kind"] == "turn"][:3]
    reads.clear()

    # the browser drew the first rows: it asks for their whole summaries
    widget._on_custom_msg(widget, {"type": "rows", "ids": first_turns}, None)
    assert set(reads) == set(first_turns)
    (upsert,) = custom("upsert")
    assert [s["id"] for s in upsert["nodes"]] == first_turns
    assert upsert["nodes"][0]["preview"] == "step(0)" and "light" not in upsert["nodes"][0]

    # unfolding turn 0 sends its call (never sent before) without reading it
    sent.clear()
    widget.folded = [f for f in widget.folded if f != first_turns[0]]
    (upsert,) = custom("upsert")
    (call,) = upsert["nodes"]
    assert call["caller"] == first_turns[0] and call["name"] == "plan_0" and call["light"]
    assert call["y"] is not None and set(reads) == set(first_turns)

    # a click reads it and replies with its detail
    sent.clear()
    detail = widget.select(call["id"])
    assert detail is not None and detail["output"]["text"] == "planned step 0"
    assert reads[-1] == call["id"]
    assert [m["detail"]["name"] for m in custom("detail")] == ["plan_0"]

    # a search finds folded-away calls that were never sent, from the index alone
    sent.clear()
    read_before = len(reads)
    found = widget.search("PLAN_10")
    names = {s["name"] for s in found}
    assert names == {"plan_10"} | {f"plan_{i}" for i in range(100, 110)}
    assert all(s["y"] is None for s in found) and len(reads) == read_before
    (upsert,) = custom("upsert")
    assert {s["name"] for s in upsert["nodes"]} == names
    assert widget.search("plan_10") == []  # already sent


def test_a_node_that_cannot_be_read_stays_listed_from_the_index() -> None:
    """A shown row whose node the session cannot read (damaged, gone) keeps its index
    entry's name and status, and a click says it could not be read."""
    from openprogram_magics.widget import DagWidget
    from tests.dag_sample import sample_nodes

    full = sample_nodes(400)
    by_id = {n["id"]: n for n in full}
    keys = ("id", "seq", "turn", "role", "name", "caller", "predecessor", "created_at")
    light = [
        {**{k: n[k] for k in keys}, "metadata": {k: n["metadata"][k] for k in ("kind", "status")}}
        for n in full
    ]
    bad = full[-2]["id"]
    widget = DagWidget(
        light, full[-1]["id"], load=lambda ids: {i: by_id[i] for i in ids if i != bad}
    )
    sent: list[dict[str, Any]] = []
    widget._send = lambda msg, buffers=None: sent.append(json.loads(json.dumps(msg)))

    rows = {s["id"]: s for s in widget.summary}
    assert rows[bad]["light"] and rows[bad]["name"] == full[-2]["name"]
    assert "light" not in rows[full[-3]["id"]]  # its neighbours were read
    assert widget.select(bad) is None
    (reply,) = [m["content"] for m in sent if m.get("method") == "custom"]
    assert reply["detail"] is None and "could not be read" in reply["error"]
