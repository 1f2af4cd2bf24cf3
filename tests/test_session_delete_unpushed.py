"""Nothing unpushed is deleted without a question (issue 35 item 5): ``openprogram sessions
delete`` names the turns no remote holds (how many, the newest's label and date) and keeps
the session unless ``--force``; a session whose turns are all on a remote it was pushed
to or pulled from goes with ``--yes``.

Two people are two ``OPENPROGRAM_HOME``s and two git identities; the remote is a bare
repository reached by ``file://``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_team_authors import IDENTITY_VARS, Person

from openprogram.cli import main
from openprogram.store.session.records import forget_author
from openprogram.store.session.sync import pull, push

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def no_identity(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for var in IDENTITY_VARS:
        monkeypatch.delenv(var, raising=False)
    forget_author()
    yield
    forget_author()


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Person, Person, str]]:
    alice = Person(tmp_path, "Alice Liddell", "alice@example.org", monkeypatch)
    bob = Person(tmp_path, "Bob Builder", "bob@example.org", monkeypatch)
    remote = tmp_path / "team.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    yield alice, bob, f"file://{remote}"
    alice.store.close()
    bob.store.close()


def delete(person: Person, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    person.act()
    person.store.close()  # the CLI is another process in life: nothing held open here
    capsys.readouterr()
    code = main(["--home", str(person.store.home), "sessions", "delete", *argv])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_turns_never_pushed_are_named_and_kept_unless_forced(
    team: tuple[Person, Person, str], capsys: pytest.CaptureFixture[str]
) -> None:
    alice, _bob, _url = team
    alice.turns("s_mine", "first", "second", "third thoughts")
    today = time.strftime("%Y-%m-%d")
    for argv in (["s_mine", "--yes"], ["s_mine"]):  # no terminal to ask at: refused too
        code, said = delete(alice, capsys, *argv)
        assert code == 2, said
        assert "not deleted" in said and "3 turns not pushed (never pushed" in said, said
        assert "turn 3: third thoughts" in said and today in said and "--force" in said, said
        assert (alice.store.session_path("s_mine") / ".git").is_dir()
    code, said = delete(alice, capsys, "s_mine", "--yes", "--force")
    assert code == 0 and "deleted session s_mine" in said
    assert not alice.store.session_path("s_mine").exists()


def test_only_what_no_remote_holds_is_counted(
    team: tuple[Person, Person, str], capsys: pytest.CaptureFixture[str]
) -> None:
    alice, bob, url = team
    alice.turns("s_shared", "one", "two")
    push(alice.act().store, "s_shared", url, "file")
    alice.turns("s_shared", "three")  # after the push: the one turn only here
    code, said = delete(alice, capsys, "s_shared", "--yes")
    assert code == 2 and "1 turn not pushed (newest: turn 3: three, " in said, said
    assert "never pushed" not in said

    # a colleague's copy pulled from the remote holds nothing of its own: it goes
    assert pull(bob.act().store, "s_shared", url, "file").status == "new"
    code, said = delete(bob, capsys, "s_shared", "--yes")
    assert code == 0, said

    push(alice.act().store, "s_shared", url, "file")  # now all of it is on the remote
    code, said = delete(alice, capsys, "s_shared", "--yes")
    assert code == 0 and "deleted session s_shared" in said, said

    # pulled again, a turn of bob's own is his to lose
    assert pull(bob.act().store, "s_shared", url, "file").status == "new"
    bob.turns("s_shared", "bob's idea")
    code, said = delete(bob, capsys, "s_shared", "--yes")
    assert code == 2 and "1 turn not pushed (newest: turn 4: bob's idea, " in said, said
    assert (bob.store.session_path("s_shared") / ".git").is_dir()


def test_a_forced_delete_says_the_notebook_still_names_the_session(
    team: tuple[Person, Person, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alice, _bob, _url = team
    alice.turns("s_nb", "one")
    notebook = tmp_path / "review.ipynb"
    alice.store.open("s_nb").note_place(f"notebook {notebook}")  # what a notebook's turn notes
    code, said = delete(alice, capsys, "s_nb", "--yes")
    assert code == 2 and "1 turn not pushed" in said, said
    code, said = delete(alice, capsys, "s_nb", "--force", "--yes")
    assert code == 0, said
    assert f"{notebook} still names it: its next turn starts a new session s_nb" in said, said


def test_at_a_terminal_the_question_names_what_would_be_lost(
    team: tuple[Person, Person, str], capsys: pytest.CaptureFixture[str]
) -> None:
    alice, _bob, _url = team
    alice.turns("s_ask", "one", "two")
    alice.store.close()

    def answer(text: str) -> subprocess.CompletedProcess[str]:
        """``sessions delete`` in a child process whose stdin is a terminal (a pty)."""
        master, slave = os.openpty()
        try:
            os.write(master, text.encode())  # typed ahead: the terminal keeps it
            return subprocess.run(
                [sys.executable, "-m", "openprogram.cli", "--home", str(alice.store.home),
                 "sessions", "delete", "s_ask"],
                stdin=slave, capture_output=True, text=True, timeout=60,
                env={**os.environ, "HOME": str(alice.home), "PYTHONPATH": str(REPO)},
            )  # fmt: skip
        finally:
            os.close(slave)
            os.close(master)

    said = answer("n\n")
    assert said.returncode == 2, said.stderr
    assert "2 turns not pushed (never pushed; newest: turn 2: two, " in said.stdout, said.stdout
    assert said.stdout.rstrip().endswith("would be lost [y/N]"), said.stdout
    assert (alice.store.session_path("s_ask") / ".git").is_dir()
    said = answer("y\n")
    assert said.returncode == 0 and "deleted session s_ask" in said.stdout, said
    assert not alice.store.session_path("s_ask").exists()
