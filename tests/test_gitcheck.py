"""A clone whose ``.gitattributes`` names the notebook merge driver its git does not know
(``gitcheck``), in real git repositories: the first use says so once, with the fix; a
notebook git's line merge already broke is named, and re-merged with the driver."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import nbformat
import pytest

from openprogram_magics.gitcheck import (
    STAMP,
    broken_notebooks,
    first_use_note,
    remerge_broken,
    tell,
)
from openprogram_magics.gitmerge import merge_notebook


@pytest.fixture(autouse=True)
def no_user_git_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def git(top: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    who = ["-c", "user.name=Ada", "-c", "user.email=ada@example.org"]
    return subprocess.run(
        ["git", *who, "-C", str(top), *args], capture_output=True, text=True, check=check
    )


def repo(tmp_path: Path, attributes: str = "*.ipynb merge=openprogram\n") -> Path:
    top = tmp_path / "project"
    top.mkdir(parents=True)
    git(top, "init", "-q", "-b", "main")
    (top / ".gitattributes").write_text(attributes)
    return top


def test_a_clone_without_the_driver_is_told_once_with_the_fix(tmp_path: Path) -> None:
    top = repo(tmp_path)
    (top / "notebooks").mkdir()
    note = first_use_note(top / "notebooks")
    assert note is not None and f"openprogram git-setup {top}" in note
    assert "names the notebook merge driver" in note
    assert (top / ".git" / STAMP).exists()
    assert first_use_note(top) is None  # once per clone
    shown = io.StringIO()
    tell([top / "notebooks" / "a.ipynb", top], shown)
    assert shown.getvalue() == ""


def test_a_driver_whose_program_is_gone_counts_as_missing_and_a_working_one_is_quiet(
    tmp_path: Path,
) -> None:
    top = repo(tmp_path)
    git(top, "config", "merge.openprogram.driver", f"{tmp_path}/gone-venv/bin/python -m x %O")
    assert first_use_note(top) is not None
    (top / ".git" / STAMP).unlink()
    git(top, "config", "merge.openprogram.driver", "git merge-file %A %O %B")
    assert first_use_note(top) is None
    assert first_use_note(repo(tmp_path / "other", attributes="*.txt text\n")) is None


def test_a_notebook_broken_by_gits_line_merge_is_named_and_re_merged(tmp_path: Path) -> None:
    top = repo(tmp_path)
    path = top / "work.ipynb"

    def write(source: str) -> None:
        cell = nbformat.v4.new_code_cell(source)
        cell["id"] = "c1"
        path.write_text(nbformat.writes(nbformat.v4.new_notebook(cells=[cell])))

    write("x = 1")
    git(top, "add", ".")
    git(top, "commit", "-qm", "base")
    git(top, "checkout", "-qb", "theirs")
    write("x = 3")
    git(top, "commit", "-qam", "theirs")
    git(top, "checkout", "-q", "main")
    write("x = 2")
    git(top, "commit", "-qam", "ours")
    assert git(top, "merge", "theirs", check=False).returncode != 0  # the line merge's conflict
    assert broken_notebooks(top) == ["work.ipynb"]
    note = first_use_note(top)
    assert note is not None and note.startswith("openprogram: work.ipynb: merged by git's line")

    lines = remerge_broken(top, merge_notebook)
    assert lines == [
        "re-merged work.ipynb as a notebook (conflicts left as marker cells); "
        "then `git add work.ipynb`"
    ]
    sources = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
    assert "x = 2" in sources and "x = 3" in sources  # both sides kept, a notebook again
