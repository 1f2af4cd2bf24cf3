"""Who did what is visible, and every machine counts a session's turns the same (issue 19,
items 7 and 9): session commits are authored by the person who ran the turn (their own git
identity, read from their global config file, never from a session's), the turn nodes
record it for the DAG, ``sessions log`` shows it, and two people joining one session see
two authors and the same number of turns.

Two people are two ``OPENPROGRAM_HOME``s and two identities (``HOME`` with a
``.gitconfig`` each); the remote is a bare repository reached by ``file://``.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import settled

from openprogram import agentic_function
from openprogram.cli import main
from openprogram.providers import create_runtime
from openprogram.store.session import session_context
from openprogram.store.session.records import current_author, forget_author
from openprogram.store.session.store import SessionStore
from openprogram.store.session.sync import pull, push
from openprogram.view import compute_layout
from openprogram.view.summary import summarize

IDENTITY_VARS = (
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_CONFIG_GLOBAL",
    "XDG_CONFIG_HOME",
    "EMAIL",
)


@agentic_function
def echo(text: str, runtime=None) -> str:  # type: ignore[no-untyped-def]
    """Repeat the text."""
    return str(runtime.exec(text))


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return out.stdout


class Person:
    """One colleague: a home folder with their ``.gitconfig``, and their sessions."""

    def __init__(self, root: Path, name: str, email: str, mp: pytest.MonkeyPatch) -> None:
        self.home = root / name.split()[0].lower()
        self.home.mkdir(parents=True)
        (self.home / ".gitconfig").write_text(f"[user]\n\tname = {name}\n\temail = {email}\n")
        self.store = SessionStore(self.home / "op")
        self.name, self._mp = name, mp

    def act(self) -> Person:
        """This person is at the keyboard now (their HOME, identity read again)."""
        self._mp.setenv("HOME", str(self.home))
        forget_author()
        return self

    def turns(self, sid: str, *texts: str) -> None:
        self.act()
        for text in texts:
            with session_context(sid, db=self.store, message=text, runtime=create_runtime("test")):
                echo(text)

    def cli(self, capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
        capsys.readouterr()
        assert main(["--home", str(self.store.home), *argv]) == 0
        return capsys.readouterr().out.splitlines()


@pytest.fixture(autouse=True)
def no_identity(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for var in IDENTITY_VARS:
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "nobody").mkdir()  # a home without a git config
    monkeypatch.setenv("HOME", str(tmp_path / "nobody"))
    forget_author()
    yield
    forget_author()


@pytest.fixture
def pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Person, Person]]:
    alice = Person(tmp_path, "Alice Liddell", "alice@example.org", monkeypatch)
    bob = Person(tmp_path, "Bob Builder", "bob@example.org", monkeypatch)
    yield alice, bob
    alice.store.close()
    bob.store.close()


def test_the_identity_is_the_users_own_and_a_guess_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "me"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "config").write_text("[user]\n\tname = Older Name\n")
    (home / ".gitconfig").write_text("[user]\n\tname = Ada <Lovelace>\n\temail = ada@example.org\n")
    monkeypatch.setenv("HOME", str(home))
    forget_author()
    author = current_author()  # ~/.gitconfig is read after the XDG file, as git does
    assert (author.name, author.email, author.verified) == ("Ada Lovelace", "ada@example.org", True)

    monkeypatch.setenv("GIT_AUTHOR_NAME", "Grace Hopper")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "grace@example.org")
    forget_author()
    assert current_author().ident == "Grace Hopper <grace@example.org>"  # git's own order

    for var in IDENTITY_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "empty"))
    forget_author()
    guessed = current_author()
    assert guessed.name.endswith(" (unverified)") and "@" in guessed.email
    assert not guessed.verified and guessed.to_json()["unverified"] is True


def test_commits_and_turns_carry_who_ran_them(
    pair: tuple[Person, Person], capsys: pytest.CaptureFixture[str]
) -> None:
    alice, _bob = pair
    alice.turns("s_who", "one", "two")
    path = alice.store.session_path("s_who")
    # the session's own config names another user: it is never what a commit says
    assert "openprogram@localhost" in (path / ".git" / "config").read_text()
    authors = git(path, "log", "--format=%an <%ae>|%cn", "main").splitlines()
    assert authors == ["Alice Liddell <alice@example.org>|openprogram"] * 3  # created + 2 turns
    session = alice.store.open("s_who")
    tops = [n for n in session.nodes() if n.caller is None and n.kind != "root"]
    assert [n.metadata["author"] for n in tops] == [
        {"name": "Alice Liddell", "email": "alice@example.org"}
    ] * 2
    logged = alice.cli(capsys, "sessions", "log", "s_who")
    assert len(logged) == 3 and all(" Alice Liddell  " in line for line in logged)


def test_two_people_one_session_two_authors_and_the_same_turn_count(
    pair: tuple[Person, Person], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alice, bob = pair
    remote = tmp_path / "team.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    url = f"file://{remote}"

    alice.turns("s_team", "a1", "a2")
    push(alice.store, "s_team", url, "file")
    assert pull(bob.act().store, "s_team", url, "file").status == "new"
    bob.turns("s_team", "b1")
    alice.turns("s_team", "a3", "a4")
    push(alice.act().store, "s_team", url, "file")
    got = pull(bob.act().store, "s_team", url, "file")
    assert got.status == "merged" and got.new_turns == 2
    push(bob.store, "s_team", url, "file")
    assert pull(alice.act().store, "s_team", url, "file").status == "fast-forward"
    # both go on, then exchange again: a merge on each side of the history
    alice.turns("s_team", "a5")
    bob.turns("s_team", "b2")
    push(alice.act().store, "s_team", url, "file")
    assert pull(bob.act().store, "s_team", url, "file").status == "merged"
    push(bob.store, "s_team", url, "file")
    pull(alice.act().store, "s_team", url, "file")

    expected = 7  # a1-a5, b1, b2
    for person in (alice, bob):
        session = person.store.open("s_team")
        tops = [n for n in session.nodes() if n.caller is None and n.kind != "root"]
        assert len(tops) == expected
        (row,) = [line for line in person.cli(capsys, "sessions", "list") if "s_team" in line]
        assert row.split()[1] == str(expected), row
        shown = person.cli(capsys, "sessions", "show", "s_team")
        assert any(line.startswith(f"turns    {expected} ") for line in shown), shown[:6]

        logged = person.cli(capsys, "sessions", "log", "s_team")
        by = {line.split("  ", 1)[0].split(" ", 3)[3] for line in logged}
        assert {"Alice Liddell", "Bob Builder"} <= by, logged
        assert any(re.search(r" Bob Builder +pull: join the line", x) for x in logged), logged

        # the DAG's turn rows say whose line is whose (the hover card's "by")
        nodes = {n.id: n for n in session.nodes()}
        rows = summarize(compute_layout([n.to_dict() for n in nodes.values()], session.head_id))
        by_text = {nodes[r["id"]].input["text"]: r["by"] for r in rows if "by" in r}
        assert by_text == {
            **{f"a{i}": "Alice Liddell" for i in range(1, 6)},
            "b1": "Bob Builder",
            "b2": "Bob Builder",
        }
    settled(alice.store.home)
    settled(bob.store.home)


def test_a_notebook_turn_shows_who_ran_it_in_its_dag(
    pair: tuple[Person, Person], bare_shell: Any
) -> None:
    """The DAG under a cell (its saved data, drawn by the same dag.js as the live view and
    the whole-session view) names who ran the turn: the hover card's "by" line."""
    from openprogram.view.saved import DAG_MIME, read_saved

    alice, _bob = pair
    alice.act()
    bare_shell.run("%%openprogram\nx = 1")
    (saved,) = [read_saved(b[DAG_MIME]) for b in bare_shell.bundles() if DAG_MIME in b]
    turn = saved["summary"][0]
    assert turn["kind"] == "turn" and turn["by"] == "Alice Liddell"
