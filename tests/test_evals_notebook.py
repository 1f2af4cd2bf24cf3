"""``notebooks/evaluate.ipynb`` runs offline (``openprogram run``, a real kernel): the first
evaluation sends every call, the docstring edit and the ``--eval`` cell send only the
changed prompts, and the saved outputs show the table and the comparison with its diff."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from openprogram_magics.headless import run_notebook

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "evaluate.ipynb"

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(180)]


def test_the_evaluate_notebook_runs_offline_and_shows_what_moved(
    tmp_path: Path, op_home: Path
) -> None:
    target = tmp_path / "evaluate.ipynb"
    shutil.copy(NOTEBOOK, target)
    run = run_notebook(target)
    assert run.error is None
    saved = json.loads(target.read_text())
    texts = []
    for cell in saved["cells"]:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            texts.append("".join(out.get("text", "")) + "".join(data.get("text/plain", "")))
            texts.append("".join(data.get("text/html", "")))
    shown = "\n".join(texts)
    assert "10 calls sent so far" in shown
    assert "15 calls sent so far" in shown and "5 sent, 5 reused from the recording" in shown
    assert "1 case(s) changed score (1 better, 0 worse), 4 the same" in shown
    assert "+Label the ticket as bug or feature. Be careful: slowness is a bug." in shown
    assert "<table" in shown  # the rich table was saved
