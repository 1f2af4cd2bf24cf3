"""Where a notebook's session id comes from: the metadata the frontend hands the kernel,
the saved file, malformed metadata, and two copies of one notebook (forks).

The shell-based tests use the ``shell`` fixture of ``test_magics`` (a fresh InteractiveShell
with the extension loaded); the frontend is played with ``bridge.receive_frontend_state``,
exactly what the JupyterLab extension's silent request calls.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

import openprogram_magics.bridge as bridge
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.prompt import sent_messages
from openprogram.errors import MetadataError
from openprogram_magics.notebook import (
    MIME_TYPE,
    NotebookMeta,
    parse_metadata,
    resolve,
    session_from_outputs,
)
from tests.test_magics import AGENTS, Shell, ipython_dir, make_shell, session_nodes, shell, turns_of

__all__ = ["ipython_dir", "shell"]  # fixtures shared with test_magics


def hand_metadata(metadata: Any, path: str = "nb.ipynb") -> None:
    """What the JupyterLab extension does when the kernel starts."""
    payload = json.dumps({"metadata": metadata, "path": path}).encode()
    bridge.receive_frontend_state(base64.b64encode(payload).decode())


def listing(root: Path) -> set[str]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            out.add(os.path.relpath(os.path.join(dirpath, name), root))
    return out


# -- pure: parse and resolve -----------------------------------------------------------------
def test_parse_metadata_accepts_what_the_kernel_writes() -> None:
    meta = NotebookMeta("nb_0123456789", "n_abc")
    assert parse_metadata(meta.to_json()) == meta
    assert parse_metadata(None) is None
    assert parse_metadata({"version": 1}) is None  # no id yet
    assert parse_metadata({"session_id": "nb_x", "last_turn_id": 5}) == NotebookMeta("nb_x")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ([1, 2], "must be an object"),
        ({"session_id": 123}, "must be a string"),
        ({"session_id": "../x"}, "invalid session id"),
        ({"session_id": "a/b"}, "invalid session id"),
        ({"session_id": ""}, "invalid session id"),
        ({"session_id": "x" * 65}, "invalid session id"),
        ({"session_id": "nb_1", "version": 99}, "unsupported version 99"),
        ({"session_id": "nb_1", "version": "1"}, "unsupported version"),
        ({"session_id": "nb_1", "blob": "y" * 70_000}, "too large"),
    ],
)
def test_parse_metadata_rejects_with_one_line_saying_how_to_recover(value: Any, words: str) -> None:
    with pytest.raises(MetadataError) as info:
        parse_metadata(value)
    message = str(info.value)
    assert words in message
    assert "%openprogram new" in message and "\n" not in message and len(message) < 400


def test_resolution_order() -> None:
    k, f, d = NotebookMeta("kern"), NotebookMeta("front", "t1"), NotebookMeta("file")
    assert resolve(pinned=None, kernel=k, frontend=f, file=d).source == "kernel"
    assert resolve(pinned=None, kernel=None, frontend=f, file=d).meta == f
    assert resolve(pinned=None, kernel=None, frontend=None, file=d).source == "file"
    assert resolve(pinned=None, kernel=None, frontend=None, file=None).meta is None
    pinned = resolve(pinned="front", kernel=None, frontend=f, file=None)
    assert pinned.meta == f and pinned.note == ""  # same id: keeps the notebook's last turn
    other = resolve(pinned="elsewhere", kernel=None, frontend=f, file=None)
    assert other.meta == NotebookMeta("elsewhere") and "this cell runs in" in other.note
    assert other.stored is not None and other.stored.session_id != "elsewhere"


def test_session_from_outputs_takes_the_last_turn() -> None:
    cells: list[dict[str, Any]] = [
        {"outputs": [{"data": {MIME_TYPE: {"session_id": "a", "last_turn_id": "t1"}}}]},
        {"outputs": [{"output_type": "stream", "text": "x"}]},
        {"outputs": [{"data": {MIME_TYPE: {"session_id": "a", "last_turn_id": "t2"}}}]},
        {"cell_type": "markdown"},
    ]
    assert session_from_outputs(cells) == {"session_id": "a", "last_turn_id": "t2"}
    assert session_from_outputs([]) is None


# -- the frontend's metadata in a live kernel ------------------------------------------------
def test_frontend_metadata_continues_the_session_from_the_first_cell(shell: Shell) -> None:
    shell.run('%%openprogram\ntriage("yesterday")')
    saved = shell.magics.turns.kernel_meta
    assert saved is not None
    # tomorrow: a new kernel, and the extension hands it the saved metadata first
    fresh = make_shell(Path(shell.ip.ipython_dir))
    hand_metadata(saved.to_json())
    fresh.run(AGENTS)
    fresh.run('%%openprogram\ntriage("today")')
    assert fresh.magics.turns.kernel_meta.session_id == saved.session_id  # type: ignore[union-attr]
    t1, t2 = turns_of(saved.session_id)
    assert t2.predecessor == t1.id  # not a fork: HEAD was this notebook's last turn
    assert "forked" not in fresh.bundles()[-1]["text/plain"]


def test_saved_file_is_read_when_no_frontend_speaks(
    shell: Shell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nb = tmp_path / "saved.ipynb"
    nb.write_text(json.dumps({"metadata": {"openprogram": {"session_id": "nb_fromfile"}}}))
    monkeypatch.setenv("JPY_SESSION_NAME", str(nb))
    shell.run('%%openprogram\ntriage("x")')
    assert shell.magics.turns.kernel_meta.session_id == "nb_fromfile"  # type: ignore[union-attr]
    shell.ip.user_ns["__vsc_ipynb_file__"] = str(tmp_path / "other.ipynb")  # unreadable: ignored
    shell.run('%%openprogram\ntriage("y")')
    assert len(turns_of("nb_fromfile")) == 2


def test_vscode_restart_continues_from_the_saved_outputs(shell: Shell, tmp_path: Path) -> None:
    """VS Code (no extension) saves outputs but not our metadata: after a kernel restart the
    session named in the saved turn output is continued, not replaced by a new one."""
    shell.run('%%openprogram\ntriage("before restart")')
    [bundle] = shell.bundles()
    sid = bundle[MIME_TYPE]["session_id"]
    saved = {
        "metadata": {},
        "cells": [{"cell_type": "code", "outputs": [{"data": {MIME_TYPE: bundle[MIME_TYPE]}}]}],
    }
    nb = tmp_path / "vscode.ipynb"
    nb.write_text(json.dumps(saved))
    shell.magics.turns.kernel_meta = None  # what a restart leaves: nothing in the kernel
    shell.ip.user_ns["__vsc_ipynb_file__"] = str(nb)
    shell.run('%%openprogram\ntriage("after restart")')
    assert shell.magics.turns.kernel_meta.session_id == sid  # type: ignore[union-attr]
    first, second = turns_of(sid)
    assert second.predecessor == first.id


def test_malformed_file_metadata_stops_the_cell(
    shell: Shell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nb = tmp_path / "bad.ipynb"
    nb.write_text(json.dumps({"metadata": {"openprogram": {"session_id": "../../x"}}}))
    monkeypatch.setenv("JPY_SESSION_NAME", str(nb))
    result = shell.run("%%openprogram\n_ran = True", error=UsageError)
    assert "bad.ipynb" in str(result.error_in_exec) and "%openprogram new" in str(
        result.error_in_exec
    )
    assert "_ran" not in shell.ip.user_ns


@pytest.mark.parametrize(
    "metadata",
    [
        {"session_id": 42},
        {"session_id": ["nb_1"]},
        {"session_id": "../x"},
        {"session_id": "../../../../tmp/evil"},
        {"session_id": "nb_1", "version": 99},
        {"session_id": "nb_1", "blob": "z" * 200_000},
        ["not", "an", "object"],
        "nb_1",
    ],
    ids=["int-id", "list-id", "dotdot", "deep-traversal", "version-99", "huge", "list", "str"],
)
def test_malformed_frontend_metadata_is_a_one_line_usage_error(
    shell: Shell, tmp_path: Path, metadata: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    before = listing(tmp_path)
    hand_metadata(metadata)
    result = shell.run('%%openprogram\n_ran = True\ntriage("x")', error=UsageError)
    message = str(result.error_in_exec)
    assert "\n" not in message and "%openprogram new" in message
    assert "_ran" not in shell.ip.user_ns  # the body did not run
    shown = capsys.readouterr()
    assert "UsageError" in shown.out + shown.err and "Traceback" not in shown.out + shown.err
    assert listing(tmp_path) == before  # nothing written anywhere
    assert shell.magics.turns.turn is None
    # it keeps stopping turns (it does not quietly mint a session over the bad metadata)...
    shell.run("%%openprogram\n_ran = True", error=UsageError)
    # ...until the user starts fresh
    fresh = shell.line("new")
    shell.run('%%openprogram\n_ran = True\ntriage("x")')
    assert shell.ip.user_ns["_ran"] is True
    assert shell.magics.turns.kernel_meta.session_id == fresh  # type: ignore[union-attr]
    assert len(turns_of(fresh)) == 1
    written = listing(tmp_path) - before
    assert written and all(p.startswith("home") for p in written), sorted(written)[:5]


def test_pinned_session_runs_despite_malformed_metadata(shell: Shell) -> None:
    hand_metadata({"session_id": "../x"})
    default_db().create_session("nb_pinned")
    shell.run('%%openprogram --session nb_pinned\nv = triage("x")')
    assert shell.ip.user_ns["v"] == "bug"
    assert len(turns_of("nb_pinned")) == 1


# -- two copies of one notebook --------------------------------------------------------------
def test_two_copies_of_a_notebook_fork_instead_of_interleaving(
    shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run('%%openprogram\ntriage("shared start")')
    copied = shell.magics.turns.kernel_meta  # the notebook is copied here (its metadata too)
    assert copied is not None
    shell.run('%%openprogram\ntriage("copy A goes on")')
    a_last = shell.magics.turns.kernel_meta.last_turn_id  # type: ignore[union-attr]

    other = make_shell(Path(shell.ip.ipython_dir))  # copy B, in another kernel
    hand_metadata(copied.to_json())
    other.run(AGENTS)
    capsys.readouterr()
    other.run('%%openprogram\ntriage("copy B goes on")')
    b_meta = other.magics.turns.kernel_meta
    assert b_meta is not None and b_meta.session_id == copied.session_id
    nodes = {n.id: n for n in session_nodes(copied.session_id)}
    b_turn = nodes[b_meta.last_turn_id]  # type: ignore[index]
    assert b_turn.predecessor == copied.last_turn_id  # its own notebook's last turn...
    assert b_turn.predecessor != a_last  # ...not HEAD (copy A's turn)
    plain = other.bundles()[-1]["text/plain"]
    assert "forked" in plain and copied.last_turn_id in plain  # type: ignore[operator]
    # B's LLM call saw B's history, not A's
    llm = next(n for n in nodes.values() if n.kind == "llm" and n.turn == b_turn.turn)
    seen = json.dumps(sent_messages(default_db().open(copied.session_id), llm))
    assert "shared start" in seen and "copy A goes on" not in seen
    # B goes on from its own branch without forking again
    other.run('%%openprogram\ntriage("copy B again")')
    last = {n.id: n for n in session_nodes(copied.session_id)}[
        other.magics.turns.kernel_meta.last_turn_id  # type: ignore[union-attr,index]
    ]
    assert last.predecessor == b_turn.id
    assert "forked" not in other.bundles()[-1]["text/plain"]


def test_unknown_last_turn_falls_back_to_head(shell: Shell) -> None:
    shell.run('%%openprogram\ntriage("one")')
    sid = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    shell.magics.turns.kernel_meta = NotebookMeta(sid, "n_doesnotexist")
    shell.run('%%openprogram\ntriage("two")')
    t1, t2 = turns_of(sid)
    assert t2.predecessor == t1.id
    assert "forked" not in shell.bundles()[-1]["text/plain"]
