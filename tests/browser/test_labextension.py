"""Smoke test: the openprogram-jupyter extension in a real JupyterLab + Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .jupyterlab import EXTENSION_NAME, LabPage, write_notebook

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
    assert EXTENSION_NAME in lab.loaded_extensions()
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
