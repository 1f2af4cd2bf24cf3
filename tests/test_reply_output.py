"""A plain ``%%openprogram`` cell's streamed reply in a notebook run by a real kernel
(nbclient, as ``openprogram run`` does), read back from disk (issue 38, item 5): the reply
is saved as ONE output holding the whole reply (one display, updated in place as it
streamed), not one ``stream`` output per piece, so nbconvert's HTML shows it as written;
re-running the cell saves that output again byte for byte.  Chat cells:
``test_chat_notebook_outputs.py``; in an IPython shell: ``test_streaming.py``."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbconvert import HTMLExporter

from openprogram_magics.headless import run_notebook
from openprogram_magics.notebook import MIME_TYPE

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.kernel, pytest.mark.timeout(240)]

REPLY = "one two three four five six seven eight nine ten"
USE = f"""
from openprogram.providers import create_runtime
from openprogram.providers.test import TestProvider

from openprogram_magics import use_runtime
use_runtime(create_runtime(TestProvider({REPLY!r})))  # streams the reply word by word
"""
CELL = '%%openprogram\nfrom openprogram import llm\nreply = llm("Count to ten.")'


def reply_outputs(cell: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    """The cell's outputs but for its turn's DAG and openprogram's own notes."""
    return [
        o
        for o in cell.outputs
        if MIME_TYPE not in o.get("data", {}) and not o.get("text", "").startswith("openprogram:")
    ]


def test_a_streamed_reply_of_a_plain_cell_is_saved_as_one_output_with_the_whole_reply(
    tmp_path: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [str(REPO), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))
    path = tmp_path / "reply.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext openprogram_magics\n" + USE),
        nbformat.v4.new_code_cell(CELL),
    ]
    nbformat.write(nb, path)
    ran = run_notebook(path, timeout=120)
    assert ran.error is None, ran.error

    saved = nbformat.read(path, as_version=4)
    (reply,) = reply_outputs(saved.cells[1])  # ONE output, not one per streamed word
    assert reply.output_type == "display_data"
    assert reply.data["text/plain"].strip() == REPLY  # the whole reply
    html, _ = HTMLExporter().from_notebook_node(saved)
    assert REPLY in html  # one block of text, not a word per output

    ran = run_notebook(path, timeout=120)  # the cell again, the same reply
    assert ran.error is None, ran.error
    again = nbformat.read(path, as_version=4)
    assert reply_outputs(again.cells[1]) == [reply]  # saved again as it was, byte for byte
