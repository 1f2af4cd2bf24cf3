"""The extension is there after a restart: the silent request that hands a kernel the
notebook's metadata loads it when the metadata names a session (JupyterLab's extension and
the headless runners send that request), so the first ``%%openprogram`` cell needs no
``%load_ext``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from openprogram_magics import bridge
from openprogram_magics.headless import run_notebook, state_payload
from tests.test_magics import AGENTS

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def plain_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.setattr(bridge, "_state", None)
    InteractiveShell.clear_instance()
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.InteractiveShell.ipython_dir = str(tmp_path / "ipython")
    ip = InteractiveShell.instance(config=config)
    try:
        yield ip
    finally:
        InteractiveShell.clear_instance()


def test_metadata_naming_a_session_loads_the_extension(plain_shell: InteractiveShell) -> None:
    bridge.receive_frontend_state(state_payload(None, "new.ipynb"))  # a new notebook
    assert "openprogram_magics" not in plain_shell.extension_manager.loaded
    bridge.receive_frontend_state(state_payload({"session_id": "nb_saved"}, "a.ipynb"))
    assert "openprogram_magics" in plain_shell.extension_manager.loaded
    bridge.receive_frontend_state(state_payload({"session_id": "nb_saved"}, "a.ipynb"))  # again
    assert plain_shell.magics_manager.registry.get("OpenProgramMagics") is not None


@pytest.mark.kernel
@pytest.mark.timeout(240)
def test_a_saved_notebook_runs_headless_without_load_ext(
    tmp_path: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OPENPROGRAM_PROVIDER", "test")
    path = tmp_path / "nb.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.metadata["openprogram"] = {"session_id": "nb_saved_one", "version": 1}
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext openprogram_magics"),
        # any other extension still loads after the frontend loaded ours (IPython 9.19's
        # lazy %load_ext once recursed through a wrapper here), and says so the second time
        nbformat.v4.new_code_cell("%load_ext autoreload\n%autoreload 2\n%load_ext autoreload"),
        nbformat.v4.new_code_cell(AGENTS),
        nbformat.v4.new_code_cell('%%openprogram\ntriage("after a restart")'),
    ]
    nbformat.write(nb, path)
    result = run_notebook(path)
    assert result.error is None and result.session_id == "nb_saved_one"
    assert (op_home / "sessions" / "nb_saved_one").is_dir()
    cells = nbformat.read(result.path, as_version=4).cells
    assert cells[0].outputs == []  # quiet: the kernel had it loaded before the first cell
    said = "".join(o.get("text", "") for o in cells[1].outputs)
    assert "autoreload extension is already loaded" in said and "Error" not in said
