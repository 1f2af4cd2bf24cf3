"""The view package's surface (``openprogram.view``): a session's nodes laid out as the DAG
is drawn — HEAD's chain on the first lane and a branch beside it, folds hiding the calls
under a turn, what cannot be read flagged rather than fatal — and the building of a long
session's view with the cyclic collector held off (``view/bulk.py``)."""

from __future__ import annotations

import gc
from pathlib import Path

from test_static import small_session

from openprogram import agentic_function, create_runtime, session_context
from openprogram.agentic_programming.runtime import Runtime
from openprogram.providers.test import TestProvider
from openprogram.store.session.store import SessionStore
from openprogram.view import compute_layout, node_kind, node_status, render_text_tree
from openprogram.view.bulk import paused_gc


@agentic_function
def label(text: str, runtime: Runtime | None = None) -> str:
    """Label the text."""
    assert runtime is not None
    return str(runtime.exec(text))


def test_a_recorded_session_draws_its_turns_and_the_calls_under_them(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "home")
    runtime = create_runtime(TestProvider())
    try:
        for text in ("first", "second"):
            with session_context("nb_view", db=store, runtime=runtime):
                label(text)
        session = store.open("nb_view")
        nodes = [n.to_dict() for n in session.nodes()]
        head = session.head_id
    finally:
        store.close()
    tree = render_text_tree(nodes, head)
    assert tree.count("label") == 2 and "HEAD" in tree
    layout = compute_layout(nodes, head, last_turns=1)  # older turns folded
    first_label = next(p for p in layout.placed.values() if p.kind == "function")
    assert first_label.folded and first_label.hidden_count == 1  # its llm call
    hidden = [p.id for p in layout.placed.values() if p.hidden]
    assert [n["metadata"]["kind"] for n in nodes if n["id"] in hidden] == ["llm"]
    assert layout.rows == len(nodes) - 1


def test_heads_chain_is_the_first_lane_and_a_branch_gets_its_own() -> None:
    layout = compute_layout(small_session(), "t2", folded={"t1"})
    lanes = {p.id: p.lane for p in layout.placed.values() if p.depth == 0}
    assert lanes["t1"] == lanes["t2"] == 0 and lanes["t2b"] == 1 and layout.lanes == 2
    assert {p.id for p in layout.placed.values() if p.hidden} == {"f1", "l1", "a1", "e1"}
    assert layout.placed["t1"].hidden_count == 4


def test_what_cannot_be_read_is_flagged_not_fatal() -> None:
    nodes: list[object] = [*small_session(), "not a node"]
    layout = compute_layout(nodes, "t2")
    assert layout.skipped == 1
    assert "unknown-kind" in " ".join(layout.placed["w1"].flags)
    assert node_kind({"metadata": {"kind": 5}}) == "?" and node_kind({}) == "function"
    assert node_status({"metadata": None}) == "completed"


def test_a_views_build_holds_the_cyclic_collector_off_and_gives_it_back() -> None:
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # it was off before: left off
    finally:
        gc.enable()
