"""No working tree, and one maintenance (issue 36 items 1 and 3).

A commit writes the turn to git only (one pack); a node's content is its row's record or
its file in git, so the session folder holds no node file and ``git status`` lists none as
deleted (the repository is bare).  The one maintenance is the roll-up of the small packs
(``rollup.py``: git's ``pack-objects`` fed their objects), run every
``history.REPACK_EVERY`` packs beside the writer, its git commands children the session's
close waits for a few seconds and then ends: nothing outlives the close.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from openprogram.context.nodes import COMPLETED, make_call
from openprogram.store.session import history
from openprogram.store.session.history import Repository
from openprogram.store.session.store import SessionStore
from tests.test_store import repack_now
from tests.waiting import running_in


def git(path: Path, *args: str, check: bool = True) -> str:
    return subprocess.run(
        ["git", *args], cwd=path, capture_output=True, text=True, check=check
    ).stdout


def add_turn(store: SessionStore, sid: str, name: str) -> None:
    session = store.open(sid)
    turn = session.begin_turn()
    top = session.append(make_call("turn", name, status=COMPLETED), turn=turn, advance_head=True)
    session.append(make_call("function", "f", caller=top.id, status=COMPLETED), turn=turn)
    session.commit(f"turn {turn}")


def test_a_turn_is_in_git_and_the_folder_shows_no_file_deleted(op_home: Path) -> None:
    store = SessionStore(op_home)
    store.create_session("m")
    add_turn(store, "m", "one")
    path = op_home / "sessions" / "m"
    store.close()
    assert not (path / "history").exists()  # no working tree: git holds the nodes
    names = git(path, "ls-tree", "--name-only", "HEAD:history/0000/000001").split()
    assert len(names) == 2
    cold = SessionStore(op_home).open("m")
    shown = {name: git(path, "show", f"HEAD:history/0000/000001/{name}") for name in names}
    assert sorted(n.name for n in cold.nodes()) == ["f", "one", "root"]
    assert all('"name"' in text for text in shown.values())
    status = subprocess.run(["git", "status", "--porcelain"], cwd=path, capture_output=True)
    assert b"deleted" not in status.stdout + status.stderr  # a bare repository: no checkout
    assert git(path, "log", "--format=%s").splitlines() == ["turn 1", "session m created"]
    assert git(path, "fsck", "--strict", "--no-progress") == ""
    assert sorted(os.listdir(path / ".state")) <= ["live.db", "live.db-shm", "live.db-wal"]


def test_a_node_rewritten_after_its_commit_is_read_as_committed_last(op_home: Path) -> None:
    store = SessionStore(op_home)
    store.create_session("moved")
    add_turn(store, "moved", "one")
    session = store.open("moved")
    node = next(n for n in session.nodes() if n.name == "one")
    node.output = "changed"
    session.update(node)
    session.commit("the turn's node rewritten")
    assert session.get(node.id).output == "changed"
    cold = SessionStore(op_home).open("moved")
    assert cold.get(node.id).output == "changed"
    assert [n.output for n in cold.nodes() if n.id == node.id] == ["changed"]
    store.close()


def test_a_writer_repacks_in_a_child_that_ends_with_its_close(
    op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ``REPACK_EVERY`` packs the roll-up runs beside the writer (git in a child);
    the packs stay few, and once the session is closed no process it started is left."""
    monkeypatch.setattr(history, "REPACK_EVERY", 10)
    started: list[subprocess.Popen[bytes]] = []
    real = Repository._start_repack

    def start(repo: Repository) -> None:
        before = repo._repacking
        real(repo)
        if repo._repacking is not None and repo._repacking is not before:
            started.append(repo._repacking)

    monkeypatch.setattr(Repository, "_start_repack", start)
    store = SessionStore(op_home)
    store.create_session("busy")
    path = op_home / "sessions" / "busy"
    for i in range(35):
        add_turn(store, "busy", f"busy {i}")
    assert len(started) >= 2  # one at a time, each after ten more packs
    session = store.open("busy")
    repack_now(session)  # (and now, waited for)
    packs = [n for n in os.listdir(path / ".git" / "objects" / "pack") if n.endswith(".pack")]
    assert len(packs) <= 3  # geometric: a handful, not one a commit
    store.close()
    assert running_in(path) == []  # nothing it started outlives the close
    assert all(child.poll() is not None for child in started)
    assert git(path, "fsck", "--strict", "--no-progress") == ""
    cold = SessionStore(op_home).open("busy")
    assert len([n for n in cold.nodes() if n.name.startswith("busy")]) == 35


def test_a_repack_still_running_at_close_is_ended_within_a_few_seconds(
    op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history, "REPACK_EVERY", 1)
    monkeypatch.setattr(history, "REPACK_WAIT_S", 0.05)
    started: list[subprocess.Popen[bytes]] = []

    def slow_repack(repo: Repository) -> None:  # one that would outlive the close
        if repo._repacking is None:
            repo._repacking = subprocess.Popen(["sleep", "600"], cwd=repo.worktree)
            started.append(repo._repacking)

    monkeypatch.setattr(Repository, "_start_repack", slow_repack)
    store = SessionStore(op_home)
    store.create_session("slow")
    add_turn(store, "slow", "one")
    path = op_home / "sessions" / "slow"
    live = [child.pid for child in started if child.poll() is None]
    assert live and sorted(running_in(path)) == sorted(live)  # running while the session is
    store.close()
    assert running_in(path) == []  # ended, not left behind
    assert all(child.poll() is not None for child in started)


def test_a_reader_sees_what_another_writer_commits(op_home: Path) -> None:
    writer = SessionStore(op_home)
    writer.create_session("seen")
    add_turn(writer, "seen", "one")
    add_turn(writer, "seen", "two")
    reader = SessionStore(op_home).open("seen")
    before = len(reader.index())
    names = {e["name"]: e for e in reader.index()}
    assert names["one"]["status"] == "completed" and names["two"]["status"] == "completed"
    writer.close()
    add_turn(SessionStore(op_home), "seen", "three")
    reader.refresh()
    now = {e["name"]: e for e in reader.index()}
    assert now["one"]["status"] == "completed" and now["three"]["status"] == "completed"
    assert len(reader.index()) == before + 2


def test_a_writer_that_stays_open_leaves_a_cold_reader_every_turn(op_home: Path) -> None:
    store = SessionStore(op_home)
    store.create_session("long")
    turns = 205
    for i in range(turns):
        add_turn(store, "long", f"t{i}")
    cold = SessionStore(op_home).open("long")
    names = [n.name for n in cold.nodes() if n.metadata.get("kind") == "turn"]
    assert names == [f"t{i}" for i in range(turns)]
    store.close()
