"""The team story of issue 19, end to end: two people, one git repository holding the
notebook and its sessions, each on their own machine (their own ``OPENPROGRAM_HOME`` and
git identity), real kernels, real git.

A runs the notebook and pushes it and its session; B clones and runs a cell *before*
pulling; B pulls (both lines kept, said in one line) and commits the notebook; A runs
another cell and commits; B pulls the repository: the ``.ipynb`` merges without a
conflict marker, the session has every turn, and ``sessions log`` names both people.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import nbformat
import pytest
from test_gitmerge_team import TURN_A, TURN_B, git, notebook_without_session_commands, run_cells

from openprogram.cli import main as cli_main
from openprogram.store.session.records import forget_author
from openprogram.store.session.store import SessionStore
from openprogram_magics.headless import run_notebook

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]


def be(person: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sit at ``person``'s machine: their sessions, their git identity."""
    monkeypatch.setenv("OPENPROGRAM_HOME", str(home))
    monkeypatch.setenv("GIT_AUTHOR_NAME", person)
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", f"{person.lower()}@example.invalid")
    forget_author()


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert cli_main(list(argv)) == 0
    return capsys.readouterr().out


def cell_text(path: Path, index: int) -> str:
    cell = nbformat.read(path, as_version=4).cells[index]
    outputs = cell.get("outputs", [])
    return "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")


def test_two_people_one_repository_nothing_lost_nothing_conflicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    origin, a, b = tmp_path / "origin.git", tmp_path / "a", tmp_path / "b"
    home_a, home_b = tmp_path / "home_a", tmp_path / "home_b"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    git(tmp_path, "clone", "-q", str(origin), str(a))
    assert cli_main(["git-setup", str(a)]) == 0

    # A runs the notebook, pushes its session to the project's origin, commits and pushes it
    be("Alice", home_a, monkeypatch)
    nbformat.write(notebook_without_session_commands(), a / "nb.ipynb")
    sid = run_notebook(a / "nb.ipynb").session_id
    assert sid is not None
    assert "pushed to" in cli(capsys, "sessions", "push", "--notebook", str(a / "nb.ipynb"))
    git(a, "add", "nb.ipynb", ".gitattributes")
    git(a, "commit", "-qm", "A: the analysis")
    git(a, "push", "-q", "origin", "HEAD:main")

    # B clones and runs a cell before pulling the session: told in one line, not stuck
    git(tmp_path, "clone", "-q", "-b", "main", str(origin), str(b))
    assert cli_main(["git-setup", str(b)]) == 0
    be("Bob", home_b, monkeypatch)
    run_cells(b / "nb.ipynb", {TURN_B}, home_b, monkeypatch)
    out = cell_text(b / "nb.ipynb", TURN_B)
    note = [line for line in out.splitlines() if sid in line]
    assert len(note) == 1 and "not on this machine" in note[0] and "pull" in note[0], (sid, out)
    pulled = cli(capsys, "sessions", "pull", "--notebook", str(b / "nb.ipynb"))
    assert pulled.count("\n") == 1 and "joined" in pulled and "nothing lost" in pulled
    assert "pushed to" in cli(capsys, "sessions", "push", "--notebook", str(b / "nb.ipynb"))
    git(b, "commit", "-qam", "B: a question of my own")

    # A runs another cell, pulls B's turns into the session, commits and pushes the notebook
    be("Alice", home_a, monkeypatch)
    run_cells(a / "nb.ipynb", {TURN_A}, home_a, monkeypatch)
    cli(capsys, "sessions", "pull", "--notebook", str(a / "nb.ipynb"))
    assert "pushed to" in cli(capsys, "sessions", "push", "--notebook", str(a / "nb.ipynb"))
    git(a, "commit", "-qam", "A: one more")
    git(a, "push", "-q", "origin", "HEAD:main")

    # B pulls the repository: the notebook merges; the session has every turn of both
    be("Bob", home_b, monkeypatch)
    git(b, "fetch", "-q", "origin")
    merged = git(b, "merge", "--no-edit", "origin/main", check=False)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    text = (b / "nb.ipynb").read_text()
    assert "<<<<<<<" not in text and ">>>>>>>" not in text
    assert nbformat.reads(text, as_version=4).metadata["openprogram"]["session_id"] == sid
    cli(capsys, "sessions", "pull", "--notebook", str(b / "nb.ipynb"))
    alice, bob = SessionStore(home_a), SessionStore(home_b)
    ids = {e["id"] for e in bob.open(sid).index()}
    assert {e["id"] for e in alice.open(sid).index()} <= ids
    log = cli(capsys, "--home", str(home_b), "sessions", "log", sid)
    assert "Alice" in log and "Bob" in log
    authors = subprocess.run(
        ["git", "log", "--format=%an", "main"],
        cwd=bob.session_path(sid), capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert {"Alice", "Bob"} <= set(authors)
    alice.close()
    bob.close()
