"""The options of a ``%%openprogram`` cell, declared once: the cell magic shows them in its
help (``%%openprogram?``) and every kind of cell parses its line with them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

_F = TypeVar("_F", bound=Callable[..., Any])

OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (
        ("--session", "-s"),
        {
            "default": None,
            "help": "Run this cell only in session ID (the notebook keeps its own; `use` "
            "re-points).",
        },
    ),
    (
        ("--from",),
        {
            "dest": "start",
            "default": None,
            "metavar": "NODE",
            "help": "Continue from the turn of NODE: this cell and the next ones form a "
            "branch there.",
        },
    ),
    (("--no-dag",), {"action": "store_true", "help": "Do not draw the live DAG under the cell."}),
    (
        ("--background", "-b"),
        {
            "action": "store_true",
            "help": "Run the body on a thread and return at once (%%openprogram stop stops it).",
        },
    ),
    (
        ("--chat",),
        {
            "action": "store_true",
            "help": "Send the cell's text to the agent as a chat message of this session.",
        },
    ),
    (
        ("--eval",),
        {
            "nargs": "+",
            "default": None,
            "metavar": "FN",
            "help": "--eval FN [SCORER ...]: evaluate FN over the cases the cell's last "
            "expression gives, scored by the SCORERs (openprogram.evaluate).",
        },
    ),
    (
        ("--executor",),
        {"default": None, "metavar": "NAME", "help": "With --eval: run the cases on NAME."},
    ),
)


class CellOptions:
    """The parsed line of a ``%%openprogram`` cell."""

    session: str | None
    start: str | None
    no_dag: bool
    background: bool
    chat: bool
    eval: list[str] | None
    executor: str | None


def cell_options(func: _F) -> _F:
    """Give ``func`` (the cell magic) the cell's options, as IPython's ``@argument``s."""
    for names, options in reversed(OPTIONS):
        func = argument(*names, **options)(func)
    return magic_arguments(name="openprogram")(func)  # type: ignore[no-any-return]


@cell_options
def _line(line: str, cell: str) -> None:
    """The cell's options, parsed without the magics object."""


def parse_cell_options(line: str) -> CellOptions:
    """The cell's options (a one-line UsageError, with the option meant if a typo)."""
    try:
        return parse_argstring(_line, line)  # type: ignore[no-any-return]
    except Exception as exc:  # argparse errors → one line, with the option meant if a typo
        raise UsageError(f"%%openprogram: {exc}{_meant(str(exc))}") from None


def _meant(error: str) -> str:
    """`` (did you mean --background?)`` for the first of the words argparse did not
    recognise (``error``) that is close to an option of the cell magic; else empty."""
    import difflib

    _, found, rest = error.partition("unrecognized arguments:")
    options = list(_line.parser._option_string_actions)  # type: ignore[attr-defined]
    for word in rest.split() if found else []:
        close = difflib.get_close_matches(word.split("=", 1)[0], options, n=1)
        if word.startswith("--") and close:
            return f" (did you mean {close[0]}?)"
    return ""
