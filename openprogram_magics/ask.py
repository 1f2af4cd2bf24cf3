"""Who answers an ``ask_user`` made in a notebook cell: the frontend, through stdin.

A cell's questions go out as ``input()`` does (an input box under the cell).  A run that
outlives its cell (``--background``) needs the handler :func:`request_ask_handler` makes
while the cell still runs.  With nobody to answer (nbclient, papermill) the answer is
None at once, never a hang.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openprogram.store.vars import AskHandler


def notebook_ask_handler(question: str, choices: list[str] | None) -> str | None:
    """Ask through the frontend's stdin; None when the frontend has no stdin (headless)."""
    try:
        return input(_prompt(question, choices))
    except Exception:  # StdinNotImplementedError (nbclient), EOFError
        return None


def _prompt(question: str, choices: list[str] | None) -> str:
    hint = f" [{'/'.join(choices)}]" if choices else ""
    return f"{question}{hint} "


def _no_answer(question: str, choices: list[str] | None) -> None:
    return None


_STDIN = threading.Lock()  # one question at a time from this module's handlers


def request_ask_handler(shell: Any) -> AskHandler:
    """An ask handler for a run that outlives its cell (``--background``), made while the
    cell runs: it asks through the stdin of *that cell's* request.

    Once a cell returns, ipykernel puts back the process's own ``input`` (which would wait
    on the kernel's stdin pipe for ever) and ``allow_stdin`` becomes the next request's.
    So the request's routing id and header are kept now, and a question goes out as an
    ``input_request`` under them; JupyterLab / Notebook 7 keep a cell's request open until
    the cell runs again, so the input box appears under the background cell.  A request
    that allows no stdin (nbclient, papermill) gets None at once; outside a kernel (a
    terminal IPython) the terminal's ``input`` answers."""
    kernel = getattr(shell, "kernel", None)
    if kernel is None or not hasattr(kernel, "_input_request"):
        return notebook_ask_handler
    if not getattr(kernel, "_allow_stdin", False):
        return _no_answer
    parent = kernel.get_parent("shell")
    ident = kernel._parent_ident["shell"]

    def ask(question: str, choices: list[str] | None) -> str | None:
        with _STDIN:
            try:
                return str(kernel._input_request(_prompt(question, choices), ident, parent))
            except EOFError:  # the user sent Ctrl-D
                return None

    return ask
