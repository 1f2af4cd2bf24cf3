"""The DAG a saved notebook keeps: bounded data for the extension, a drawing for the rest.

Pure checks of :func:`saved_view` (the ``application/vnd.openprogram.dag+json`` part),
then notebooks produced headless (``openprogram run``, papermill) converted with
nbconvert: the drawn DAG is in the HTML, no widget view or widget manager script is, and
each turn's output carries only that turn, named after the cell's ``In [n]``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from openprogram.view import compute_layout
from openprogram.view.saved import (
    DAG_MIME,
    DETAIL_LIMITS,
    SESSION_BUDGET,
    TURN_BUDGET,
    read_saved,
    saved_view,
)
from openprogram_magics.headless import run_notebook
from tests.dag_sample import sample_nodes

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def big_turn(calls: int, output_chars: int) -> list[dict[str, Any]]:
    turn = {"id": "t", "seq": 1, "turn": 1, "name": "cell [3]", "caller": None,
            "predecessor": None, "metadata": {"kind": "turn", "status": "completed"}}  # fmt: skip
    nodes = [turn]
    for i in range(calls):
        nodes.append(
            {
                "id": f"f{i}",
                "seq": 2 + i,
                "turn": 1,
                "name": f"step_{i}",
                "caller": "t",
                "output": "x" * output_chars,
                "metadata": {"kind": "function", "status": "completed", "doc": f"Step {i}."},
            }
        )
    return nodes


def test_a_small_turn_is_saved_whole_with_full_details() -> None:
    nodes = big_turn(3, 100)
    data = saved_view(compute_layout(nodes, "t"), title="turn 1")
    assert [s["id"] for s in data["summary"]] == ["t", "f0", "f1", "f2"]
    assert data["detail_limit"] == DETAIL_LIMITS[0] and data.get("details_omitted", 0) == 0
    assert data["details"]["f1"]["doc"]["text"] == "Step 1."
    assert data["details"]["f1"]["output"] == {"text": "x" * 100}  # whole: no counts
    assert data["head_id"] == "t" and data["title"] == "turn 1" and data.get("omitted", 0) == 0


def test_a_turn_with_huge_outputs_stays_under_its_budget_keeping_every_node() -> None:
    nodes = big_turn(400, 50_000)  # 20 MB of outputs
    data = saved_view(compute_layout(nodes, "t"))
    assert size(data) <= TURN_BUDGET
    assert len(data["summary"]) == 401 and data.get("omitted", 0) == 0  # every node is drawn
    assert data["detail_limit"] == DETAIL_LIMITS[-1]
    # the nodes nearest HEAD's end (the newest rows) keep their details first
    assert "f399" in data["details"] and data["details_omitted"] > 0
    kept = data["details"]["f399"]["output"]
    assert kept["truncated"] and kept["length"] == 50_000


def test_the_whole_session_view_of_5000_nodes_keeps_every_summary() -> None:
    from openprogram_magics.widget import DagWidget

    nodes = sample_nodes(5000)
    widget = DagWidget(nodes, nodes[-1]["id"], title="big", last_turns=None)
    data = widget.to_saved()
    assert size(data) <= SESSION_BUDGET
    assert len(data["summary"]) == 5000 and data["nodes"] == 5000
    assert data["widget"] == widget.model_id
    assert len(data["details"]) > 0


@pytest.fixture
def notebook(tmp_path: Path) -> Path:
    target = tmp_path / "work" / "quickstart.ipynb"
    target.parent.mkdir()
    shutil.copy(QUICKSTART, target)
    return target


def dag_outputs(nb: dict[str, Any]) -> list[tuple[int | None, dict[str, Any]]]:
    return [
        (cell.get("execution_count"), out["data"])
        for cell in nb["cells"]
        for out in cell.get("outputs", [])
        if DAG_MIME in out.get("data", {})
    ]


def assert_static_dag_in_html(path: Path) -> str:
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_filename(str(path))
    assert body.count('data-op-dag="static"') == 2
    svgs = re.findall(r"<svg.*?</svg>", body, re.S)
    assert len(svgs) == 2
    assert ">triage</tspan>" in svgs[0] and ">handle</tspan>" in svgs[1]  # node names drawn
    assert "jupyter-widgets" not in body  # no widget view, so no widget manager from a CDN
    assert "unpkg.com" not in body and "html-manager" not in body
    return body


def check_turn_outputs(nb: dict[str, Any]) -> None:
    outs = dag_outputs(nb)
    assert len(outs) == 2
    for count, data in outs:
        assert WIDGET_VIEW not in data
        saved = read_saved(data[DAG_MIME])
        root = saved["summary"][0]
        assert root["kind"] == "turn" and root["name"] == f"cell [{count}]"  # In [n]
        turns = {s["id"] for s in saved["summary"] if s["kind"] == "turn"}
        assert turns == {root["id"]}  # only this turn, not the session so far
        assert size(saved) <= TURN_BUDGET
        text = data["text/plain"]
        assert f"cell [{count}]" in ("".join(text) if isinstance(text, list) else text)


@pytest.mark.kernel
@pytest.mark.timeout(180)
def test_openprogram_run_output_converts_to_html_with_the_drawn_dag(
    notebook: Path, op_home: Path
) -> None:
    result = run_notebook(notebook)
    assert result.error is None
    nb = json.loads(notebook.read_text())
    check_turn_outputs(nb)
    assert_static_dag_in_html(notebook)


@pytest.mark.kernel
@pytest.mark.timeout(180)
def test_papermill_output_converts_to_html_with_the_drawn_dag(
    notebook: Path, op_home: Path
) -> None:
    papermill = pytest.importorskip("papermill")
    out = notebook.parent / "pm.ipynb"
    papermill.execute_notebook(
        str(notebook), str(out), kernel_name="python3", progress_bar=False, log_output=False
    )
    nb = json.loads(out.read_text())
    check_turn_outputs(nb)
    assert_static_dag_in_html(out)


@pytest.mark.kernel
@pytest.mark.timeout(120)
def test_with_a_live_frontend_the_saved_part_names_the_live_widget(op_home: Path) -> None:
    """A frontend that names its cells (Lab, Notebook 7, VS Code) gets a live widget while
    the cell runs; the final output replaces its view with the DAG data, which names the
    widget's model so the extension can switch back to it while the kernel lives."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    try:

        def run(code: str) -> list[dict[str, Any]]:
            msg = kc.session.msg(
                "execute_request",
                {"code": code, "silent": False, "store_history": True, "allow_stdin": False},
                metadata={"cellId": "cell-1"},
            )
            kc.shell_channel.send(msg)
            msg_id = msg["header"]["msg_id"]
            out = []
            while True:
                m = kc.get_iopub_msg(timeout=60)
                if m["parent_header"].get("msg_id") != msg_id:
                    continue
                out.append(m)
                if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    return out

        run("%load_ext openprogram_magics\n%openprogram provider test")
        msgs = run('%%openprogram\n"done"')
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    first = next(m for m in msgs if m["msg_type"] == "display_data")["content"]["data"]
    assert WIDGET_VIEW in first  # live while the cell runs
    final = [m for m in msgs if m["msg_type"] == "update_display_data"][-1]["content"]["data"]
    assert WIDGET_VIEW not in final
    assert read_saved(final[DAG_MIME])["widget"] == first[WIDGET_VIEW]["model_id"]
    assert read_saved(final[DAG_MIME])["summary"][0]["name"] == "cell [2]"


