"""A damaged notebook file cannot stop cells.

The kernel reads the saved notebook (``JPY_SESSION_NAME``) to continue its session.  A file
with a wrong type somewhere (``"outputs": 5``), a 200,000-deep structure, or a broken
``metadata.openprogram`` (wrong types, a negative or boolean version, a path as id) gives at
most one line; ``%%openprogram --session ID`` and ``%openprogram new`` always work; the file
is never written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from test_magics import Shell, make_shell, turns_of

import openprogram_magics.bridge as bridge
from openprogram.agent.session_db import default_db


def notebook(metadata: Any = None, cells: Any = None) -> bytes:
    nb: dict[str, Any] = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}
    if metadata is not None:
        nb["metadata"]["openprogram"] = metadata
    if cells is not None:
        nb["cells"] = cells
    return json.dumps(nb).encode()


DAMAGED: dict[str, bytes] = {
    "outputs of a wrong type": notebook(
        cells=[{"cell_type": "code", "source": "", "metadata": {}, "outputs": 5}]
    ),
    "output items of wrong types": notebook(
        cells=[{"cell_type": "code", "outputs": [5, None, {"data": 7}]}, 3, None]
    ),
    "cells not a list": b'{"metadata": {}, "cells": {"a": 1}}',
    "200k-deep structure": b'{"metadata": {"openprogram": '
    + b"[" * 200_000
    + b"]" * 200_000
    + b"}}",
    "200k-deep file": b"[" * 200_000 + b"]" * 200_000,
    "not JSON": b"\xff\xfe{ not json",
    "metadata a string": notebook("nb_abc"),
    "session_id a number": notebook({"session_id": 5, "version": 1}),
    "negative version": notebook({"session_id": "nb_abc", "version": -1}),
    "boolean version": notebook({"session_id": "nb_abc", "version": True}),
    "future version": notebook({"session_id": "nb_abc", "version": 99}),
    "path as session id": notebook({"session_id": "../../etc", "version": 1}),
    "last_turn_id wrong type": notebook({"session_id": "nb_ok_one", "last_turn_id": [1]}),
}


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Shell]:
    monkeypatch.setattr(bridge, "_state", None)
    sh = make_shell(tmp_path / "ipython")
    sh.run("from openprogram import agentic_function")
    try:
        yield sh
    finally:
        InteractiveShell.clear_instance()


@pytest.mark.parametrize("label", list(DAMAGED))
def test_a_damaged_notebook_file_cannot_stop_cells(
    shell: Shell,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    label: str,
) -> None:
    path = tmp_path / "damaged.ipynb"
    path.write_bytes(DAMAGED[label])
    before = path.read_bytes()
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))
    capsys.readouterr()

    # a plain cell: runs (a new session), or stops with one line saying how to recover
    result = shell.ip.run_cell("%%openprogram\n1 + 1", store_history=True)
    error = result.error_before_exec or result.error_in_exec
    out = capsys.readouterr()
    if "version" in label or "metadata a string" in label:  # unusable: said, not guessed
        assert error is not None
    if error is not None:
        assert isinstance(error, UsageError) and "%openprogram new" in str(error)
        assert len(str(error).splitlines()) == 1
    warnings = [line for line in (out.out + out.err).splitlines() if "Traceback" in line]
    assert warnings == []

    default_db().create_session("pinned_one")
    shell.run("%%openprogram --session pinned_one\n2 + 2")  # always works
    assert len(turns_of("pinned_one")) == 1
    shell.line("new")  # always works, and the next plain cell uses it
    shell.run("%%openprogram\n3 + 3")
    sid = shell.magics.current_session_id()
    assert sid and sid != "pinned_one" and len(turns_of(sid)) == 1
    assert path.read_bytes() == before  # nothing written


def test_a_good_file_is_still_continued(
    shell: Shell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "good.ipynb"
    path.write_bytes(notebook({"session_id": "nb_from_file", "version": 1}))
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))
    shell.run("%%openprogram\n1 + 1")
    assert shell.magics.current_session_id() == "nb_from_file"
