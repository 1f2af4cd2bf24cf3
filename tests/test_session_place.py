"""``sessions list`` names a notebook by where it is, not by the path as typed relative to
a folder the user has long left (``openprogram run work/nb.ipynb``, a Lab's server root)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from openprogram.cli import main as cli_main
from openprogram.store.session.store import SessionStore
from openprogram_magics.headless import run_notebook
from openprogram_magics.sessions import place_of
from tests.test_one_session import AGENT, REPO


@pytest.mark.kernel
@pytest.mark.timeout(180)
def test_sessions_list_shows_the_notebook_where_it_is_from_anywhere(
    tmp_path: Path,
    op_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    (tmp_path / "work").mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext openprogram_magics\n%openprogram provider test"),
        nbformat.v4.new_code_cell(AGENT),
        nbformat.v4.new_code_cell('%%openprogram\ntriage("the app crashes")'),
    ]
    nbformat.write(nb, tmp_path / "work" / "analysis.ipynb")
    monkeypatch.chdir(tmp_path)
    result = run_notebook(Path("work/analysis.ipynb"))  # as typed: relative to tmp_path
    assert result.error is None and result.session_id is not None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert cli_main(["sessions", "list"]) == 0
    listed = capsys.readouterr().out
    assert "  notebook /" in listed and listed.rstrip().endswith("/work/analysis.ipynb"), listed
    (meta,) = SessionStore(op_home).list_sessions()  # the whole path, unclipped
    assert meta["place"] == f"notebook {(tmp_path / 'work' / 'analysis.ipynb').resolve()}"


def test_a_path_relative_to_a_server_root_is_found_in_the_kernels_folder(tmp_path: Path) -> None:
    folder = tmp_path / "root" / "sub"
    folder.mkdir(parents=True)
    (folder / "nb.ipynb").write_text("{}")
    found = f"notebook {(folder / 'nb.ipynb').resolve()}"
    assert place_of("notebook sub/nb.ipynb", cwd=folder) == found  # the Lab's root-relative path
    assert place_of("notebook nb.ipynb", cwd=folder) == found
    assert place_of("notebook gone.ipynb", cwd=folder) == "notebook gone.ipynb"  # not guessed
    assert place_of("notebook /abs/nb.ipynb", cwd=folder) == "notebook /abs/nb.ipynb"
    assert place_of("notebook", cwd=folder) == "notebook"
