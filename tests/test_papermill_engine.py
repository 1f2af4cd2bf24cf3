"""papermill runs of a notebook (``papermill_engine``, real kernels): papermill's default
engine (which cannot hand the kernel the notebook's metadata) records turns but does not
continue the file's session; ``--engine openprogram`` does, as ``openprogram run`` does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_headless import notebook, read, session_parts, turn_count

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(180)]
__all__ = ["notebook"]  # the fixture, shared with test_headless.py


def test_papermill_records_turns_but_cannot_continue_the_session(
    notebook: Path, op_home: Path
) -> None:
    """papermill runs the cells itself and never hands the kernel the notebook's metadata:
    each run starts a new session (its id is in the outputs, not in the metadata, which
    papermill copies from the input unchanged).  Pin the id in code (``%%openprogram
    --session ID``, or a parameters cell running ``%openprogram use ID`` — ``new --id ID``
    the first time) to continue one."""
    papermill = pytest.importorskip("papermill")
    nb = read(notebook)
    nb["metadata"]["openprogram"] = {"session_id": "nb_infile", "version": 1}
    notebook.write_text(json.dumps(nb))
    out = notebook.parent / "pm.ipynb"
    papermill.execute_notebook(
        str(notebook), str(out), kernel_name="python3", progress_bar=False, log_output=False
    )
    result = read(out)
    parts = session_parts(result)
    assert len(parts) == 2
    minted = parts[0]["session_id"]
    assert minted != "nb_infile"  # not continued
    assert {p["session_id"] for p in parts} == {minted}  # but one session for the run
    assert result["metadata"]["openprogram"]["session_id"] == "nb_infile"  # a stale copy
    assert turn_count(op_home, minted) == 2
    assert not (op_home / "sessions" / "nb_infile").exists()
    # the parameters-cell workaround continues the file's session
    nb = read(notebook)
    nb["cells"].insert(
        2,
        {
            "cell_type": "code",
            "id": "params",
            "metadata": {"tags": ["parameters"]},
            "execution_count": None,
            "outputs": [],
            "source": "%openprogram new --id nb_infile",
        },
    )
    notebook.write_text(json.dumps(nb))
    papermill.execute_notebook(
        str(notebook), str(out), kernel_name="python3", progress_bar=False, log_output=False
    )
    assert {p["session_id"] for p in session_parts(read(out))} == {"nb_infile"}
    assert turn_count(op_home, "nb_infile") == 2


def test_papermill_openprogram_engine_continues_the_files_session(
    notebook: Path, op_home: Path
) -> None:
    """With ``--engine openprogram`` papermill behaves like ``openprogram run``: the kernel
    is handed the input's metadata before the first cell, and the output records the id."""
    papermill = pytest.importorskip("papermill")
    out1 = notebook.parent / "pm1.ipynb"
    out2 = notebook.parent / "pm2.ipynb"
    papermill.execute_notebook(
        str(notebook),
        str(out1),
        kernel_name="python3",
        engine_name="openprogram",
        progress_bar=False,
    )
    first = read(out1)["metadata"]["openprogram"]
    sid = first["session_id"]
    assert {p["session_id"] for p in session_parts(read(out1))} == {sid}
    papermill.execute_notebook(
        str(out1),
        str(out2),
        kernel_name="python3",
        engine_name="openprogram",
        progress_bar=False,
    )
    second = read(out2)["metadata"]["openprogram"]
    assert second["session_id"] == sid
    assert "last_turn_id" not in second  # the turns' outputs carry it
    assert (
        session_parts(read(out2))[-1]["last_turn_id"]
        != session_parts(read(out1))[-1]["last_turn_id"]
    )
    assert turn_count(op_home, sid) == 4
    assert [p.name for p in (op_home / "sessions").iterdir() if not p.name.startswith(".")] == [sid]
