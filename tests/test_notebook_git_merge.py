"""No merge loses a cell (issue 35 items 1 and 2), with real git and no kernel.

A bare origin, two clones with their own identities; each person adds a cell at the same
place (``triage("crash when printing")`` / ``triage("slow startup")``, not run) and the
second one brings the first one's commit in by ``git merge``, ``git pull --rebase`` or
``git cherry-pick``.  With ``openprogram git-setup`` both cells survive without a conflict;
where a real conflict is left, git is told and the file is a valid notebook holding both
versions between marker cells.  A clone that lacks the driver is told once, and
``git-setup`` re-merges a notebook git's line merge broke there.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import nbformat
import pytest

from openprogram.cli import main as cli_main
from openprogram_magics.notebook import MIME_TYPE

REPO = Path(__file__).resolve().parents[1]
A_CELL, B_CELL = 'triage("crash when printing")', 'triage("slow startup")'
# nbdime 4.0.4 aligns these two as one changed cell and then writes an invalid notebook
SIMILAR = 'triage("crash when saving")'


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_EDITOR": "true",
    }
    done = subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False, env=env
    )
    if check and done.returncode:
        raise AssertionError(f"git {' '.join(args)}: {done.stdout}{done.stderr}")
    return done


def clone(origin: Path, where: Path, name: str) -> Path:
    git(origin.parent, "clone", "-q", str(origin), str(where))
    git(where, "config", "user.name", name)
    git(where, "config", "user.email", f"{name.lower()}@example.invalid")
    return where


def team(tmp_path: Path, set_up: bool = True) -> tuple[Path, Path]:
    """origin.git holding the quickstart (and, with ``set_up``, the attribute) and two
    clones; ``set_up`` also registers the driver in both."""
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    a = clone(origin, tmp_path / "a", "Ann")
    nbformat.write(
        nbformat.read(REPO / "notebooks" / "quickstart.ipynb", as_version=4), a / "nb.ipynb"
    )
    (a / ".gitattributes").write_text("*.ipynb merge=openprogram\n")
    if set_up:
        assert cli_main(["git-setup", str(a)]) == 0
    git(a, "add", "nb.ipynb", ".gitattributes")
    git(a, "commit", "-qm", "base")
    git(a, "push", "-q", "origin", "HEAD:main")
    b = clone(origin, tmp_path / "b", "Bob")
    if set_up:
        assert cli_main(["git-setup", str(b)]) == 0
    return a, b


def add_cell(clone_dir: Path, source: str, at: int = 6, turn: int | None = None) -> None:
    """What a person does in JupyterLab: insert a cell (optionally one run as ``turn``), save."""
    nb = nbformat.read(clone_dir / "nb.ipynb", as_version=4)
    cell = nbformat.v4.new_code_cell(source)
    if turn is not None:
        part = {"session_id": "nb_aaaaaaaaaa", "turn": turn, "version": 1}
        cell.outputs = [nbformat.v4.new_output("display_data", data={MIME_TYPE: part})]
    nb.cells.insert(at, cell)
    nbformat.write(nb, clone_dir / "nb.ipynb")


def sources(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    return [c.source for c in nb.cells]


def committed(clone_dir: Path) -> list[str]:
    nb = nbformat.reads(git(clone_dir, "show", "HEAD:nb.ipynb").stdout, as_version=4)
    return [c.source for c in nb.cells]


def both_add_and_combine(
    a: Path, b: Path, how: str, b_source: str = B_CELL, turns: tuple[int, int] | None = None
) -> subprocess.CompletedProcess[str]:
    """Ann adds and pushes a cell, Bob adds one and brings Ann's commit in by ``how``."""
    add_cell(a, A_CELL, turn=turns[0] if turns else None)
    git(a, "commit", "-qam", "Ann's cell")
    git(a, "push", "-q", "origin", "HEAD:main")
    add_cell(b, b_source, turn=turns[1] if turns else None)
    git(b, "commit", "-qam", "Bob's cell")
    if how == "merge":
        git(b, "fetch", "-q", "origin")
        return git(b, "merge", "--no-edit", "origin/main", check=False)
    if how == "rebase":
        return git(b, "pull", "--rebase", "origin", "main", check=False)
    git(b, "fetch", "-q", "origin")  # cherry-pick: Ann's commit onto Bob's branch
    return git(b, "cherry-pick", "origin/main", check=False)


