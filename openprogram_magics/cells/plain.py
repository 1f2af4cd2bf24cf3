"""A plain ``%%openprogram`` cell: its body runs in place, as one turn of the session.

The guard begins the turn inside the cell (or raises the one-line ``UsageError`` that stops
it); the ``post_run_cell`` hook ends it with the cell's outcome.  The same begins the turn
of an ``auto`` cell (no magic line at all) and of ``run_cell_magic`` from code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from IPython.core.error import UsageError

from openprogram_magics.cells.options import parse_cell_options

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from openprogram_magics.cellturn import NotebookTurns


def begin(turns: NotebookTurns, args: str, source: str) -> None:
    """Begin a turn for the cell being run (raises UsageError for the user to see)."""
    from openprogram.errors import UserError

    opts = parse_cell_options(args)
    try:
        turns.begin_turn(opts.session, source, live=not opts.no_dag, start=opts.start)
    except UserError as exc:
        raise UsageError(str(exc)) from None


def run_body(shell: InteractiveShell, turns: NotebookTurns, line: str, body: str) -> None:
    """The cell magic called from code (no transformer ran): the body through ``run_cell``,
    as one turn, ended here."""
    from openprogram_magics.cells.transform import MAGIC

    begin(turns, line, f"{MAGIC} {line}\n{body}")
    turn, turns.turn = turns.turn, None
    assert turn is not None
    result = shell.run_cell(body, store_history=False)
    error = result.error_in_exec or result.error_before_exec
    turns.turn_done(turn.end(error, result.result), turn.pinned)