def test_a_forked_turn_says_so_in_the_live_view_title_too() -> None:
    """The live widget is created with the same title as the final output: a turn that
    forked because the session had moved on says so while it runs, not only once saved."""
    from types import SimpleNamespace

    from openprogram_magics.notebook import NotebookMeta
    from openprogram_magics.turn import CellTurn

    turn = CellTurn(NotebookMeta("s_fork", "n_last"), source="x", execution_count=4, runtime=None)
    turn.handle = SimpleNamespace(session_id="s_fork")  # type: ignore[assignment]
    turn.node = SimpleNamespace(turn=7, name="cell [4]")  # type: ignore[assignment]
    assert "forked" not in turn._title()
    turn.forked_from = "n_last"
    assert turn._title() == (
        "openprogram · session s_fork · turn 7 · cell [4] · "
        "forked from n_last (the session had moved on)"
    )


def test_the_prebuilt_extension_carries_this_dag_js() -> None:
    """The extension bundles ``dag.js``: after editing it, ``jlpm build`` in labextension/
    and commit the new static files (the saved view would otherwise draw with old code)."""
    assets = REPO / "openprogram" / "view" / "assets"
    source = (assets / "dag.js").read_text()
    static = REPO / "openprogram_magics" / "labextension" / "static"
    built = "".join(p.read_text() for p in static.glob("*.js"))
    texts = set(re.findall(r'"([A-Za-z][^"\n\\]{11,})"', source))
    assert len(texts) > 20
    stale = sorted(t for t in texts if t not in built)
    assert not stale, f"rebuild the labextension (jlpm build): {stale[:5]}"
    style = json.loads((assets / "style.json").read_text())
    assert style["kindColors"]["llm"] in built