@pytest.mark.parametrize("how", ["merge", "rebase", "cherry-pick"])
@pytest.mark.parametrize("b_source", [B_CELL, SIMILAR])
def test_a_cell_added_by_each_side_merges_as_both_cells(
    tmp_path: Path, how: str, b_source: str
) -> None:
    a, b = team(tmp_path)
    done = both_add_and_combine(a, b, how, b_source)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CONFLICT" not in done.stdout
    cells = sources(b / "nb.ipynb")
    assert A_CELL in cells and b_source in cells
    assert cells.index(A_CELL) in (6, 7) and cells.index(b_source) in (6, 7)
    assert cells[8] == nbformat.read(REPO / "notebooks" / "quickstart.ipynb", 4).cells[6].source
    assert git(b, "status", "--porcelain").stdout == ""  # nothing left to resolve
    assert committed(b) == cells  # committed, both cells


@pytest.mark.parametrize("how", ["merge", "rebase"])
def test_run_cells_both_sides_added_come_in_turn_order(tmp_path: Path, how: str) -> None:
    a, b = team(tmp_path)
    done = both_add_and_combine(a, b, how, turns=(8, 7))  # Bob's turn came first
    assert done.returncode == 0, done.stdout + done.stderr
    cells = sources(b / "nb.ipynb")
    assert cells[6:8] == [B_CELL, A_CELL]


def test_a_cell_both_changed_is_a_visible_conflict_holding_both_versions(
    tmp_path: Path,
) -> None:
    a, b = team(tmp_path)
    for who, text in ((a, 'handle("crash when printing")'), (b, 'handle("slow startup")')):
        nb = nbformat.read(who / "nb.ipynb", as_version=4)
        nb.cells[5].source = f"%%openprogram\n{text}"
        nbformat.write(nb, who / "nb.ipynb")
    git(a, "commit", "-qam", "Ann's change")
    git(a, "push", "-q", "origin", "HEAD:main")
    git(b, "commit", "-qam", "Bob's change")
    done = git(b, "pull", "--rebase", "origin", "main", check=False)
    assert done.returncode != 0 and "CONFLICT" in done.stdout  # git is told
    assert "conflict(s) left as marker cells" in done.stderr
    nb = nbformat.read(b / "nb.ipynb", as_version=4)
    nbformat.validate(nb)  # it opens in JupyterLab
    text = [c.source for c in nb.cells]
    assert any("<<<<<<< ours" in s for s in text)
    assert any(">>>>>>> theirs" in s for s in text)
    assert any("crash when printing" in s for s in text) and any("slow startup" in s for s in text)
    assert len({c.id for c in nb.cells}) == len(nb.cells)


def test_a_deleted_cell_stays_deleted_and_deleted_against_changed_conflicts(
    tmp_path: Path,
) -> None:
    a, b = team(tmp_path)
    nb = nbformat.read(a / "nb.ipynb", as_version=4)
    gone, changed = nb.cells[7].source, nb.cells[5].id
    del nb.cells[7]  # Ann deletes `%openprogram status`...
    nb.cells = [c for c in nb.cells if c.id != changed]  # ...and the handle() cell
    nbformat.write(nb, a / "nb.ipynb")
    git(a, "commit", "-qam", "Ann deletes")
    git(a, "push", "-q", "origin", "HEAD:main")
    nb = nbformat.read(b / "nb.ipynb", as_version=4)
    nb.cells[5].source += "  # Bob's edit"
    nbformat.write(nb, b / "nb.ipynb")
    git(b, "commit", "-qam", "Bob edits")
    git(b, "fetch", "-q", "origin")
    done = git(b, "merge", "--no-edit", "origin/main", check=False)
    assert done.returncode != 0
    cells = sources(b / "nb.ipynb")
    assert gone not in cells  # a deletion the other side did not touch holds
    assert any("# Bob's edit" in s for s in cells)  # a deletion against an edit: both shown
    assert any("<<<<<<< ours" in s for s in cells)


