"""``openprogram.map`` in a ``%%openprogram`` cell: a function defined in the notebook runs
on a process pool, its calls land under the cell's turn, and a progress line is shown."""

from __future__ import annotations

import os

import pytest
from test_magics import Shell, ipython_dir, session_nodes, shell

__all__ = ["ipython_dir", "shell"]  # fixtures shared with test_magics

CELL = """%%openprogram
import openprogram
from concurrent.futures import ProcessPoolExecutor

with ProcessPoolExecutor(2) as pool:
    labels = openprogram.map(triage, tickets, executor=pool)
labels
"""


def test_a_notebook_function_mapped_over_a_process_pool_lands_under_the_cells_turn(
    shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.ip.user_ns["tickets"] = ["the app crashes", "add dark mode", "how do I log in?"]
    shell.run(CELL)
    assert shell.ip.user_ns["labels"] == ["bug", "bug", "bug"]  # the test provider's pick
    sid = shell.magics.current_session_id()
    assert sid is not None
    nodes = session_nodes(sid)
    (turn,) = [n for n in nodes if n.kind == "turn"]
    calls = [n for n in nodes if n.caller == turn.id]
    assert [(c.name, c.input, c.metadata["item"]) for c in calls] == [
        ("triage", {"ticket": "the app crashes"}, 0),
        ("triage", {"ticket": "add dark mode"}, 1),
        ("triage", {"ticket": "how do I log in?"}, 2),
    ]
    assert all(not c.metadata["worker"].endswith(f":{os.getpid()}") for c in calls)
    assert {n.caller for n in nodes if n.kind == "llm"} == {c.id for c in calls}
    assert "map triage: 3/3 done" in capsys.readouterr().err
    text = shell.bundles()[-1]["text/plain"]
    assert text.count("triage") >= 3  # the cell's drawn DAG shows the mapped calls
