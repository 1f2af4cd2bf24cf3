"""Following the README's quickstart in a fresh clone: every command works, ``openprogram
run`` prints no Jupyter transport warning, and ``git status`` is clean afterwards."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]


def quickstart_commands(readme: str) -> list[str]:
    """The runnable lines of the README's quickstart block (placeholders like
    ``<session id>`` are for the reader)."""
    section = readme.split("## Quickstart", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "the quickstart has a bash block"
    lines = [ln.split("#", 1)[0].strip() for ln in block.group(1).splitlines()]
    return [ln for ln in lines if ln and "<" not in ln]


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_following_the_readme_quickstart_leaves_git_status_clean(
    tmp_path: Path, op_home: Path
) -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    git("clone", "-q", str(REPO), str(clone), cwd=tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "OPENPROGRAM_HOME": str(op_home)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    commands = quickstart_commands((REPO / "README.md").read_text())
    assert [c.split()[:2] for c in commands][:2] == [["openprogram", "run"]] * 2
    for command in commands:
        assert command.startswith("openprogram ")
        line = f"{sys.executable} -m openprogram.cli {command[len('openprogram ') :]}"
        done = subprocess.run(
            line, shell=True, cwd=clone, env=env, capture_output=True, text=True, timeout=240
        )
        assert done.returncode == 0, f"{command}: {done.stderr}"
        assert "TCP" not in done.stderr and "WARNING" not in done.stderr, done.stderr
    assert git("status", "--porcelain", "--untracked-files=all", cwd=clone) == ""
    assert (home / "quickstart.ipynb").is_file()
