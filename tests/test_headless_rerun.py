"""Re-running a notebook where nothing changed (``run_notebook``, real kernels, the offline
``test`` provider) changes only the lines of the new turns' ids: the file stays
merge-friendly under git."""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from test_gitmerge_team import notebook_without_session_commands

from openprogram.view.saved import DAG_MIME, read_saved
from openprogram_magics.headless import run_notebook

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]


def changed_lines(before: str, after: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_rerunning_an_unchanged_notebook_changes_only_the_new_turns_ids(
    tmp_path: Path, op_home: Path
) -> None:
    path = tmp_path / "nb.ipynb"
    nbformat.write(notebook_without_session_commands(), path)
    assert run_notebook(path).error is None
    assert run_notebook(path, replay=True).error is None
    first = path.read_text()
    assert run_notebook(path, replay=True).error is None
    second = path.read_text()
    lines = changed_lines(first, second)
    stamps = re.compile(r'"(created_at|at|ms|duration_ms|run|iopub\.[a-z.]+|shell\.execute_reply)"')
    assert not [line for line in lines if stamps.search(line)]
    assert "duration_ms" not in second and "created_at" not in second
    a, b = json.loads(first), json.loads(second)
    assert a["metadata"] == b["metadata"]
    assert normalized(a) == normalized(b)  # only the new turns' ids and numbers changed
    assert other_cells(a) == other_cells(b)  # every cell but the turns' exactly the same


def other_cells(nb: dict[str, Any]) -> list[Any]:
    return [c for c in nb["cells"] if not "".join(c["source"]).startswith("%%openprogram")]


def normalized(nb: dict[str, Any]) -> Any:
    """``nb`` with node ids replaced by their order of appearance in the turns' DAG rows,
    and sequence and turn numbers blanked (parsed: key order does not count)."""
    ids: dict[str, str] = {}
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            saved = out.get("data", {}).get(DAG_MIME)
            for row in read_saved(saved)["summary"] if saved is not None else ():
                ids.setdefault(row["id"], f"ID{len(ids)}")
    text = re.sub(r"n_[0-9a-f]{10}", lambda m: ids.get(m.group(), "ID?"), json.dumps(nb))
    text = re.sub(r'(\\"|")(seq|turn)(\\"|"): \d+', r'"\2": 0', text)
    return json.loads(re.sub(r"turn \d+", "turn N", text))
