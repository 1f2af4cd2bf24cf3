"""Chat cells in a notebook run by a real kernel (nbclient, as ``openprogram run`` does),
read back from disk (issue 38, item 5): the streamed reply is saved as ONE output, so
nbconvert's HTML shows it as written; the turn's DAG is saved with the tool it called; an
empty reply says so; ``%openprogram stale`` finds the unedited chat cells unchanged."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbconvert import HTMLExporter

from openprogram.view.saved import DAG_MIME
from openprogram_magics.headless import run_notebook
from openprogram_magics.notebook import MIME_TYPE
from tests.test_chat_cell import TOOLS

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.kernel, pytest.mark.timeout(180)]

USE = """
from openprogram.providers import create_runtime
from openprogram.providers.test import TestProvider

_m = get_ipython().magics_manager.registry["OpenProgramMagics"]
_m._runtime = create_runtime(TestProvider({reply}, tool_calls=[("lookup", {{"query": "DAG"}})]))
_m._runtime_key = _m.runtime_key()
"""
REPLY = "[test reply] Earlier step: lookup(query='DAG') -> glossary entry for DAG"
EMPTY = "empty reply: the model called lookup (1 tool call), then answered with no text"


def test_a_notebook_saves_each_chat_reply_as_one_output_with_its_dag_and_notes(
    tmp_path: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [str(REPO), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))
    path = tmp_path / "chat.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext openprogram_magics\n" + USE.format(reply="None")),
        nbformat.v4.new_code_cell(TOOLS),
        nbformat.v4.new_code_cell("%%openprogram --chat\nWhat is a DAG?"),
        nbformat.v4.new_code_cell(USE.format(reply="''")),
        nbformat.v4.new_code_cell("%%openprogram --chat\nAnd a graph?"),
        nbformat.v4.new_code_cell(f"%openprogram stale --notebook {path}"),
    ]
    nbformat.write(nb, path)
    ran = run_notebook(path, timeout=120)
    assert ran.error is None, ran.error

    saved = nbformat.read(path, as_version=4)
    chat = saved.cells[2].outputs
    streams = [o for o in chat if o.output_type == "stream" and "DAG" in o.text]
    assert streams == []  # no piece of the reply saved as a stream output of its own
    (reply,) = [o for o in chat if o.output_type == "display_data" and MIME_TYPE not in o.data]
    assert reply.data["text/plain"].strip() == REPLY  # the whole reply, in one output
    (turn,) = [o.data for o in chat if MIME_TYPE in o.get("data", {})]
    assert "tool lookup [completed]" in turn["text/plain"] and DAG_MIME in turn
    assert "lookup" in turn["text/html"]

    html, _ = HTMLExporter().from_notebook_node(saved)
    assert "glossary entry for DAG" in html  # one block of text, not a word per output

    empty = saved.cells[4].outputs
    (note,) = [o for o in empty if o.output_type == "display_data" and MIME_TYPE not in o.data]
    assert f"[{EMPTY}]" in note.data["text/plain"]
    (payload,) = [o.data[MIME_TYPE] for o in empty if MIME_TYPE in o.get("data", {})]
    assert payload["note"] == EMPTY

    stale = "".join(o.get("data", {}).get("text/plain", "") for o in saved.cells[5].outputs)
    assert "0 of 2 recorded cell(s) stale" in stale, stale
    assert "no recording" not in stale
