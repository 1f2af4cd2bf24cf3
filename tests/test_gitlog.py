"""The one session log (``openprogram sessions log`` and ``%openprogram log``) against git's."""

from __future__ import annotations

import subprocess
from pathlib import Path

from openprogram import session_context
from openprogram.agent.session_db import default_db
from openprogram.store.session.history import commit_log


def git(path: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=path, capture_output=True, text=True, check=True
    ).stdout


def commit(path: Path, message: str, *parents: str) -> str:
    """A commit of HEAD's tree on ``parents`` (HEAD when none), made with git's plumbing:
    a session is a bare repository (no ``git commit``, no checkout)."""
    ident = ["-c", "user.name=t", "-c", "user.email=t@localhost"]
    tree = git(path, "rev-parse", "HEAD^{tree}").strip()
    heads = [arg for parent in parents or ("HEAD",) for arg in ("-p", parent)]
    return git(path, *ident, "commit-tree", tree, *heads, "-m", message).strip()


def test_log_is_what_git_log_lists_newest_first() -> None:
    for step in range(3):
        with session_context("logged", message=f"step {step}"):
            pass
    path = default_db().open("logged").path
    log = commit_log(path)
    assert [e.sha for e in log] == git(path, "log", "--format=%H").split()
    assert [e.summary for e in log] == git(path, "log", "--format=%s").splitlines()
    assert [e.time for e in log] == [int(t) for t in git(path, "log", "--format=%ct").split()]


def test_log_follows_both_sides_of_a_merge() -> None:
    with session_context("merged", message="base"):
        pass
    path = default_db().open("merged").path
    default_db().close()
    side = commit(path, "on the side")
    main = commit(path, "on main")
    git(path, "update-ref", "refs/heads/main", commit(path, "merge side", main, side))
    log = commit_log(path)
    assert log[0].summary == "merge side"
    assert sorted(e.sha for e in log) == sorted(git(path, "log", "--format=%H").split())


def test_log_of_a_shallow_clone_stops_where_its_history_does(tmp_path: Path) -> None:
    with session_context("deep", message="base"):
        pass
    path = default_db().open("deep").path
    default_db().close()
    for step in range(3):
        git(path, "update-ref", "refs/heads/main", commit(path, f"step {step}"))
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", path.as_uri(), str(shallow))
    log = commit_log(shallow)
    assert [e.summary for e in log] == git(shallow, "log", "--format=%s").splitlines()
    assert len(log) == 1


def test_a_commit_with_a_date_git_cannot_read_is_listed_at_time_zero() -> None:
    with session_context("odd", message="base"):
        pass
    path = default_db().open("odd").path
    default_db().close()
    head = git(path, "rev-parse", "HEAD").strip()
    tree = git(path, "rev-parse", "HEAD^{tree}").strip()
    raw = (
        f"tree {tree}\nparent {head}\nauthor a <a@x> soon +0000\n"
        "committer c <c@x> soon +0000\n\nodd date\n"
    )
    made = subprocess.run(
        ["git", "hash-object", "-t", "commit", "-w", "--literally", "--stdin"],
        cwd=path,
        input=raw,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    git(path, "update-ref", "refs/heads/main", made)
    log = commit_log(path)
    assert [(e.summary, e.time) for e in log[:1]] == [("odd date", 0)]
    assert [e.summary for e in log[1:]] == git(path, "log", "--format=%s", head).splitlines()
