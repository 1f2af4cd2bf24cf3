"""``notebooks/session_tests.ipynb`` runs offline (``openprogram run``, a real kernel): a
recorded session exported as a pytest module passes with no key, fails after a docstring
edit naming the call with the prompt's diff, and passes again once recorded again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from openprogram_magics.headless import run_notebook

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "session_tests.ipynb"

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(240)]


def test_the_session_tests_notebook_shows_the_round_trip_offline(
    tmp_path: Path, op_home: Path
) -> None:
    target = tmp_path / "session_tests.ipynb"
    shutil.copy(NOTEBOOK, target)
    run = run_notebook(target)
    assert run.error is None
    outputs = [
        "".join(out.get("text", ""))
        for cell in json.loads(target.read_text())["cells"]
        for out in cell.get("outputs", [])
    ]
    passed = [i for i, text in enumerate(outputs) if "2 passed" in text]
    failed = [i for i, text in enumerate(outputs) if "2 failed" in text]
    assert len(passed) == 2 and len(failed) == 1 and passed[0] < failed[0] < passed[1]
    said = outputs[failed[0]]
    assert "test_triage_1: LLM call 1 of function triage" in said
    assert "-system: Classify the ticket as bug, feature or question." in said
    assert "+system: Sort the ticket into bug, feature or question." in said
    assert "recorded again with test: session " in "\n".join(outputs)
    assert (tmp_path / "session_tests_demo" / "tests" / "test_triage.py").is_file()
