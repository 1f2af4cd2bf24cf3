"""What the transformed first line of a ``%%openprogram`` cell calls (:mod:`.transform`).

:func:`_cell_guard` begins a plain cell's turn; :func:`_body_guard` is the whole of a
``--background`` or ``--chat`` cell, whose body is handed to its kind, not run in place.
Both find the notebook's :class:`~openprogram_magics.cells.CellHost` in the running shell.
"""

from __future__ import annotations

import sys
from typing import Any, cast

from IPython.core.error import UsageError

from openprogram_magics.cells import CellHost, plain
from openprogram_magics.cells.options import parse_cell_options
from openprogram_magics.cells.transform import MAGIC

NOT_LOADED = "openprogram_magics is not loaded: run `%load_ext openprogram_magics`"


def host() -> CellHost:
    """The running shell's extension (UsageError when it is not loaded)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is what runs the guard
        raise UsageError(NOT_LOADED) from None
    shell = get_ipython()
    found = shell.magics_manager.registry.get("OpenProgramMagics") if shell else None
    if found is None or not hasattr(found, "turns"):
        raise UsageError(NOT_LOADED)
    return cast(CellHost, found)


def _cell_guard(args: str) -> None:
    """First statement of a ``%%openprogram`` cell: begin its turn."""
    _show_magic_line(sys._getframe(1).f_code.co_filename, f"{MAGIC} {args}".rstrip())
    turns = host().turns
    plain.begin(turns, args, turns.raw_cell)


def _body_guard(args: str, body: str) -> Any:
    """The whole of a ``--background``, ``--chat`` or ``--eval`` cell: its body is handed
    over, not run in place."""
    found = host()
    opts = parse_cell_options(args)
    source = f"{MAGIC} {args}\n{body}"
    if opts.eval:
        if opts.background or opts.chat:
            raise UsageError("%%openprogram: --eval goes with neither -b nor --chat")
        from openprogram_magics.cells.evaluate import run_eval_cell

        return run_eval_cell(found, args, opts, body, source)
    if opts.background and opts.chat:
        raise UsageError("%%openprogram: --background and --chat do not go together")
    if opts.start:
        raise UsageError("%%openprogram: --from goes with a plain cell (not -b or --chat)")
    if opts.background:
        from openprogram_magics.cells.background import start_background_cell

        found.background = start_background_cell(found, opts, body, source)
        return None
    from openprogram_magics.cells.chat import run_chat_cell

    return run_chat_cell(found, opts, body, source)


def _show_magic_line(filename: str, line: str) -> None:
    """Tracebacks quote the cell from ``linecache``: make its first line the user's
    ``%%openprogram`` line again instead of this guard call."""
    import linecache

    entry = linecache.cache.get(filename)
    lines = entry[2] if isinstance(entry, tuple) and len(entry) == 4 else None
    if not isinstance(lines, list) or not lines or "_cell_guard(" not in lines[0]:
        return
    lines[0] = line + "\n"  # in place: no second list and entry kept per cell