def test_a_view_is_saved_as_one_line_of_json_text_that_reads_back_the_same() -> None:
    """JupyterLab deep-copies object-valued output parts on every read of a bundle, and
    passes strings as they are; and in a notebook under git a one-line part changes one
    line on a re-run. Every view is kept as compact JSON text; an object still reads."""
    from openprogram.view.saved import mime_value

    for view in (big_turn(3, 100), big_turn(400, 50_000)):
        data = saved_view(compute_layout(view, "t"))
        text = mime_value(data)
        assert isinstance(text, str) and "\n" not in text
        assert read_saved(text) == data and read_saved(data) == data
    with pytest.raises(ValueError, match="not a saved DAG view"):
        read_saved("[1, 2]")


def llm_turn(ids: tuple[str, str], *, finish: str = "stop") -> list[dict[str, Any]]:
    """A cell's turn with one call, as a re-run would write it again under new ids."""
    turn_id, call_id = ids
    cell = {"text": "%%openprogram\nreply = llm('Say hello.')", "execution_count": 2}
    turn = {"id": turn_id, "seq": 7, "turn": 3, "name": "cell [2]", "role": "user",
            "caller": None, "predecessor": None, "input": cell,
            "metadata": {"kind": "turn", "status": "completed",
                         "author": {"name": "Ada", "email": "ada@example.org"}}}  # fmt: skip
    call = {"id": call_id, "seq": 8, "turn": 3, "name": "test", "role": "llm",
            "caller": turn_id, "input": {"content": "Say hello.", "attempt": 1},
            "output": "Hello.",
            "metadata": {"kind": "llm", "status": "completed", "model": "test",
                         "usage": {"input_tokens": 44, "output_tokens": 6},
                         "messages": [{"role": "user", "content": "Say hello."}],
                         "context": {"turns": ["n_earlier", "n_before"], "tokens": 84},
                         "finish_reason": finish}}  # fmt: skip
    return [turn, call]


def test_a_saved_detail_keeps_what_the_panel_shows_and_not_what_moves_on_a_rerun() -> None:
    from openprogram.view.saved import mime_value

    data = saved_view(compute_layout(llm_turn(("t", "c")), "t"), title="turn 3")
    call = data["details"]["c"]
    assert {"seq", "role", "caller", "expanded"}.isdisjoint(call)  # the view knows them
    assert "extra" not in call  # no context policy's turn ids, no author, no plain "stop"
    assert "input" not in call  # the prompt holds it
    assert call["messages"]["items"] == [{"role": "user", "content": {"text": "Say hello."}}]
    assert call["output"] == {"text": "Hello."} and call["tokens"] == {"input": 44, "output": 6}
    assert (call["id"], call["kind"], call["name"], call["status"]) == (
        "c",
        "llm",
        "test",
        "completed",
    )
    assert list(data["details"]) == ["c", "t"]  # newest row first, whatever the ids
    assert "n_earlier" not in mime_value(data) and "ada@example.org" not in mime_value(data)

    again = saved_view(compute_layout(llm_turn(("t", "c")), "t"), title="turn 3")
    assert mime_value(again) == mime_value(data)  # byte for byte

    unusual = saved_view(compute_layout(llm_turn(("t", "c"), finish="length"), "t"))
    assert unusual["details"]["c"]["extra"]["text"] == '{"finish_reason":"length"}'


def test_a_cells_saved_view_leaves_out_the_cells_text() -> None:
    nodes = llm_turn(("t", "c"))
    whole = saved_view(compute_layout(nodes, "t"))
    assert "Say hello" in whole["summary"][0]["preview"]
    assert "%%openprogram" in whole["details"]["t"]["input"]["text"]
    own = saved_view(compute_layout(nodes, "t"), cell="t")
    assert "preview" not in own["summary"][0] and "input" not in own["details"]["t"]
    assert own["summary"][1]["preview"] == "Hello."  # the call's reply stays
    nodes[0]["metadata"].update(status="error", error="NameError: x")
    failed = saved_view(compute_layout(nodes, "t"), cell="t")
    assert failed["summary"][0]["preview"] == "NameError: x"  # an error stays in view
