"""Issue 23 item 3 in a real browser: a view of a session's newest window asks the kernel
for the older rows when it is scrolled to the top (or its "older" button is clicked); they
come above, folded, and the row that was at the top of the viewport stays there.

The widget is built in the kernel from sample nodes and a pager over them that slices
whole turns, as ``Session.light_window`` does over a session's index.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from openprogram.view.static import ROW

from .jupyterlab import LabPage, write_notebook

WINDOW = """\
import openprogram_magics.widget as W
from tests.dag_sample import sample_nodes  # the repo root is on the kernel's PYTHONPATH

W.OLDER_TOPS = 500  # one request reaches the first turn
full = sample_nodes(3000)  # 665 turn-level nodes, in seq order
tops_at = [i for i, n in enumerate(full) if n["caller"] is None]
keys = ("id", "seq", "turn", "role", "name", "caller", "predecessor", "created_at")
light = [{**{k: n[k] for k in keys}, "metadata": {k: n["metadata"][k] for k in ("kind", "status")}}
         for n in full]
asked = []
def pager(tops):
    asked.append(tops)
    start = tops_at[max(len(tops_at) - tops, 0)]
    return [dict(n) for n in light[start:]], start
by_id = {n["id"]: n for n in full}
window, older = pager(200)
head = full[tops_at[-1]]["id"]
w = W.DagWidget(window, head, title="newest window", last_turns=3,
                load=lambda ids: {i: by_id[i] for i in ids}, pager=pager, tops=200, older=older)
first = window[0]["id"]
before = full[tops_at[len(tops_at) - 201]]["id"]  # the turn just before the window
print("IDS", first, before, older)
w
"""
ASKED = 'print("ASKED", asked, w.older)'


@pytest.mark.browser
@pytest.mark.timeout(180)
def test_scrolling_to_the_top_brings_the_older_rows(
    lab: LabPage, notebook_dir: tuple[Path, str]
) -> None:
    abs_dir, rel_dir = notebook_dir
    write_notebook(abs_dir / "older.ipynb", [WINDOW, ASKED])
    lab.open_notebook(f"{rel_dir}/older.ipynb")
    lab.wait_kernel_idle()
    out = lab.run_cell_expect(0, 1, timeout=60_000)
    match = re.search(r"IDS (\S+) (\S+) (\d+)", out)
    assert match, out
    first, before, older = match[1], match[2], int(match[3])
    assert older > 0
    cell = lab.cell(0)
    dag = cell.locator(".op-dag")
    cell.locator(f".op-dag[data-older='{older}']").wait_for()
    button = cell.locator(".op-older")
    button.filter(has_text=f"{older} older nodes").wait_for()
    canvas = cell.locator(".op-canvas")
    lab.page.wait_for_function("(el) => el.scrollTop > 0", arg=canvas.element_handle())

    # scrolled to the top: the previous window comes above, folded; the first row stays
    rows_before = int(dag.get_attribute("data-rows") or 0)
    canvas.evaluate("(el) => { el.scrollTop = 0; }")
    cell.locator(".op-dag[data-older='0']").wait_for(timeout=30_000)
    rows_after = int(dag.get_attribute("data-rows") or 0)
    assert rows_after == rows_before + 465  # the root and 464 older turns, folded: a row each
    assert cell.locator(f"g.op-node[data-id='{first}']").count() == 1  # still in view
    top = canvas.evaluate("(el) => el.scrollTop")
    assert top >= 465 * ROW  # moved down past the older rows
    assert button.is_hidden()  # nothing older: no button

    # the turn just before the old window is drawn when scrolled to
    canvas.evaluate("(el) => { el.scrollTop -= 200; }")
    cell.locator(f"g.op-node[data-id='{before}']").wait_for(timeout=20_000)

    out = lab.run_cell_expect(1, 2)
    assert "ASKED [200, 700] 0" in out, out
