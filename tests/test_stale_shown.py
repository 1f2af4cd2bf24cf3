"""Stale is about what this notebook shows (issue 35 item 8): a cell is judged by the turn
its saved output shows, not by every turn recorded of its text — a colleague's
``--only-stale`` re-run, pulled into the session, does not hide that this notebook's
output came from the old docstring.  Sessions built in a real IPython shell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat

from openprogram.providers.replay import ReplayProvider
from openprogram.providers.test import FunctionProvider
from openprogram_magics.notebook import MIME_TYPE
from tests.test_magics import Shell, turns_of
from tests.test_stale import AGENTS, CELLS, NEW, OLD, reply, run_cells, session_id


def saved_notebook(path: Path, sid: str, shown: list[Any], sources: list[str]) -> str:
    """The notebook as its owner saved it: each turn cell's output carries the session part
    of the turn it shows (as a run cell writes it)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["openprogram"] = {"session_id": sid, "version": 1}
    nb.cells = [nbformat.v4.new_code_cell(AGENTS.replace("{doc}", NEW))]
    for source, turn in zip(sources, shown, strict=True):
        cell = nbformat.v4.new_code_cell(source)
        part = {"session_id": sid, "version": 1, "last_turn_id": turn.id, "turn": turn.turn}
        cell.outputs = [
            nbformat.v4.new_output("display_data", {"text/plain": "turn", MIME_TYPE: part})
        ]
        nb.cells.append(cell)
    nbformat.write(nb, path)
    return str(path)


def test_a_colleagues_only_stale_rerun_does_not_hide_the_shown_old_output(
    bare_shell: Shell, tmp_path: Path
) -> None:
    shell = bare_shell
    shell.use_provider(reply)
    run_cells(shell, OLD)  # her run: the outputs her notebook shows
    sid = session_id(shell)
    first, second = turns_of(sid)
    # his `run --only-stale` after the docstring edit (into a scratch file), pulled here:
    # the handle cell ran live with the new docstring, the triage cell was replayed
    shell.use_runtime(ReplayProvider(sid, fallback=FunctionProvider(reply), live_stale=True))
    run_cells(shell, NEW, first="root")
    assert len(turns_of(sid)) == 4
    shell.use_provider(reply)

    # her notebook still shows her turns: the handle cell's output used the old docstring
    path = saved_notebook(tmp_path / "review.ipynb", sid, [first, second], CELLS)
    report = shell.line(f"stale --notebook {path}").report
    assert [s.turn.id for s in report.stale] == [first.id]
    assert report.stale[0].reasons == ["the docstring of `handle` changed"]
    assert report.lines()[0] == "1 of 2 recorded cell(s) stale"

    # the scratch file shows his new turns: nothing there is stale
    third, fourth = turns_of(sid)[2:]
    scratch = saved_notebook(tmp_path / "scratch.ipynb", sid, [third, fourth], CELLS)
    assert shell.line(f"stale --notebook {scratch}").report.stale == []
