"""Two people, one notebook under git: the ``.ipynb`` merges (issue 19 item 6).

Real git (a bare origin and two clones), real kernels (nbclient, ``openprogram run``), the
offline ``test`` provider, two ``OPENPROGRAM_HOME``s.  Without the driver, two people
running *different* cells merge with git's own line merge; with ``openprogram git-setup``,
two people re-running the *same* cells merge too (nbdime for the rest); the driver refuses
what is not a notebook.  ``test_nbmerge_rules.py`` holds the metadata rules as data and
``test_headless_rerun.py`` what a re-run changes in the file.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import nbformat
import pytest

from openprogram.cli import main as cli_main
from openprogram_magics.headless import hand_over_state, run_notebook, with_last_turn
from openprogram_magics.kernels import QuietClient
from openprogram_magics.notebook import MIME_TYPE, parse_metadata

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[1]
TURN_A, TURN_B = 4, 5  # the quickstart's two %%openprogram cells


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    who = ["-c", "user.name=T", "-c", "user.email=t@example.invalid"]
    return subprocess.run(
        ["git", "-C", str(cwd), *who, *args], capture_output=True, text=True, check=check, env=env
    )


def notebook_without_session_commands() -> nbformat.NotebookNode:
    """The quickstart without its `status`/`log` cells (they print the whole session)."""
    nb = nbformat.read(REPO / "notebooks" / "quickstart.ipynb", as_version=4)
    nb.cells = [
        c for c in nb.cells if c.source.strip() not in ("%openprogram status", "%openprogram log")
    ]
    return nb


def run_cells(path: Path, turns: set[int], home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a person does in JupyterLab: run the setup cells and the turn cells ``turns``,
    leave every other output as it was, save; the metadata is what the kernel pushed to
    the extension after its last turn."""
    monkeypatch.setenv("OPENPROGRAM_HOME", str(home))
    nb = nbformat.read(path, as_version=4)
    stored = with_last_turn(nb.metadata.get("openprogram"), nb.cells)
    client = QuietClient(
        nb,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False,
    )
    first = min(i for i, c in enumerate(nb.cells) if c.source.startswith("%%openprogram"))
    with client.setup_kernel():
        hand_over_state(client.kc, stored, str(path))
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and (index < first or index in turns):
                client.execute_cell(cell, index)
    part = [o for o in nb.cells[max(turns)].outputs if MIME_TYPE in o.get("data", {})][-1]
    meta = parse_metadata(part["data"][MIME_TYPE])
    assert meta is not None
    nb.metadata["openprogram"] = meta.file_json()  # what the extension stores
    nbformat.write(nb, path)


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """origin.git holds nb.ipynb run once by A (the base); A's and B's clones and homes,
    B's home holding A's session (imported from a bundle)."""
    origin, a, b = tmp_path / "origin.git", tmp_path / "a", tmp_path / "b"
    home_a, home_b = tmp_path / "home_a", tmp_path / "home_b"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    git(tmp_path, "clone", "-q", str(origin), str(a))
    nbformat.write(notebook_without_session_commands(), a / "nb.ipynb")
    monkeypatch.setenv("OPENPROGRAM_HOME", str(home_a))
    sid = run_notebook(a / "nb.ipynb").session_id
    assert sid is not None
    git(a, "add", "nb.ipynb")
    git(a, "commit", "-qm", "base")
    git(a, "push", "-q", "origin", "HEAD:main")
    bundle = tmp_path / "s.bundle"
    assert cli_main(["--home", str(home_a), "sessions", "export", sid, "-o", str(bundle)]) == 0
    assert cli_main(["--home", str(home_b), "sessions", "import", str(bundle)]) == 0
    git(tmp_path, "clone", "-q", "-b", "main", str(origin), str(b))
    return {"a": a, "b": b, "home_a": home_a, "home_b": home_b, "sid": Path(sid)}


