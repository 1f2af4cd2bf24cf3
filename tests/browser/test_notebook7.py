"""The extension and the magics in Notebook 7 (not only JupyterLab), in a real Chromium.

The ``jupyter lab`` test server also serves Notebook 7's pages (the ``notebook`` package
is a jupyter-server extension; see :meth:`LabServer.notebook_url`), with the same
``openprogram-jupyter`` build and the same kernels' ``OPENPROGRAM_HOME``.  A notebook whose
file names ``metadata.openprogram.session_id = "s_nb7"`` is opened at ``/notebooks/<path>``;
its ``%%openprogram`` cell must be a turn of ``s_nb7``, drawn as a DAG under the cell, and
the saved file must still name ``s_nb7``, now with the turn's ``last_turn_id``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openprogram_magics.notebook import last_turn_in_file

from .agents import AGENTS, LOAD
from .jupyterlab import LabPage, NotebookPage, write_notebook
from .test_notebook_session import session_dirs

SESSION = "s_nb7"
SCREENSHOT = Path("/tmp/op-notebook7.png")
CELLS = [LOAD, AGENTS, '%%openprogram\nhandle("the app crashes on save")']


def stored_turns(home: Path, session_id: str) -> list[Any]:
    """The session's turn nodes, read by a fresh store (never a cached one)."""
    from openprogram.store.session import SessionStore

    store = SessionStore(home)
    try:
        return [c for c in store.open(session_id).nodes() if c.kind == "turn"]
    finally:
        store.close()


@pytest.mark.browser
@pytest.mark.timeout(180)
def test_magic_runs_a_turn_of_the_files_session_in_notebook7(
    lab: LabPage, notebook_dir: tuple[Path, str]
) -> None:
    server = lab.server
    nb = NotebookPage(lab.page, server)
    abs_dir, rel_dir = notebook_dir
    nb_path = write_notebook(abs_dir / "nb7.ipynb", CELLS, {"openprogram": {"session_id": SESSION}})
    rel = f"{rel_dir}/nb7.ipynb"
    before = session_dirs(server)

    nb.open_notebook(rel)
    assert nb.app_name() == "Jupyter Notebook", nb.app_name()  # Notebook 7, not Lab
    nb.assert_extension_under_test()
    nb.wait_kernel_idle()
    out = nb.run_cell_expect(0, 1)
    assert "Error" not in out, out
    nb.run_cell_expect(1, 2)
    out = nb.run_cell_expect(2, 3, timeout=60_000)
    assert "Traceback" not in out and "new session" not in out, out

    # the turn ran in s_nb7, and only there
    turns = stored_turns(server.openprogram_home, SESSION)
    assert len(turns) == 1, turns
    assert session_dirs(server) - before == {SESSION}

    # its DAG is under the cell: the turn, handle and triage, the LLM calls
    dag = nb.cell(2).locator(".jp-OutputArea-output .op-dag")
    dag.locator("g.op-node[data-kind='turn']").first.wait_for()
    kinds = dag.locator("g.op-node").evaluate_all("(els) => els.map((e) => e.dataset.kind)")
    assert kinds.count("turn") == 1 and kinds.count("function") == 2, kinds
    assert kinds.count("llm") >= 2, kinds
    assert SESSION in dag.locator(".op-title").inner_text()
    nb.page.screenshot(path=str(SCREENSHOT))
    print(f"screenshot: {SCREENSHOT}")

    # saved: the file still names s_nb7, and the turn it ended on is in the turn's output
    # (the metadata keeps no last turn, so two people's copies merge)
    nb.page.wait_for_function(
        "() => (window.jupyterapp.shell.currentWidget.model"
        ".getMetadata('openprogram') || {}).session_id !== undefined",
    )
    nb.save()
    meta = json.loads(nb_path.read_text())["metadata"]["openprogram"]
    assert meta["session_id"] == SESSION and "last_turn_id" not in meta, meta
    assert last_turn_in_file(nb_path, SESSION) == turns[0].id
    server.shutdown_notebook_kernels(rel)
