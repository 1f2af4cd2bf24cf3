"""A turn's outputs in a notebook under git (issue 35 item 9), run by a real kernel.

A one-call ``%%openprogram`` turn adds at most 3 KB to the ``.ipynb``; running the notebook
again, when the cell reproduces its reply, changes at most 10 lines of it (``git diff``'s
added + removed); the file still draws the turn's DAG where no extension runs (nbconvert,
as GitHub and nbviewer do), the extension's part reads back whole, and ``stale`` still finds
the turn a cell shows.  ``benchmarks/bench_notebook_diff.py`` prints the same figures.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbconvert import HTMLExporter

from openprogram.view.saved import DAG_MIME, read_saved
from openprogram_magics.commands.stale import shown_turns
from openprogram_magics.headless import run_notebook
from openprogram_magics.notebook import MIME_TYPE

REPO = Path(__file__).resolve().parents[1]
CELL = '%%openprogram\nfrom openprogram import llm\nreply = llm("Say hello.")'
pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout


def lines_changed(repo: Path) -> int:
    """Lines added + removed in the notebook since the last commit, as git counts them."""
    added, removed, _ = git(repo, "diff", "--numstat", "--", "nb.ipynb").split()
    return int(added) + int(removed)


def commit(repo: Path) -> None:
    git(repo, "add", "nb.ipynb")
    git(repo, "commit", "-qm", "run")


def run(path: Path) -> None:
    ran = run_notebook(path, timeout=120)
    assert ran.error is None, ran.error


def test_a_one_call_turn_adds_at_most_3_kb_and_a_reproduced_rerun_changes_at_most_10_lines(
    tmp_path: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [str(REPO), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))
    monkeypatch.setenv("OPENPROGRAM_PROVIDER", "test")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Ada Lovelace")  # the turn's author is saved
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "ada@example.org")
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    path = repo / "nb.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext openprogram_magics"),
        nbformat.v4.new_code_cell(CELL),
    ]
    nbformat.write(nb, path)
    run(path)  # the notebook gets its session; then the turn's cell is cleared
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].outputs, nb.cells[1].execution_count = [], None
    nbformat.write(nb, path)
    commit(repo)
    before = path.stat().st_size

    run(path)
    assert path.stat().st_size - before <= 3 * 1024
    commit(repo)
    first = nbformat.read(path, as_version=4)

    run(path)  # the same cell, the same reply: only the turn's own parts change
    assert lines_changed(repo) <= 10
    again = nbformat.read(path, as_version=4)
    (dag,) = [o.data for o in again.cells[1].outputs if DAG_MIME in o.get("data", {})]
    saved = read_saved(dag[DAG_MIME])
    assert [s["kind"] for s in saved["summary"]] == ["turn", "llm"]
    assert set(saved["details"]) == {s["id"] for s in saved["summary"]}  # every panel
    assert (
        saved["details"][saved["summary"][1]["id"]]["output"]["text"] == "[test reply] Say hello."
    )
    turn = dag[MIME_TYPE]["last_turn_id"]  # the one `stale` reads for this cell
    (previous,) = [o.data[MIME_TYPE] for o in first.cells[1].outputs if MIME_TYPE in o.data]
    assert turn == saved["head_id"] != previous["last_turn_id"]  # a new turn
    shown = shown_turns(again.cells, dag[MIME_TYPE]["session_id"])
    assert list(shown.values()) == [saved["head_id"]]

    body, _ = HTMLExporter().from_notebook_node(again)  # GitHub, nbviewer: the drawing
    (svg,) = re.findall(r"<svg.*?</svg>", body, re.S)
    assert ">cell [2]</tspan>" in svg and ">test</tspan>" in svg
    assert "[test reply] Say hello." in svg  # the reply's preview, in the llm node's label
