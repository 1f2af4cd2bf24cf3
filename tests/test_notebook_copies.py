"""A copy is a new line, a rename is the same line (issue 35 item 7).

``cp review.ipynb review-copy.ipynb`` and a cell run in the copy: the copy's turn goes to a
new session that starts with the original's history and records where it came from (said
in one line), while the original's session, its HEAD and ``sessions list``'s "belongs to"
stay with ``review.ipynb``.  ``mv review.ipynb renamed.ipynb``: the renamed notebook
continues its session.  The kernel reads the saved file (``JPY_SESSION_NAME``), as after
a restart; each "kernel" is a fresh InteractiveShell.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from openprogram.agent.session_db import default_db
from openprogram.cli import main as cli_main
from tests.test_magics import AGENTS, Shell, ipython_dir, make_shell, shell, turns_of

__all__ = ["ipython_dir", "shell"]  # fixtures shared with test_magics


def kernel_for(path: Path, ipython_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Shell:
    """A new kernel for the notebook at ``path`` (it reads the saved file)."""
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))
    fresh = make_shell(ipython_dir)
    fresh.run(AGENTS)
    return fresh


def belongs(capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """What ``sessions list`` says each session belongs to (unclipped: the store's rows)."""
    capsys.readouterr()
    assert cli_main(["sessions", "list"]) == 0
    return {
        m["id"]: m.get("place", "").removeprefix("notebook ") for m in default_db().list_sessions()
    }


def test_a_copy_forks_a_new_session_and_a_rename_continues(
    tmp_path: Path,
    ipython_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # the notebooks are in the home folder
    review = tmp_path / "review.ipynb"
    sid = "nb_review0001"
    review.write_text(json.dumps({"metadata": {"openprogram": {"session_id": sid}}, "cells": []}))
    original = kernel_for(review, ipython_dir, monkeypatch)
    original.run('%%openprogram\ntriage("crash when printing")')
    original.run('%%openprogram\ntriage("slow startup")')
    assert original.magics.turns.kernel_meta.session_id == sid  # type: ignore[union-attr]
    head = default_db().open(sid).head_id
    assert belongs(capsys)[sid] == str(review.resolve())

    copy = tmp_path / "review-copy.ipynb"
    shutil.copy(review, copy)
    copied = kernel_for(copy, ipython_dir, monkeypatch)
    capsys.readouterr()
    copied.run('%%openprogram\ntriage("the copy goes its own way")')
    said = capsys.readouterr().out
    new = copied.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    assert new != sid
    notes = [line for line in said.splitlines() if "is a copy of" in line]
    assert len(notes) == 1 and "copy of ~/review.ipynb" in notes[0] and new in notes[0], said
    assert str(tmp_path) not in said  # printed into the notebook: no home path

    # the original keeps its session, its HEAD and its notebook
    assert [t.input["text"] for t in turns_of(sid)] == [
        '%%openprogram\ntriage("crash when printing")',
        '%%openprogram\ntriage("slow startup")',
    ]
    assert default_db().open(sid).head_id == head
    listed = belongs(capsys)
    assert listed[sid] == str(review.resolve()) and listed[new] == str(copy.resolve())
    # the copy's session starts with the original's history and says where it came from
    texts = [t.input["text"] for t in turns_of(new)]
    assert texts[:2] == [t.input["text"] for t in turns_of(sid)] and len(texts) == 3
    nodes = {t.id: t for t in turns_of(new)}
    forked = default_db().open(new)
    assert forked.meta["forked_from"]["session"] == sid
    assert forked.meta["forked_from"]["notebook"].endswith("review.ipynb")
    assert nodes[forked.head_id].predecessor == head  # it follows the original's last turn
    copied.run('%%openprogram\ntriage("and on")')  # the kernel goes on in its own session
    assert len(turns_of(new)) == 4 and len(turns_of(sid)) == 2

    # the original's kernel goes on in its own session, without a word about copies
    capsys.readouterr()
    original_again = kernel_for(review, ipython_dir, monkeypatch)
    original_again.run('%%openprogram\ntriage("back in the original")')
    assert original_again.magics.turns.kernel_meta.session_id == sid  # type: ignore[union-attr]
    assert "copy" not in capsys.readouterr().out
    assert len(turns_of(sid)) == 3

    # a rename is the same line: the old path is gone, the session goes on
    renamed = tmp_path / "renamed.ipynb"
    review.rename(renamed)
    moved = kernel_for(renamed, ipython_dir, monkeypatch)
    capsys.readouterr()
    moved.run('%%openprogram\ntriage("after the rename")')
    assert moved.magics.turns.kernel_meta.session_id == sid  # type: ignore[union-attr]
    assert "copy" not in capsys.readouterr().out
    assert len(turns_of(sid)) == 4
    assert belongs(capsys)[sid] == str(renamed.resolve())


@pytest.mark.kernel
@pytest.mark.timeout(240)
def test_openprogram_run_of_a_copied_notebook_writes_a_new_session_into_the_copy(
    tmp_path: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nbformat

    from openprogram_magics.headless import run_notebook
    from tests.test_one_session import AGENT, REPO

    monkeypatch.setenv("PYTHONPATH", str(REPO))
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext openprogram_magics\n%openprogram provider test"),
        nbformat.v4.new_code_cell(AGENT),
        nbformat.v4.new_code_cell('%%openprogram\ntriage("the app crashes")'),
    ]
    review = tmp_path / "review.ipynb"
    nbformat.write(nb, review)
    first = run_notebook(review)
    assert first.error is None and first.session_id is not None
    copy = tmp_path / "review-copy.ipynb"
    shutil.copy(review, copy)
    second = run_notebook(copy)
    assert second.error is None and second.session_id not in (None, first.session_id)
    saved = nbformat.read(copy, as_version=4)
    assert saved.metadata["openprogram"]["session_id"] == second.session_id
    assert any("is a copy of" in o.get("text", "") for c in saved.cells for o in c.outputs)
    assert len(turns_of(first.session_id)) == 1 and len(turns_of(second.session_id)) == 2
    listed = {m["id"]: m.get("place") for m in default_db().list_sessions()}
    assert listed[first.session_id] == f"notebook {review.resolve()}"
    assert listed[second.session_id] == f"notebook {copy.resolve()}"
    again = run_notebook(review)  # the original goes on in its own session
    assert again.session_id == first.session_id and len(turns_of(first.session_id)) == 2


def test_a_copys_session_counts_only_its_own_turns_as_not_pushed(
    tmp_path: Path, ipython_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from openprogram.store.session.remotes import unpushed_turns
    from openprogram.store.session.sync import push

    review = tmp_path / "review.ipynb"
    sid = "nb_review0002"
    review.write_text(json.dumps({"metadata": {"openprogram": {"session_id": sid}}, "cells": []}))
    original = kernel_for(review, ipython_dir, monkeypatch)
    original.run('%%openprogram\ntriage("one")')
    original.run('%%openprogram\ntriage("two")')
    remote = tmp_path / "team.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    push(default_db(), sid, f"file://{remote}", "file")
    copy = tmp_path / "review-copy.ipynb"
    shutil.copy(review, copy)
    copied = kernel_for(copy, ipython_dir, monkeypatch)
    copied.run('%%openprogram\ntriage("the copy\'s own")')
    new = copied.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    assert new != sid
    lost = unpushed_turns(default_db().session_path(new))
    assert lost.turns == 1 and lost.ever_pushed and "the copy's own" in lost.newest, lost