def commit_both_and_merge(team: dict[str, Path]) -> tuple[subprocess.CompletedProcess[str], str]:
    a, b = team["a"], team["b"]
    git(a, "commit", "-qam", "A ran a cell")
    git(a, "push", "-q", "origin", "HEAD:main")
    git(b, "commit", "-qam", "B ran a cell")
    git(b, "fetch", "-q", "origin")
    merged = git(b, "merge", "--no-edit", "origin/main", check=False)
    return merged, (b / "nb.ipynb").read_text()


def test_two_people_running_different_cells_merge_without_the_driver(
    team: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_cells(team["a"] / "nb.ipynb", {TURN_A}, team["home_a"], monkeypatch)
    run_cells(team["b"] / "nb.ipynb", {TURN_B}, team["home_b"], monkeypatch)
    merged, text = commit_both_and_merge(team)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "<<<<<<<" not in text and ">>>>>>>" not in text
    nb = nbformat.reads(text, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["openprogram"]["session_id"] == str(team["sid"])
    assert "last_turn_id" not in nb.metadata["openprogram"]
    a_cell = nbformat.read(team["a"] / "nb.ipynb", as_version=4).cells[TURN_A]
    assert nb.cells[TURN_A].outputs == a_cell.outputs  # A's turn, B's turn: both kept
    turns = [
        o["data"][MIME_TYPE]["last_turn_id"]
        for i in (TURN_A, TURN_B)
        for o in nb.cells[i].outputs
        if MIME_TYPE in o.get("data", {})
    ]
    assert len(set(turns)) == 2


def test_with_git_setup_both_rerunning_the_same_cells_merges(
    team: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    b = team["b"]
    assert cli_main(["git-setup", str(b)]) == 0
    assert cli_main(["git-setup", str(b)]) == 0  # idempotent
    out = capsys.readouterr().out
    assert "already set up" in out.splitlines()[-1]
    assert (b / ".gitattributes").read_text().count("*.ipynb merge=openprogram") == 1
    assert (
        "git-merge-notebook --conflict-status 3 %O %A %B %L %P"
        in git(b, "config", "merge.openprogram.driver").stdout
    )

    run_cells(team["a"] / "nb.ipynb", {TURN_A, TURN_B}, team["home_a"], monkeypatch)
    run_cells(b / "nb.ipynb", {TURN_A, TURN_B}, team["home_b"], monkeypatch)
    mine = nbformat.read(b / "nb.ipynb", as_version=4)
    merged, text = commit_both_and_merge(team)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "<<<<<<<" not in text and ">>>>>>>" not in text
    nb = nbformat.reads(text, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["openprogram"]["session_id"] == str(team["sid"])
    assert nb.metadata["openprogram"]["provider"] == "test"
    for index in (TURN_A, TURN_B):  # the side that merged keeps its own turn outputs
        assert nb.cells[index].outputs == mine.cells[index].outputs


def test_without_the_driver_the_same_cells_rerun_conflict_only_in_those_cells(
    team: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The case the driver exists for: a plain merge conflicts, in the turn outputs only."""
    run_cells(team["a"] / "nb.ipynb", {TURN_A}, team["home_a"], monkeypatch)
    run_cells(team["b"] / "nb.ipynb", {TURN_A}, team["home_b"], monkeypatch)
    merged, text = commit_both_and_merge(team)
    assert merged.returncode != 0
    head = text.split('"metadata": {\n  "kernelspec"')[-1]
    assert "<<<<<<<" not in head  # the notebook's metadata merged: only cell outputs conflict


def test_the_driver_refuses_what_is_not_a_notebook(tmp_path: Path) -> None:
    for name in ("base", "ours", "theirs"):
        (tmp_path / name).write_text("not json {")
    code = cli_main(
        ["git-merge-notebook", *(str(tmp_path / n) for n in ("base", "ours", "theirs"))]
    )
    assert code == 2  # nothing written: git-setup's driver command lets git's line merge follow
    assert (tmp_path / "ours").read_text() == "not json {"


def test_git_setup_outside_a_repository_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["git-setup", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "not inside a git repository" in err and len(err.strip().splitlines()) == 1
