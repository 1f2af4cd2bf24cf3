"""Issue 36 item 6 in a real browser: a kernel keeps the live DAG widgets of its newest cells
only (openprogram_magics.live_views), and an older cell still shows its DAG.

With one cell kept live: after three ``%%openprogram`` cells the first two cells' outputs
draw their saved DAGs, each of its own turn (the first one's widget was given to the third
cell), and the third shows its live widget with its own turn.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .agents import AGENTS, LOAD
from .jupyterlab import LabPage, write_notebook

DEFINE = AGENTS + "\nimport openprogram_magics.live_views as _lv\n_lv.VIEWS.limit = 1\n"


@pytest.mark.browser
@pytest.mark.timeout(240)
def test_an_older_cell_draws_its_saved_dag_and_the_newer_ones_live(
    lab: LabPage, notebook_dir: tuple[Path, str]
) -> None:
    abs_dir, rel_dir = notebook_dir
    cells = [f'%%openprogram\ntriage("ticket {i}")' for i in range(3)]
    write_notebook(abs_dir / "live.ipynb", [LOAD, DEFINE, *cells])
    lab.open_notebook(f"{rel_dir}/live.ipynb")
    lab.wait_kernel_idle()
    for index in range(5):
        out = lab.run_cell_expect(index, index + 1)
        assert "Traceback" not in out, out
    live = lab.cell(4).locator(".op-dag-live .op-dag")  # has taken over the saved view
    live.wait_for()
    assert "cell [5]" in live.locator(".op-title").inner_text()
    assert live.locator("g.op-node[data-kind='turn']").count() == 1
    for index, count in ((2, 3), (3, 4)):
        output = lab.cell(index).locator(".op-dag-output")
        drawn = output.locator(".op-dag")
        drawn.wait_for()  # the saved drawing, not a blank output or "model not found"
        assert output.locator(".op-dag-live").count() == 0
        assert f"cell [{count}]" in drawn.locator(".op-title").inner_text()
        assert drawn.locator("g.op-node[data-kind='turn']").count() == 1
        assert "model not found" not in output.inner_text().lower()
