"""Issue 4 in a real browser: ``%%openprogram`` cells are turns of the notebook's session.

What a user does, in JupyterLab + Chromium: open a notebook, run its cells one by one, see
the turn drawn under the cell, save; restart the kernel and run another turn without
``%load_ext`` (issue 11: the frontend extension loads it); close the
notebook (shutting its kernel down), reopen it and Run All at once.  Every turn must land
in the one session whose id the saved ``.ipynb`` keeps in ``metadata.openprogram``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .agents import AGENTS, LOAD
from .jupyterlab import LabPage, LabServer, write_notebook

DEFINE = AGENTS
TURN_1 = '%%openprogram\nhandle("the app crashes on save")'
TURN_2 = '%%openprogram\nhandle("please add a dark mode")'
CELLS = [LOAD, DEFINE, TURN_1, TURN_2]


def session_dirs(server: LabServer) -> set[str]:
    root = server.openprogram_home / "sessions"
    if not root.is_dir():
        return set()
    return {p.name for p in root.iterdir() if not p.name.startswith(".")}


def turn_count(server: LabServer, session_id: str) -> int:
    """Turn nodes of the stored session, read by a fresh store object (never a cached one)."""
    from openprogram.store.session import SessionStore

    store = SessionStore(server.openprogram_home)
    try:
        return sum(1 for c in store.open(session_id).nodes() if c.kind == "turn")
    finally:
        store.close()


def saved_session_id(nb_path: Path) -> str:
    meta = json.loads(nb_path.read_text())["metadata"]
    assert "openprogram" in meta, f"no metadata.openprogram in the saved file: {meta}"
    sid = meta["openprogram"].get("session_id")
    assert isinstance(sid, str) and sid, meta["openprogram"]
    return sid


def wait_turn_drawn(lab: LabPage, index: int, session_id: str | None = None) -> str:
    """The turn's DAG is under cell ``index`` (the live widget); return the widget's title."""
    out = lab.cell(index).locator(".jp-OutputArea-output")
    out.locator("g.op-node[data-kind='turn']").first.wait_for()
    out.locator("g.op-node[data-kind='function']").first.wait_for()
    title = out.locator(".op-title").first.inner_text()
    if session_id is not None:
        assert session_id in title, title
    return title


@pytest.mark.browser
@pytest.mark.timeout(240)
def test_cells_continue_one_session(lab: LabPage, notebook_dir: tuple[Path, str]) -> None:
    server = lab.server
    abs_dir, rel_dir = notebook_dir
    nb_path = write_notebook(abs_dir / "triage.ipynb", CELLS)
    rel = f"{rel_dir}/triage.ipynb"
    before = session_dirs(server)

    # -- 1. open, run the cells one by one, see the turn, save --------------------------
    lab.open_notebook(rel)
    lab.wait_kernel_idle()
    lab.run_cell_expect(0, 1)
    lab.run_cell_expect(1, 2)
    text = lab.run_cell_expect(2, 3)
    assert "Traceback" not in text, text
    title = wait_turn_drawn(lab, 2)
    lab.page.wait_for_function(
        "() => !!window.jupyterapp.shell.currentWidget.model.getMetadata('openprogram')"
    )
    lab.save()
    sid = saved_session_id(nb_path)
    assert sid in title, (sid, title)
    assert session_dirs(server) - before == {sid}
    assert turn_count(server, sid) == 1

    # -- 2. restart the kernel; no %load_ext: the frontend extension's silent request
    #       loads it (the metadata names a session), the provider comes from the metadata
    lab.command("kernelmenu:restart")
    lab.accept_dialog()
    lab.wait_kernel_idle()
    lab.run_cell_expect(1, 1)  # define again (cell 0, the %load_ext cell, is not run)
    text = lab.run_cell_expect(3, 2)
    assert "Cell magic" not in text and "not loaded" not in text, text
    assert "new session" not in text, text
    assert "provider test from this notebook's metadata" in text, text
    wait_turn_drawn(lab, 3, sid)
    assert turn_count(server, sid) == 2
    lab.save()
    assert saved_session_id(nb_path) == sid
    assert session_dirs(server) - before == {sid}

    # -- 3. close the notebook (its kernel shut down), reopen, Run All at once -----------
    lab.command("notebook:close-and-shutdown")
    lab.accept_dialog()
    lab.page.wait_for_function(
        "(path) => !window.jupyterapp.shell.currentWidget"
        " || window.jupyterapp.shell.currentWidget.context?.path !== path",
        arg=rel,
    )
    assert not [s for s in server.api("api/sessions") if s["path"] == rel]
    lab.open_notebook(rel)
    status = lab.wait_kernel_session()
    lab.run_all()
    print(f"Run All clicked with kernel status {status!r}")
    # a fresh kernel: the four cells get [1]..[4]; the first turn already continues `sid`
    first = lab.cell(2)
    first.locator(".jp-InputPrompt", has_text="[3]").wait_for()
    assert "new session" not in lab.output_text(2), lab.output_text(2)
    wait_turn_drawn(lab, 2, sid)
    lab.cell(3).locator(".jp-InputPrompt", has_text="[4]").wait_for()
    wait_turn_drawn(lab, 3, sid)
    assert turn_count(server, sid) == 4
    assert session_dirs(server) - before == {sid}, "Run All minted a new session"
    assert re.search(r"turn 3\b", first_turn_header(lab, 2)), first_turn_header(lab, 2)
    lab.save()
    assert saved_session_id(nb_path) == sid
    server.shutdown_notebook_kernels(rel)


def first_turn_header(lab: LabPage, index: int) -> str:
    """The turn's text/plain header as saved with the output (``… session ID · turn N``)."""
    return str(
        lab.page.evaluate(
            """(i) => {
                const w = window.jupyterapp.shell.currentWidget;
                const outs = w.model.cells.get(i).outputs;
                for (let k = 0; k < outs.length; k++) {
                    const d = outs.get(k).data['text/plain'];
                    if (d && String(d).startsWith('openprogram')) return String(d).split('\\n')[0];
                }
                return '';
            }""",
            index,
        )
    )
