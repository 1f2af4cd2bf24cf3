"""Issue 24 in a real browser: ``%openprogram diff 1 2 --widget``.

Live: the pairs side by side (A's old docstring line red on the left, B's new one green on
the right), the unchanged calls hidden until "show unchanged calls" is ticked, a pair's
row closes on a click.  After a save and a reopen with no kernel the extension draws the
same view from the saved data (no "model not found"), and the toggle still works.

Screenshot to look at: ``/tmp/op-diff-widget.png``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .agents import TRIAGE_DOC
from .jupyterlab import NOTEBOOK, LabPage, write_notebook
from .test_diff_browser import CELLS, FINDING, NEW_DOC

WIDGET_CELLS = [*CELLS[:-1], "%openprogram diff 1 2 --widget"]
DIFF_VIEW_MIME = "application/vnd.openprogram.diff-view+json"


def check_widget(root: Any) -> None:
    """The widget in ``root``: the finding, the docstring's two sides, the toggle."""
    view = root.locator(".op-diffw").first
    view.wait_for()
    assert FINDING in view.inner_text()
    rows = view.locator(".op-diffw-row")
    same = view.locator(".op-diffw-row[data-state='same']")
    assert rows.count() >= 1 and same.count() == 0  # the unchanged calls start hidden
    left = view.locator(".op-diffw-side-a", has_text=TRIAGE_DOC).first
    right = view.locator(".op-diffw-side-b", has_text=NEW_DOC).first
    assert NEW_DOC not in left.inner_text() and TRIAGE_DOC not in right.inner_text()
    red = left.locator("span", has_text=TRIAGE_DOC).first
    green = right.locator("span", has_text=NEW_DOC).first
    assert red.evaluate("(e) => getComputedStyle(e).backgroundColor") == "rgb(254, 226, 226)"
    assert green.evaluate("(e) => getComputedStyle(e).backgroundColor") == "rgb(220, 252, 231)"
    box_l, box_r = left.bounding_box(), right.bounding_box()
    assert box_l and box_r and box_l["x"] < box_r["x"]  # side by side

    shown = rows.count()
    view.locator("input.op-diffw-same").check()
    view.locator(".op-diffw-row[data-state='same']").first.wait_for()
    assert rows.count() > shown  # the unchanged calls are listed now
    # close the docstring's pair: its two sides go (its llm call's prompt stays)
    sides = view.locator(".op-diffw-side-a", has_text=TRIAGE_DOC)
    before = sides.count()
    edited = view.locator(".op-diffw-row.op-open").filter(has_text="triage").first
    index = edited.get_attribute("data-index")
    edited.locator(".op-diffw-head").click()
    view.locator(f".op-diffw-row[data-index='{index}']:not(.op-open)").wait_for()
    assert sides.count() == before - 1


@pytest.mark.browser
@pytest.mark.timeout(240)
def test_diff_widget_live_and_after_a_reopen_without_its_kernel(
    lab: LabPage, notebook_dir: tuple[Path, str]
) -> None:
    abs_dir, rel_dir = notebook_dir
    path = write_notebook(abs_dir / "diffw.ipynb", WIDGET_CELLS)
    rel = f"{rel_dir}/diffw.ipynb"
    lab.open_notebook(rel)
    lab.assert_extension_under_test()
    lab.wait_kernel_idle()
    for i in range(len(WIDGET_CELLS)):
        out = lab.run_cell_expect(i, i + 1, timeout=60_000)
        assert "Traceback" not in out and "UsageError" not in out, out
    cell = lab.cell(5)
    cell.locator(".op-diff-output .op-dag-live .op-diffw").wait_for()  # the live widget
    check_widget(cell)
    cell.locator(".op-diffw").first.screenshot(path="/tmp/op-diff-widget.png")
    lab.save()
    data = json.loads(path.read_text())["cells"][5]["outputs"][0]["data"]
    assert DIFF_VIEW_MIME in data and "text/html" in data
    assert "application/vnd.jupyter.widget-view+json" not in data

    lab.server.shutdown_notebook_kernels(rel)
    lab.page.goto("about:blank")
    lab.open_notebook(rel)
    cell = lab.page.locator(f"{NOTEBOOK} .jp-Cell").nth(5)
    check_widget(cell)
    assert "model not found" not in cell.inner_text()
