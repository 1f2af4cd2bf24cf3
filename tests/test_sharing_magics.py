"""``%openprogram push|pull|export|import|embed`` and ``provider replay`` in a shell, with
two ``OPENPROGRAM_HOME``s playing two people and a bare repository as the remote."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from openprogram.agent.session_db import default_db
from openprogram_magics.notebook import NotebookMeta
from openprogram_magics.sharing import BUNDLE_MIME
from tests.test_magics import Shell, ipython_dir, shell  # noqa: F401  (fixtures)

CELL = '%%openprogram\ntriage("{}")'


def home(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    monkeypatch.setenv("OPENPROGRAM_HOME", str(path))  # default_db() follows it


def state(sid: str) -> tuple[set[str], str | None]:
    session = default_db().open(sid)
    return {e["id"] for e in session.index()}, session.head_id


@pytest.fixture
def remote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A bare repository inside the project repository the notebook (the cwd) is in: a
    local remote a notebook records must be inside its repository."""
    project = tmp_path / "project"
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    path = project / "shared" / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    monkeypatch.chdir(project)
    return f"file://{path}"


def test_push_pull_divergence_and_status(
    shell: Shell,  # noqa: F811
    remote: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    alice, bob = tmp_path / "alice", tmp_path / "bob"
    home(monkeypatch, alice)
    shell.run(CELL.format("the app crashes"))
    sid = shell.magics.current_session_id()
    assert sid is not None
    shell.line(f"push {remote}")
    meta = shell.magics.current_meta()
    # remembered in the notebook, relative to its repository (a colleague's clone has it
    # somewhere else)
    assert meta is not None and meta.remote == "shared/remote.git"
    alice_state = state(sid)

    home(monkeypatch, bob)
    assert shell.line("pull") == "new"  # the recorded remote, no argument needed
    assert state(sid) == alice_state

    home(monkeypatch, alice)
    shell.run(CELL.format("alice again"))
    shell.line("push")
    home(monkeypatch, bob)
    monkeypatch.setattr(
        shell.magics.turns, "kernel_meta", NotebookMeta(sid, alice_state[1], remote)
    )
    shell.run(CELL.format("bob continues"))
    bob_head = state(sid)[1]
    with pytest.raises(UsageError, match="pull first"):
        shell.line("push")
    capsys.readouterr()
    assert shell.line("pull") == "merged"
    assert state(sid)[1] == bob_head
    info = shell.line("status")
    assert "1 turn(s) ending at" in info["other lines"]
    shell.line("push")  # the merge contains the remote's line: a fast-forward now


def test_metadata_remote_with_a_command_transport_is_refused(shell: Shell) -> None:  # noqa: F811
    shell.run(CELL.format("x"))
    sid = shell.magics.current_session_id()
    assert sid is not None
    shell.magics.set_session(NotebookMeta(sid, None, "ext::sh -c 'touch /tmp/pwned'"))
    with pytest.raises(UsageError, match=r"metadata names remote .* 'ext' is not allowed"):
        shell.line("pull")
    assert not Path("/tmp/pwned").exists()


def test_export_import_and_embed_round_trip(
    shell: Shell,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home(monkeypatch, tmp_path / "alice")
    shell.run(CELL.format("one"))
    shell.run(CELL.format("two"))
    sid = shell.magics.current_session_id()
    assert sid is not None
    recorded = state(sid)
    shell.line(f"export {tmp_path / 'run.bundle'}")
    part = shell.line("embed")._repr_mimebundle_()
    assert "KiB git bundle" in part["text/plain"]
    with pytest.raises(UsageError, match="over the embed cap"):
        shell.line("embed --max-mb 0.0001")
    for cap in ("nan", "inf", "-1"):  # one usage line, not a ValueError/OverflowError
        for line in (f"embed --max-mb {cap}", f"import --embedded --max-mb {cap}"):
            with pytest.raises(UsageError, match=f"'{cap}' is not a number of MB above 0"):
                shell.line(line)
    notebook = tmp_path / "shared.ipynb"
    notebook.write_text(
        json.dumps(
            {
                "cells": [
                    {"cell_type": "code", "outputs": [{"data": {BUNDLE_MIME: part[BUNDLE_MIME]}}]}
                ],
                "metadata": {"openprogram": {"session_id": sid}},
            }
        )
    )

    home(monkeypatch, tmp_path / "bob")
    assert shell.line(f"import {tmp_path / 'run.bundle'}") == sid
    assert state(sid) == recorded

    home(monkeypatch, tmp_path / "carol")
    assert not default_db().exists(sid)  # opening/using the notebook imported nothing
    assert shell.line(f"import --embedded --notebook {notebook}") == sid
    assert state(sid) == recorded
    path = default_db().session_path(sid)
    fsck = subprocess.run(["git", "fsck", "--strict"], cwd=path, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: {**p, "data": p["data"][:-8] + "AAAAAAA="}, "sha256 does not match"),
        (lambda p: {**p, "data": "bm90IGEgYnVuZGxl", "sha256": "x"}, "sha256|not a git bundle"),
        (lambda p: {**p, "data": "!!"}, "not base64"),
    ],
)
def test_hostile_embedded_blobs_are_refused(
    shell: Shell,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    change,  # type: ignore[no-untyped-def]
    message: str,
) -> None:
    home(monkeypatch, tmp_path / "alice")
    shell.run(CELL.format("one"))
    part = shell.line("embed")._repr_mimebundle_()[BUNDLE_MIME]
    notebook = tmp_path / "bad.ipynb"
    cell = {"cell_type": "code", "outputs": [{"data": {BUNDLE_MIME: change(part)}}]}
    notebook.write_text(json.dumps({"cells": [cell], "metadata": {}}))
    home(monkeypatch, tmp_path / "bob")
    with pytest.raises(UsageError, match=message):
        shell.line(f"import --embedded --notebook {notebook}")
    root = tmp_path / "bob" / "sessions"
    assert not root.exists() or not [p for p in root.iterdir() if not p.name.startswith(".")]


def test_provider_replay_answers_from_the_recording(
    shell: Shell,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENPROGRAM_REPLAY_SESSION", "")  # restored after the test
    first = shell.run(CELL.format("the app crashes")).result
    sid = shell.magics.current_session_id()
    shell.line("provider replay")
    again = shell.run(CELL.format("the app crashes")).result
    assert again == first
    session = default_db().open(sid)
    llms = [n for n in session.nodes() if n.kind == "llm"]
    assert [n.name for n in llms][-1] == "replay"
    with pytest.raises(Exception, match="function triage"):
        shell.run(CELL.format("something never asked"))
