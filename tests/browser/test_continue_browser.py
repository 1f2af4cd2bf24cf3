"""Issue 24 in a real browser: "continue from here" on a turn of the DAG inserts the cell.

Two turns run; in the session's live DAG (``%openprogram dag``), click the first turn,
then its "continue from here" button: a code cell ``%%openprogram --from <that turn>``
appears right below the cell holding the DAG (the extension's ``openprogram-insert-cell``
action, no kernel asked).  Give it a body and run it: its turn continues from the first
turn, beside the second (a branch).  After a reopen with no kernel, the saved DAG's
button inserts the same cell.  The session's DAG then names both branches (who ran each,
when) above its lanes.

Screenshots to look at: ``/tmp/op-continue.png``, ``/tmp/op-branches.png``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from .agents import AGENTS, LOAD
from .jupyterlab import NOTEBOOK, LabPage, write_notebook

CELLS = [
    LOAD,
    AGENTS,
    '%%openprogram\ntriage("the app crashes on save")',
    '%%openprogram\ntriage("export to csv")',
    "%openprogram dag",
]
DAG_MIME = "application/vnd.openprogram.dag+json"


def cell_sources(lab: LabPage) -> list[str]:
    """Every cell's text in the browser's (unsaved) model, without the empty cells at the
    end (Shift+Enter on the last cell adds one)."""
    sources = list(
        lab.page.evaluate(
            """() => window.jupyterapp.shell.currentWidget.content.widgets
                .map(c => c.model.sharedModel.getSource())"""
        )
    )
    while sources and not sources[-1]:
        sources.pop()
    return sources


def continue_from_first_turn(lab: LabPage, index: int) -> str:
    """Click the first turn node of cell ``index``'s DAG, then "continue from here"; return
    the turn's id."""
    turns = lab.cell(index).locator(".jp-OutputArea-output g.op-node[data-kind='turn']")
    turns.first.wait_for()
    first = turns.first
    node_id = str(first.get_attribute("data-id"))
    first.locator(".op-shape").click()
    detail = lab.cell(index).locator(".op-detail")
    detail.locator(".op-detail-head").wait_for()
    button = detail.locator("button.op-continue")
    assert button.inner_text() == "continue from here"
    button.click()
    detail.locator("button.op-continue", has_text="cell inserted below").wait_for()
    return node_id


def type_into(lab: LabPage, index: int, text: str) -> None:
    """Type ``text`` at the end of cell ``index``'s editor."""
    lab.cell(index).locator(".jp-InputArea-editor .cm-content").click()
    lab.page.keyboard.press("Control+End")
    lab.page.keyboard.type(text)
    lab.page.keyboard.press("Escape")


def saved_dag(cell: dict[str, Any]) -> dict[str, Any]:
    """The saved DAG output of a cell of the .ipynb."""
    return next(o for o in cell["outputs"] if DAG_MIME in o.get("data", {}))


def saved_turn_preds(output: dict[str, Any]) -> dict[str, str | None]:
    """{turn id: the turn it continues} in a saved DAG output."""
    raw = output["data"][DAG_MIME]
    data = json.loads(raw) if isinstance(raw, str) else raw
    return {s["id"]: s.get("pred") for s in data["summary"] if s.get("kind") == "turn"}


@pytest.mark.browser
@pytest.mark.timeout(240)
def test_continue_from_here_inserts_the_cell_and_running_it_branches(
    lab: LabPage, notebook_dir: tuple[Path, str]
) -> None:
    abs_dir, rel_dir = notebook_dir
    path = write_notebook(abs_dir / "continue.ipynb", CELLS)
    rel = f"{rel_dir}/continue.ipynb"
    lab.open_notebook(rel)
    lab.assert_extension_under_test()
    lab.wait_kernel_idle()
    for i in range(len(CELLS)):
        out = lab.run_cell_expect(i, i + 1, timeout=60_000)
        assert "Traceback" not in out and "Error" not in out, out

    # the session's DAG (live): the first turn's "continue from here"
    first = continue_from_first_turn(lab, 4)
    line = f"%%openprogram --from {first}"
    sources = cell_sources(lab)
    assert len(sources) == 6 and sources[5].strip() == line, sources
    assert sources[:5] == CELLS
    lab.screenshot("op-continue")

    # give the new cell a body and run it, then draw the session again: a branch
    type_into(lab, 5, 'triage("and to json")')
    out = lab.run_cell_expect(5, 6, timeout=60_000)
    assert "Traceback" not in out and "Error" not in out, out
    type_into(lab, 6, "%openprogram dag")
    lab.run_cell_expect(6, 7, timeout=60_000)
    # the whole-session view names the two branches side by side: who ran them, when
    branches = lab.cell(6).locator(".op-dag .op-branch")
    branches.nth(1).wait_for()
    assert branches.count() == 2, branches.all_inner_texts()
    side = lab.cell(6).locator(".op-branch[data-lane='1']").inner_text()
    assert re.search(r"branch from cell \[3\] · 1 turn · by \S", side), side
    lab.cell(6).locator(".op-dag").first.screenshot(path="/tmp/op-branches.png")
    lab.save()
    saved = json.loads(path.read_text())
    assert "".join(saved["cells"][5]["source"]) == f'{line}\ntriage("and to json")'
    before = saved_turn_preds(saved_dag(saved["cells"][4]))
    after = saved_turn_preds(saved_dag(saved["cells"][6]))
    new = [t for t in after if t not in before]
    assert len(new) == 1 and after[new[0]] == first, after  # a branch at the first turn
    assert list(after.values()).count(first) == 2, after  # beside the second turn

    # no kernel: reopen; the saved DAG's button inserts the cell just the same
    lab.server.shutdown_notebook_kernels(rel)
    lab.page.goto("about:blank")
    lab.open_notebook(rel)
    lab.page.locator(f"{NOTEBOOK} .jp-Cell").nth(4).locator("g.op-node").first.wait_for()
    assert continue_from_first_turn(lab, 4) == first
    sources = cell_sources(lab)
    assert len(sources) == 8 and sources[5].strip() == line, sources
    assert sources[6] == f'{line}\ntriage("and to json")', sources
