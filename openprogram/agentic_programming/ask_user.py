"""``ask_user``: a question to the user, recorded as an ``ask_user`` node.

The answer comes from a pluggable handler: the one installed for the current context
(``using_ask_user_handler``), else the process default (``set_default_ask_user_handler``),
else the terminal when stdin is interactive.  With no one to answer, the node ends
``unanswered`` at once and ``None`` is returned: never a silent hang.
"""

from __future__ import annotations

from openprogram.agentic_programming.questions import (
    ask_plain,
    current_ask_user_handler,
    set_default_ask_user_handler,
    terminal_handler,
)
from openprogram.store.vars import AskHandler
from openprogram.store.vars import using_ask_handler as using_ask_user_handler

__all__ = [
    "AskHandler",
    "ask_user",
    "current_ask_user_handler",
    "set_default_ask_user_handler",
    "terminal_handler",
    "using_ask_user_handler",
]


def ask_user(question: str, *, choices: list[str] | None = None) -> str | None:
    """Ask the user ``question``; returns the answer, or None if nobody can answer (or
    the user typed ``/decline``).  ``runtime.ask``/``confirm``/``form`` ask more
    (:mod:`openprogram.agentic_programming.questions`, the same node and handler)."""
    return ask_plain(question, choices)