def test_a_clone_without_the_driver_is_told_once_and_git_setup_repairs_a_broken_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = team(tmp_path, set_up=False)
    monkeypatch.chdir(b)
    assert cli_main(["sessions", "list"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "openprogram git-setup" in err[0] and "cannot run it" in err[0]
    assert cli_main(["sessions", "list"]) == 0
    assert capsys.readouterr().err == ""  # once per clone

    done = both_add_and_combine(a, b, "rebase")  # git's line merge: the file breaks
    assert done.returncode != 0
    with pytest.raises(ValueError):
        json.loads((b / "nb.ipynb").read_text())
    assert cli_main(["sessions", "list"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nb.ipynb" in err[0] and "re-merges it" in err[0]

    assert cli_main(["git-setup", str(b)]) == 0
    out = capsys.readouterr().out
    assert "re-merged nb.ipynb as a notebook (merged)" in out
    cells = sources(b / "nb.ipynb")
    assert A_CELL in cells and B_CELL in cells
    git(b, "add", "nb.ipynb")
    git(b, "rebase", "--continue")
    assert A_CELL in committed(b) and B_CELL in committed(b)
    assert cli_main(["sessions", "list"]) == 0
    assert capsys.readouterr().err == ""  # set up: nothing to say


def test_a_driver_whose_python_is_gone_leaves_visible_conflict_lines_never_one_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bob removed the virtualenv git-setup wrote into his .git/config."""
    a, b = team(tmp_path)
    command = git(b, "config", "merge.openprogram.driver").stdout.strip()
    gone = str(tmp_path / "removed-venv" / "bin" / "python")
    git(b, "config", "merge.openprogram.driver", command.replace(command.split()[0], gone, 1))
    done = both_add_and_combine(a, b, "merge")
    assert done.returncode != 0 and "CONFLICT" in done.stdout
    text = (b / "nb.ipynb").read_text()
    assert "<<<<<<< ours" in text and ">>>>>>> theirs" in text
    assert "crash when printing" in text and "slow startup" in text
    monkeypatch.chdir(b)
    assert cli_main(["sessions", "list"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nb.ipynb" in err[0] and "git-setup" in err[0]
    assert cli_main(["git-setup", "."]) == 0
    assert "re-merged nb.ipynb as a notebook (merged)" in capsys.readouterr().out
    cells = sources(b / "nb.ipynb")
    assert cells[6:8] == [B_CELL, A_CELL]


def test_loading_the_extension_in_such_a_clone_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    _a, b = team(tmp_path, set_up=False)
    monkeypatch.chdir(b)
    InteractiveShell.clear_instance()  # a shell an earlier test left may have it loaded
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "openprogram_magics")
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "openprogram git-setup ." in err[0]
    finally:
        shell.run_line_magic("unload_ext", "openprogram_magics")
        InteractiveShell.clear_instance()


def run_as(clone_dir: Path, who: str, turn: int) -> None:
    """``who`` picks a model and a kernel and re-runs cell 4 (a turn): the file says so."""
    nb = nbformat.read(clone_dir / "nb.ipynb", as_version=4)
    nb.metadata["openprogram"]["model"] = f"model-of-{who}"
    nb.metadata["kernelspec"]["display_name"] = f"Python ({who})"
    part = {"session_id": "nb_aaaaaaaaaa", "turn": turn, "version": 1}
    nb.cells[4].outputs = [nbformat.v4.new_output("display_data", data={MIME_TYPE: part})]
    nb.cells[4].execution_count = turn
    nbformat.write(nb, clone_dir / "nb.ipynb")


@pytest.mark.parametrize("how", ["merge", "rebase", "cherry-pick"])
def test_what_both_changed_keeps_this_clones_side_however_it_is_combined(
    tmp_path: Path, how: str
) -> None:
    """``git pull --rebase`` hands the driver the upstream side as %A: Bob's model, kernel
    and turn output are still what his merged notebook keeps."""
    a, b = team(tmp_path)
    nb = nbformat.read(a / "nb.ipynb", as_version=4)
    nb.metadata["openprogram"] = {"session_id": "nb_aaaaaaaaaa", "version": 1}
    nbformat.write(nb, a / "nb.ipynb")
    git(a, "commit", "-qam", "the session")
    git(a, "push", "-q", "origin", "HEAD:main")
    git(b, "pull", "-q", "--no-rebase", "origin", "main")
    run_as(a, "Ann", 2)
    run_as(b, "Bob", 3)
    done = both_add_and_combine(a, b, how)
    assert done.returncode == 0, done.stdout + done.stderr
    nb = nbformat.read(b / "nb.ipynb", as_version=4)
    assert nb.metadata["openprogram"]["model"] == "model-of-Bob"
    assert nb.metadata["kernelspec"]["display_name"] == "Python (Bob)"
    assert nb.cells[4].outputs[0]["data"][MIME_TYPE]["turn"] == 3
    assert A_CELL in sources(b / "nb.ipynb") and B_CELL in sources(b / "nb.ipynb")


@pytest.mark.parametrize("how", ["merge", "rebase"])
def test_each_side_naming_its_own_session_is_a_conflict_git_reports(
    tmp_path: Path, how: str
) -> None:
    """Both started a session for the notebook: git is told, the file holds both ids."""
    a, b = team(tmp_path)
    for who, sid in ((a, "nb_aaaaaaaaaa"), (b, "nb_bbbbbbbbbb")):
        nb = nbformat.read(who / "nb.ipynb", as_version=4)
        nb.metadata["openprogram"] = {"session_id": sid, "version": 1}
        nbformat.write(nb, who / "nb.ipynb")
    done = both_add_and_combine(a, b, how)
    assert done.returncode != 0 and "CONFLICT" in done.stdout  # git is told
    assert "conflict(s) left as marker cells" in done.stderr
    nb = nbformat.read(b / "nb.ipynb", as_version=4)
    nbformat.validate(nb)
    text = [c.source for c in nb.cells]
    assert "<<<<<<< ours" in text[0] and ">>>>>>> theirs" in text[4]
    mine, other = text[1], text[3]
    assert "nb_bbbbbbbbbb" in mine and "nb_aaaaaaaaaa" in other  # Bob's side first
    assert nb.metadata["openprogram"]["session_id"] == "nb_bbbbbbbbbb"
    assert A_CELL in text and B_CELL in text
    assert len({c.id for c in nb.cells}) == len(nb.cells)


def save_as_older_jupyter(path: Path, change: Any = None) -> None:
    """What a Jupyter writing nbformat 4.4 saves (after ``change(cells)``): no cell ids."""
    nb = nbformat.read(path, as_version=4)
    if change is not None:
        change(nb.cells)
    doc = json.loads(json.dumps(nb))
    doc["nbformat_minor"] = 4
    for cell in doc["cells"]:
        cell.pop("id", None)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def save_as_newer_jupyter(path: Path, change: Any = None) -> None:
    """A newer Jupyter opens a 4.4 notebook and saves it: nbformat upgrades it to 4.5,
    which gives every cell a new random id (then ``change(cells)``)."""
    nb = nbformat.v4.upgrade(nbformat.read(path, as_version=4), from_version=4, from_minor=4)
    if change is not None:
        change(nb.cells)
    nbformat.write(nb, path)


def appends(cells: list[Any]) -> None:
    cells.append(nbformat.v4.new_code_cell("summary = triage.summary()"))


def appends_too(cells: list[Any]) -> None:
    cells.append(nbformat.v4.new_code_cell("print(summary)"))


def edits(cells: list[Any]) -> None:
    cells[1]["source"] += "  # edited"


def inserts_a_look(cells: list[Any]) -> None:
    cells.insert(1, nbformat.v4.new_code_cell("df.head()"))


def appends_a_look(cells: list[Any]) -> None:
    cells.append(nbformat.v4.new_code_cell("df.head()"))


@pytest.mark.parametrize(
    ("bob", "ann", "ann_upgrades_too"),
    [
        (None, appends, False),  # Bob's upgrade alone (this one merged before, too)
        (appends_too, appends, False),  # was: every cell in one block (nbdime's KeyError)
        (None, edits, False),  # was: a conflict on the cells (nbdime)
        (None, appends, True),  # both upgraded, each with its own random ids (was: one block)
        (inserts_a_look, appends_a_look, False),  # one text added in two places: two cells
    ],
)
@pytest.mark.parametrize("how", ["merge", "rebase"])
def test_one_side_upgraded_to_nbformat_4_5_merges_cell_by_cell(
    tmp_path: Path, how: str, bob: Any, ann: Any, ann_upgrades_too: bool
) -> None:
    """The notebook was nbformat 4.4; Bob's newer Jupyter upgraded it to 4.5 on save (cell
    ids added); Ann, on 4.4, appended or edited a cell and pushed first."""
    a, b = team(tmp_path)
    save_as_older_jupyter(a / "nb.ipynb")
    git(a, "commit", "-qam", "saved by a Jupyter writing nbformat 4.4")
    git(a, "push", "-q", "origin", "HEAD:main")
    git(b, "pull", "-q", "--no-rebase", "origin", "main")
    expected = [nbformat.v4.new_code_cell(s) for s in sources(b / "nb.ipynb")]
    for change in (bob, ann):
        if change is not None:
            change(expected)
    save_as_newer_jupyter(b / "nb.ipynb", bob)
    git(b, "commit", "-qam", "Bob's Jupyter saved it")
    (save_as_newer_jupyter if ann_upgrades_too else save_as_older_jupyter)(a / "nb.ipynb", ann)
    git(a, "commit", "-qam", "Ann's change")
    git(a, "push", "-q", "origin", "HEAD:main")
    if how == "merge":
        git(b, "fetch", "-q", "origin")
        done = git(b, "merge", "--no-edit", "origin/main", check=False)
    else:
        done = git(b, "pull", "--rebase", "origin", "main", check=False)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "CONFLICT" not in done.stdout
    nb = json.loads((b / "nb.ipynb").read_text())
    assert nb["nbformat_minor"] == 5
    ids = [c.get("id") for c in nb["cells"]]
    assert all(ids) and len(set(ids)) == len(ids)
    merged = sources(b / "nb.ipynb")
    assert git(b, "status", "--porcelain").stdout == ""
    assert committed(b) == merged
    want = [c.source for c in expected]
    both = 2 if bob is appends_too else 0  # both added a cell at the end: in either order
    assert merged[: len(merged) - both] == want[: len(want) - both]
    assert sorted(merged[len(merged) - both :]) == sorted(want[len(want) - both :])
