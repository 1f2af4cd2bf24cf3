"""Issue 14 in a real browser: a long session's widget drawn from its index.

The widget starts from index entries (name, kind, status, time) and reads nodes only for
the rows shown: rows scrolled into view get their preview from the kernel, a search finds
calls folded away that the browser never had, and unfolding a turn brings its calls.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .jupyterlab import LabPage, write_notebook

FROM_INDEX = """\
import openprogram_magics.widget as W
from tests.dag_sample import sample_nodes  # the repo root is on the kernel's PYTHONPATH

W.ALL_SUMMARIES_MAX = 1000  # this graph counts as large: folded calls are not sent up front
full = sample_nodes(3000)
first_turn = next(n for n in full if n["metadata"]["kind"] == "turn")
needle = next(n for n in full if n["caller"] == first_turn["id"])
needle["name"] = "needle_in_the_index"
below = next(n for n in full if n["caller"] == needle["id"])  # never matched by the search
by_id = {n["id"]: n for n in full}
keys = ("id", "seq", "turn", "role", "name", "caller", "predecessor", "created_at")
light = [{**{k: n[k] for k in keys}, "metadata": {k: n["metadata"][k] for k in ("kind", "status")}}
         for n in full]
reads = []
def load(node_ids):
    reads.extend(node_ids)
    return {i: by_id[i] for i in node_ids}
head = [n["id"] for n in full if n["metadata"]["kind"] == "turn"][-1]
w = W.DagWidget(light, head, title="from the index", last_turns=3, load=load)
sent = {s["id"] for s in w.summary}
print("IDS", first_turn["id"], needle["id"], below["id"], len(reads), needle["id"] in sent)
w
"""
READS = 'print("READ", first_turn["id"] in reads, needle["id"] in reads)'


@pytest.mark.browser
@pytest.mark.timeout(180)
def test_a_widget_from_the_index_reads_rows_as_they_are_shown(
    lab: LabPage, notebook_dir: tuple[Path, str]
) -> None:
    abs_dir, rel_dir = notebook_dir
    write_notebook(abs_dir / "index.ipynb", [FROM_INDEX, READS])
    rel = f"{rel_dir}/index.ipynb"
    lab.open_notebook(rel)
    lab.wait_kernel_idle()
    out = lab.run_cell_expect(0, 1, timeout=60_000)
    match = re.search(r"IDS (\S+) (\S+) (\S+) (\d+) (\w+)", out)
    assert match, out
    first, needle, below, read, sent = match[1], match[2], match[3], int(match[4]), match[5]
    assert read == 300 and sent == "False"  # the last 300 rows read; folded calls not sent
    cell = lab.cell(0)
    canvas = cell.locator(".op-canvas")
    lab.page.wait_for_function(
        "(el) => el.scrollTop > 0", arg=canvas.element_handle()
    )  # opened at HEAD, the newest rows

    # scrolled to the top: the first turn, drawn from the index, gets its preview
    canvas.evaluate("(el) => { el.scrollTop = 0; }")
    row = cell.locator(f"g.op-node[data-id='{first}']")
    row.locator(".op-meta", has_text="result_1 = research(").wait_for(timeout=20_000)

    # a search finds the call folded under it, which the browser never had
    cell.locator(".op-search").fill("needle_in_the_index")
    cell.locator(".op-count", has_text="1 match (1 folded away)").wait_for(timeout=20_000)

    # unfolding the turn draws its calls: the kernel sends those the browser lacked
    row.locator(".op-toggle").click()
    drawn = cell.locator(f"g.op-node[data-id='{needle}'] .op-name")
    drawn.filter(has_text="needle_in_the_index").wait_for()
    cell.locator(f"g.op-node[data-id='{below}']").wait_for(timeout=20_000)

    out = lab.run_cell_expect(1, 2)
    assert "READ True" in out  # the first turn was read when it was shown
    lab.server.shutdown_notebook_kernels(rel)
