"""Issue 24 in a real browser: ``%openprogram diff``'s static form after a reopen with no
kernel, and in the notebook's nbconvert HTML.

Run the cells (a docstring edit between two turns of the same ticket, then the diff) →
save → shut the kernel down → close → reopen without running anything: the diff is drawn
from the saved output (side by side, the docstring's old line on A's side and the new one
on B's, the finding that names the edit), and nothing asks for a kernel.  nbconvert of the
saved file, opened in Chromium from disk, shows the same.

Screenshots to look at: ``/tmp/op-diff-reopen.png``, ``/tmp/op-diff-nbconvert.png``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from .agents import AGENTS, LOAD, TRIAGE_DOC
from .jupyterlab import NOTEBOOK, LabPage, nbconvert_html, write_notebook

NEW_DOC = "Sort the ticket into bug, feature or question; when unsure, say question."
CELLS = [
    LOAD,
    AGENTS,
    '%%openprogram\ntriage("the app crashes on save")',
    AGENTS.replace(TRIAGE_DOC, NEW_DOC),
    '%%openprogram\ntriage("the app crashes on save")',
    "%openprogram diff 1 2",
]
DIFF_MIME = "application/vnd.openprogram.diff+json"
FINDING = "the docstring of `triage` changed"


def check_diff(root: Any) -> None:
    """The side-by-side diff in ``root``: the finding, A's old docstring line (red) in the
    left column and B's new one (green) in the right."""
    diff = root.locator(".op-diff").first
    diff.wait_for()
    assert FINDING in diff.inner_text()
    assert "cost $0.0000 → $0.0000" in diff.inner_text()  # not read as TeX by MathJax
    title = diff.page.locator("b", has_text=re.compile(r"^docstring$"))
    sides = diff.locator("td").filter(has=title)
    assert sides.count() == 2, sides.count()
    left, right = sides.nth(0), sides.nth(1)
    assert TRIAGE_DOC in left.inner_text() and NEW_DOC not in left.inner_text()
    assert NEW_DOC in right.inner_text() and TRIAGE_DOC not in right.inner_text()
    old = left.locator("span", has_text=TRIAGE_DOC).first
    new = right.locator("span", has_text=NEW_DOC).first
    red = old.evaluate("(e) => getComputedStyle(e).backgroundColor")
    green = new.evaluate("(e) => getComputedStyle(e).backgroundColor")
    assert red == "rgb(254, 226, 226)" and green == "rgb(220, 252, 231)", (red, green)
    box_l, box_r = left.bounding_box(), right.bounding_box()
    assert box_l and box_r and box_l["x"] < box_r["x"]  # side by side: A left, B right


@pytest.mark.browser
@pytest.mark.timeout(240)
def test_diff_reopened_without_its_kernel_and_its_nbconvert_html(
    lab: LabPage, notebook_dir: tuple[Path, str], chromium_browser: Any
) -> None:
    abs_dir, rel_dir = notebook_dir
    path = write_notebook(abs_dir / "diff.ipynb", CELLS)
    rel = f"{rel_dir}/diff.ipynb"
    lab.open_notebook(rel)
    lab.wait_kernel_idle()
    for i in range(len(CELLS)):
        out = lab.run_cell_expect(i, i + 1, timeout=60_000)
        assert "Traceback" not in out and "UsageError" not in out, out
    check_diff(lab.cell(5))
    lab.save()
    saved = json.loads(path.read_text())
    data = saved["cells"][5]["outputs"][0]["data"]
    assert DIFF_MIME in data and "text/html" in data
    assert data[DIFF_MIME]["counts"] == {"paired": 3, "added": 0, "removed": 0}

    # no kernel: shut it down, close, reopen; nothing runs
    lab.server.shutdown_notebook_kernels(rel)
    lab.page.goto("about:blank")
    lab.open_notebook(rel)
    output = lab.page.locator(f"{NOTEBOOK} .jp-Cell").nth(5)
    check_diff(output)
    assert "<script" not in data["text/html"]
    shot = Path("/tmp/op-diff-reopen.png")
    output.locator(".op-diff").first.screenshot(path=str(shot))
    print(f"screenshot: {shot}")

    # nbconvert's HTML, opened from disk, shows the same diff
    html = nbconvert_html(lab.server, path)
    context = chromium_browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        page.goto(html.as_uri())
        check_diff(page)
        shot = Path("/tmp/op-diff-nbconvert.png")
        page.locator(".op-diff").first.screenshot(path=str(shot))
        print(f"screenshot: {shot}")
    finally:
        context.close()
    lab.server.shutdown_notebook_kernels(rel)
