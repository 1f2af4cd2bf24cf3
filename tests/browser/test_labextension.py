"""Smoke test: the openprogram-jupyter extension in a real JupyterLab + Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .jupyterlab import LabPage, write_notebook

READ_STATE = (
    "import openprogram_magics.bridge as b\n"
    "st = b.frontend_state()\n"
    "print('META', st.metadata if st else None, 'PATH', st.path if st else None)"
)
PUSH = 'print(b.push_metadata({"session_id": "s_new", "version": 1}))'


@pytest.mark.browser
@pytest.mark.timeout(180)
def test_metadata_round_trip(lab: LabPage, notebook_dir: tuple[Path, str]) -> None:
    abs_dir, rel_dir = notebook_dir
    nb_path = write_notebook(
        abs_dir / "round trip.ipynb", [READ_STATE, PUSH], {"openprogram": {"session_id": "s_pre"}}
    )
    lab.open_notebook(f"{rel_dir}/round trip.ipynb")
    lab.assert_extension_under_test()
    lab.wait_kernel_idle()

    # The silent execute_request reached the kernel before the first cell.
    out = lab.run_cell(0)
    assert "META {'session_id': 's_pre'}" in out, out
    assert f"PATH {rel_dir}/round trip.ipynb" in out, out

    # Kernel -> frontend: the comm writes metadata.openprogram and dirties the notebook.
    assert "True" in lab.run_cell(1)
    assert lab.notebook_metadata("openprogram") == {"session_id": "s_new", "version": 1}
    lab.save()
    saved = json.loads(nb_path.read_text())
    assert saved["metadata"]["openprogram"]["session_id"] == "s_new"
    assert saved["metadata"]["openprogram"] == {"session_id": "s_new", "version": 1}


@pytest.mark.browser
@pytest.mark.timeout(180)
def test_state_arrives_before_run_all(lab: LabPage, notebook_dir: tuple[Path, str]) -> None:
    """Run All as soon as a kernel exists, and Restart+Run All: the first cell sees the state."""
    abs_dir, rel_dir = notebook_dir
    write_notebook(
        abs_dir / "order.ipynb",
        [READ_STATE, "x = 1", "y = 2"],
        {"openprogram": {"session_id": "s_pre"}},
    )
    lab.open_notebook(f"{rel_dir}/order.ipynb")
    status = lab.wait_kernel_session()  # usually "unknown"/"starting": not yet idle
    lab.run_all()
    print(f"Run All clicked with kernel status {status!r}")
    assert "META {'session_id': 's_pre'}" in lab.wait_output(0, "META")

    # After a restart the module state is gone; the extension re-sends the *current*
    # (unsaved) model metadata ahead of the cells queued by "Restart Kernel and Run All".
    lab.wait_kernel_idle()
    lab.page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.model"
        ".setMetadata('openprogram', {session_id: 's_model'})"
    )
    lab.command("notebook:restart-run-all")
    lab.accept_dialog()
    lab.cell(0).locator(".jp-InputPrompt", has_text="[1]").wait_for()
    assert "META {'session_id': 's_model'}" in lab.wait_output(0, "s_model")
