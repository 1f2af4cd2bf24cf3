"""The index is compact (issue 23 item 5): it is the ``nodes`` table of the live database,
so an open session keeps no entry per node in memory, a row keeps no path it can compute,
and a node's children come from the index, not a list per node — with the same answers as
before: children in seq order, a background node called from an older bucket included,
paths as the files have them."""

from __future__ import annotations

from pathlib import Path

from openprogram.context.nodes import COMPLETED, make_call
from openprogram.store.session.index import node_relpath, row_of
from openprogram.store.session.store import SessionStore

SID = "s_compact"


def _session_with_a_late_child(home: Path) -> tuple[str, list[str], str]:
    """150 turns (buckets 0000 and 0001); turn 0's function gets one more child in turn
    140 (a background run reporting back).  Returns (function id, its children, turn 140's
    cell id)."""
    store = SessionStore(home)
    session = store.create_session(SID)
    kids: list[str] = []
    fn_id = late_cell = ""
    for i in range(150):
        turn = session.begin_turn()
        cell = session.append(make_call("turn", f"cell {i}"), turn=turn, advance_head=True)
        fn = session.append(make_call("function", f"f{i}", caller=cell.id), turn=turn)
        if i == 0:
            fn_id = fn.id
            for _k in range(2):
                llm = make_call("llm", "test", caller=fn.id, status=COMPLETED)
                kids.append(session.append(llm, turn=turn).id)
        if i == 140:
            late_cell = cell.id
            late = make_call("tool", "report", caller=fn_id, status=COMPLETED)
            kids.append(session.append(late, turn=turn).id)
        for node in (fn, cell):
            node.metadata["status"] = COMPLETED
            session.update(node)
        session.commit(f"turn {turn}")
    assert session.children(fn_id) == kids  # the writer's own view
    store.close()
    return fn_id, kids, late_cell


def test_children_come_from_the_index_older_buckets_callers_included(tmp_path: Path) -> None:
    home = tmp_path / "home"
    fn_id, kids, late_cell = _session_with_a_late_child(home)
    store = SessionStore(home)
    session = store.open(SID)
    assert session.children(fn_id) == kids  # found in bucket 0000 and, called from it, 0001
    late_fn = session.children(late_cell)
    assert len(late_fn) == 1 and session.get(late_fn[0]).name == "f140"
    assert session.children(late_fn[0]) == []
    tops = session.children(None)
    assert len(tops) == 151 and session.get(tops[-1]).name == "cell 149"  # root + 150 cells
    store.close()


def test_entries_share_ids_and_keep_no_computable_path(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _fn, kids, _late = _session_with_a_late_child(home)
    store = SessionStore(home)
    session = store.open(SID)
    session.children(None)  # every node listed
    assert session._nodes == {}  # no entry per node kept: nothing read whole
    stored = session.live.query("SELECT count(*), count(path) FROM nodes")[0]
    assert stored == (1 + 150 * 2 + 3, 0)  # no row keeps a path it can compute
    listed = {row["id"]: row["path"] for row in session.index()}
    for node_id in kids:  # the index's paths are the node files (committed; bucket 0000
        folder, _, name = listed[node_id].rpartition("/")  # may be left out of the disk)
        assert name in session.git.tree_at(folder)
    store.close()


def test_a_node_file_of_another_name_keeps_its_path() -> None:
    call = make_call("llm", "test", caller="c1", status=COMPLETED)
    call.seq, call.turn = 7, 3
    path = 13  # the row's path column (after the usage columns)
    assert row_of(call, node_relpath(call))[path] is None
    assert row_of(call)[path] is None
    assert row_of(call, "history/0000/000003/renamed.json")[path] == (
        "history/0000/000003/renamed.json"
    )
