"""``notebooks/sharing.ipynb`` runs headless and offline, and shows what it promises."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from openprogram_magics.headless import run_notebook

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "sharing.ipynb"

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]


def shown(path: Path) -> str:
    out = []
    for cell in json.loads(path.read_text())["cells"]:
        for o in cell.get("outputs", []):
            text = o.get("text") or o.get("data", {}).get("text/plain") or ""
            out.append("".join(text))
    return "\n".join(out)


def test_sharing_notebook_runs_offline(tmp_path: Path) -> None:
    copy = tmp_path / "sharing.ipynb"
    shutil.copy(NOTEBOOK, copy)
    result = run_notebook(copy)
    assert result.error is None
    text = shown(copy)
    assert "refs/openprogram/sessions/" in text and "refs/heads" not in text
    assert "new, 1 turn(s) arrived" in text  # the colleague's pull
    assert "pull first" in text  # my push after we both went on
    assert "merged, 1 turn(s) arrived" in text
    assert "other lines: 1 turn(s) ending at" in text
    assert "The bundle records a complete history" in text  # git bundle verify
    assert "KiB git bundle" in text  # embedded
    assert "llm replay [completed]" in text
