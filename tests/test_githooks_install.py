"""The installed hooks when their python or openprogram is gone (review of issue 35 item 3):
a push is refused in one plain line that says why and how to go on, never with a Python
error, and the path of the python is shown as it is (no shell expansion of ``$``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from openprogram_magics.githooks import install_hooks

SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin") or ""


def git(where: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(
        ["git", *args], cwd=where, env=env, capture_output=True, text=True, check=False
    )
    if ok:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def repo_with_a_commit(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q", "--bare", "-b", "main", "origin.git")
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", "origin.git", str(work))
    git(work, "config", "user.name", "Dana")
    git(work, "config", "user.email", "dana@example.invalid")
    (work / "a.txt").write_text("a\n")
    git(work, "add", "a.txt")
    git(work, "commit", "-qm", "a")
    return work


def _has_openprogram(python: str) -> bool:
    done = subprocess.run([python, "-c", "import openprogram_magics"], capture_output=True, cwd="/")
    return done.returncode == 0


@pytest.mark.skipif(
    not SYSTEM_PYTHON or _has_openprogram(SYSTEM_PYTHON),
    reason="needs a python without openprogram installed",
)
def test_a_python_without_openprogram_refuses_the_push_in_one_plain_line(
    tmp_path: Path,
) -> None:
    work = repo_with_a_commit(tmp_path)
    install_hooks(work, python=SYSTEM_PYTHON)

    done = git(work, "push", "origin", "HEAD:main", ok=False)

    assert done.returncode != 0
    assert f"openprogram is not installed for {SYSTEM_PYTHON}" in done.stderr
    assert "git push --no-verify" in done.stderr


def test_a_gone_python_is_named_as_it_was_installed(tmp_path: Path) -> None:
    folder = tmp_path / "env$HOME`id`"
    folder.mkdir()
    python = folder / "python"
    python.symlink_to(sys.executable)
    work = repo_with_a_commit(tmp_path)
    install_hooks(work, python=str(python))
    python.unlink()  # the environment was removed

    done = git(work, "push", "origin", "HEAD:main", ok=False)

    assert done.returncode != 0
    assert f"git push refused: {python} is gone" in done.stderr
