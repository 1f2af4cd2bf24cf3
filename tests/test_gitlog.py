"""The one session log (``openprogram sessions log`` and ``%openprogram log``) against git's."""

from __future__ import annotations

import subprocess
from pathlib import Path

from openprogram import session_context
from openprogram.agent.session_db import default_db
from openprogram.store.session.gitlog import commit_log


def git(path: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=path, capture_output=True, text=True, check=True
    ).stdout


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
    ident = ["-c", "user.name=t", "-c", "user.email=t@localhost"]
    git(path, "checkout", "-q", "-b", "side")
    git(path, *ident, "commit", "-q", "--allow-empty", "-m", "on the side")
    git(path, "checkout", "-q", "main")
    git(path, *ident, "commit", "-q", "--allow-empty", "-m", "on main")
    git(path, *ident, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    log = commit_log(path)
    assert log[0].summary == "merge side"
    assert sorted(e.sha for e in log) == sorted(git(path, "log", "--format=%H").split())
