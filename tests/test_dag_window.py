"""``%openprogram dag`` of a big session draws its newest window (issue 23 item 3): the
display bundle is bounded whatever the session's size, says how many nodes it leaves out,
and the browser's "older" request widens the view by the previous window, read from the
index alone.  The session is bulk-built as ``benchmarks/bench_views.py`` builds its
sessions (one ``git fast-import`` commit; the ``nodes`` rows derived from git at the open).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.bench_views import bulk_commit
from openprogram.store.session.store import SessionStore
from openprogram.view.saved import read_saved
from openprogram_magics.widget import DAG_MIME, OLDER_TOPS, SHOWN_ROWS, SavedDag, show_dag
from tests.test_whole_session_views import reads  # noqa: F401  (the fixture: nodes read whole)

TURNS = 2_000  # 9,996 nodes: past show_dag's EAGER_MAX (5,000), 20 index buckets
BUNDLE_MAX = 700_000  # bytes of the whole display bundle (the whole session's was 4.6 MB
# at 20,000 turns); the window's share does not grow with the session


def build(home: Path, sid: str, turns: int = TURNS) -> None:
    store = SessionStore(home)
    session = store.create_session(sid)
    path, root = session.path, session.head_id
    store.close()
    bulk_commit(path, turns, root)
    for name in ("live.db", "live.db-wal", "live.db-shm"):  # rebuilt from git at the open
        (path / ".state" / name).unlink(missing_ok=True)


def custom(sent: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    msgs = [m["content"] for m in sent if m.get("method") == "custom"]
    return [m for m in msgs if m["type"] == kind]


def test_a_big_session_sends_its_newest_window_and_older_rows_on_request(
    op_home: Path,
    db: Any,
    reads: list[str],  # noqa: F811  (the fixture imported above)
) -> None:
    build(op_home, "big")
    total = db.open("big").totals()["nodes"]
    assert total == 5 * (TURNS - 1) + 1

    widget = show_dag("big", last_turns=50)
    data = SavedDag(widget)._repr_mimebundle_()[0]  # type: ignore[index]

    # bounded: three buckets (300 turns) of the index, the newest 300 rows read whole
    assert len(json.dumps(data)) < BUNDLE_MAX
    assert len(widget._nodes) == 1_500 and widget.older == total - 1_500
    assert len(set(reads)) <= SHOWN_ROWS  # (get_many counts, then get counts again)
    tops = [s for s in widget.summary if "caller" not in s]
    assert len(tops) == 300 and len(widget.summary) == 300 + 50 * 4  # folded calls not sent
    saved = read_saved(data[DAG_MIME])
    assert saved["older"] == total - 1_500 and len(saved["summary"]) == len(widget.summary)
    assert f"{total} nodes" in data["text/plain"].splitlines()[0]
    assert f"{total - 1_500} older nodes not shown (--page 2)" in data["text/plain"]
    assert f"{total - 1_500} older nodes of the session are not in this view" in data["text/html"]

    # scrolled to the top: the previous window comes folded, from the index alone
    sent: list[dict[str, Any]] = []
    widget._send = lambda msg, buffers=None: sent.append(json.loads(json.dumps(msg)))
    read_before = len(reads)
    widget._on_custom_msg(widget, {"type": "older"}, None)
    (older,) = custom(sent, "older")
    assert older["older"] == widget.older == total - 3_000 and len(reads) == read_before
    expected, left = db.open("big").light_window(300 + OLDER_TOPS)
    assert left == total - 3_000
    new_tops = {n["id"] for n in expected if n["caller"] is None} - {s["id"] for s in tops}
    assert len(new_tops) == 300
    rows = {s["id"]: s for s in older["nodes"]}
    assert new_tops <= set(rows)  # every row moved down: all of them are sent again
    assert all(rows[i]["light"] and rows[i]["desc"] == 4 for i in new_tops)
    assert new_tops <= set(widget.folded)
    assert min(s["order"] for s in older["nodes"]) == 0  # the new window starts the rows
    assert widget._layout.placed[tops[0]["id"]].order == 1_500  # the old first row, moved

    # the browser draws the new rows and asks for them: those are read, no others
    wanted = sorted(new_tops)[:10]
    widget._on_custom_msg(widget, {"type": "rows", "ids": wanted}, None)
    assert set(reads[read_before:]) == set(wanted)

    # scrolling on reaches the session's first turn; then nothing is older
    for _ in range(10):
        if not widget.older:
            break
        widget.load_older()
    assert widget.older == 0 and len(widget._layout.placed) == total
    sent.clear()
    assert widget.load_older() == []
    assert custom(sent, "older") == [{"type": "older", "nodes": [], "older": 0}]


def test_the_saved_window_reads_back_after_save_and_nbconvert(
    op_home: Path, tmp_path: Path
) -> None:
    """The saved view of a window (no kernel): its payload, the static HTML nbconvert shows
    and the text say how many older nodes it leaves out, and how to see them."""
    import nbformat
    from nbconvert import HTMLExporter

    build(op_home, "saved_big", turns=1_200)
    data = SavedDag(show_dag("saved_big", last_turns=5))._repr_mimebundle_()[0]  # type: ignore[index]
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("%openprogram dag")
    cell.outputs = [nbformat.v4.new_output("display_data", data=data)]
    nb.cells = [cell]
    path = tmp_path / "dag.ipynb"
    nbformat.write(nb, path)

    again = nbformat.read(path, as_version=4)
    (output,) = again.cells[0].outputs
    saved = read_saved(output["data"][DAG_MIME])
    older = 5 * 1_199 + 1 - 1_500
    assert saved["older"] == older
    assert not any(k.startswith("application/vnd.jupyter.widget") for k in output["data"])
    body, _ = HTMLExporter().from_notebook_node(again)
    assert "<svg" in body and f"{older} older nodes of the session are not in this view" in body
    assert "openprogram sessions show ID --page 2" in body
