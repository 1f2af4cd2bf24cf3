"""Headless runs of a notebook: ``run_notebook`` / ``openprogram run`` (nbclient) continue
the session named in the file's metadata.  papermill's are in ``test_papermill_engine.py``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from openprogram.cli import main as cli_main
from openprogram.errors import MetadataError
from openprogram.store.session.store import SessionStore
from openprogram_magics.headless import run_notebook
from openprogram_magics.notebook import MIME_TYPE

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(180)]


def read(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def turn_count(home: Path, sid: str) -> int:
    store = SessionStore(home)
    try:
        return sum(1 for e in store.open(sid).index() if e["kind"] == "turn")
    finally:
        store.close()


def session_parts(nb: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        out["data"][MIME_TYPE]
        for cell in nb["cells"]
        for out in cell.get("outputs", [])
        if MIME_TYPE in out.get("data", {})
    ]


@pytest.fixture
def notebook(tmp_path: Path) -> Path:
    target = tmp_path / "work" / "quickstart.ipynb"
    target.parent.mkdir()
    shutil.copy(QUICKSTART, target)
    return target


def test_run_twice_continues_the_session_and_o_writes_elsewhere(
    notebook: Path, op_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "openprogram" not in read(notebook)["metadata"]
    first = run_notebook(notebook)
    assert first.error is None and first.path == notebook
    saved = read(notebook)
    sid = saved["metadata"]["openprogram"]["session_id"]
    assert first.session_id == sid
    assert turn_count(op_home, sid) == 2
    parts = session_parts(saved)
    assert len(parts) == 2 and {p["session_id"] for p in parts} == {sid}
    assert "last_turn_id" not in saved["metadata"]["openprogram"]  # kept per turn, in outputs
    status = "".join(
        "".join(o.get("text", "")) for c in saved["cells"] for o in c.get("outputs", [])
    )
    assert f"session_id: {sid}" in status  # `%openprogram status` output was saved

    second = run_notebook(notebook)
    again = read(notebook)
    assert second.session_id == sid == again["metadata"]["openprogram"]["session_id"]
    assert turn_count(op_home, sid) == 4
    again_parts = session_parts(again)
    assert again_parts[0]["last_turn_id"] != parts[-1]["last_turn_id"]
    assert again_parts[0]["turn"] == 3  # chained after run 1's last turn (found in its outputs)

    before = notebook.read_bytes()
    out = notebook.parent / "out" / "run3.ipynb"
    out.parent.mkdir()
    assert cli_main(["run", str(notebook), "-o", str(out), "--timeout", "120"]) == 0
    printed = capsys.readouterr().out
    assert f"session: {sid} (openprogram run {out} to continue)" in printed  # (README)
    assert notebook.read_bytes() == before  # the input is untouched
    assert read(out)["metadata"]["openprogram"]["session_id"] == sid
    assert turn_count(op_home, sid) == 6


def test_malformed_metadata_stops_before_anything_runs(
    notebook: Path, op_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nb = read(notebook)
    nb["metadata"]["openprogram"] = {"session_id": "../../etc", "version": 1}
    notebook.write_text(json.dumps(nb))
    before = notebook.read_bytes()
    with pytest.raises(MetadataError, match="%openprogram new"):
        run_notebook(notebook)
    assert cli_main(["run", str(notebook)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid session id" in err
    assert notebook.read_bytes() == before
    assert not (op_home / "sessions").exists()  # nothing executed, nothing recorded


def test_a_file_json_cannot_read_is_one_line(
    tmp_path: Path, op_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not JSON, or metadata nested 900 deep (json's RecursionError): one line, exit 2."""
    deep = tmp_path / "deep.ipynb"
    deep.write_text('{"nbformat": 4, "nbformat_minor": 5, "cells": [], "metadata": {"x": '
                    + "[" * 900 + "]" * 900 + "}}")  # fmt: skip
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{bad")
    for path, why in ((deep, "nested too deeply"), (broken, "does not appear to be JSON")):
        assert cli_main(["run", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is not a readable notebook" in err and why in err, err
    assert not (op_home / "sessions").exists()


def test_a_failing_cell_is_reported_and_saved(
    notebook: Path, op_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nb = read(notebook)
    nb["cells"].insert(
        5,  # after the first %%openprogram cell
        {
            "cell_type": "code",
            "id": "fails",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": '%%openprogram\nraise RuntimeError("broken on purpose")',
        },
    )
    notebook.write_text(json.dumps(nb))
    assert cli_main(["run", str(notebook)]) == 1
    captured = capsys.readouterr()
    assert "broken on purpose" in captured.err
    saved = read(notebook)
    sid = saved["metadata"]["openprogram"]["session_id"]  # the turn before the failure
    statuses = [p["status"] for p in session_parts(saved)]
    assert statuses == ["completed", "error"]
    assert turn_count(op_home, sid) == 2


def test_a_rerun_after_a_failed_cell_continues_from_the_failed_turn(
    tmp_path: Path, op_home: Path
) -> None:
    """Run 2 stops at a failing turn; run 3 must chain after it, not after run 1's last
    turn (stale outputs of cells run 2 never reached must not name the last turn)."""
    import nbformat

    flag = tmp_path / "fail"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext openprogram_magics\n%openprogram provider test"),
        nbformat.v4.new_code_cell("%%openprogram\n1"),
        nbformat.v4.new_code_cell(
            f"%%openprogram\nimport os\nassert not os.path.exists({str(flag)!r}), 'flagged'"
        ),
        nbformat.v4.new_code_cell("%%openprogram\n3"),
    ]
    path = tmp_path / "flaky.ipynb"
    nbformat.write(nb, path)
    assert run_notebook(path).error is None
    flag.touch()
    assert run_notebook(path).error is not None
    flag.unlink()
    sid = run_notebook(path).session_id
    assert sid is not None
    store = SessionStore(op_home)
    try:
        turns = [e for e in store.open(sid).index() if e["kind"] == "turn"]
    finally:
        store.close()
    assert [t["status"] for t in turns] == ["completed"] * 3 + ["completed", "error"] + [
        "completed"
    ] * 3
    assert [t["predecessor"] for t in turns[1:]] == [t["id"] for t in turns[:-1]]  # one chain
