"""``ask_user``: a question to the user, recorded as an ``ask_user`` node.

The answer comes from a pluggable handler: the one installed for the current context
(``using_ask_user_handler``), else the process default (``set_default_ask_user_handler``),
else the terminal when stdin is interactive.  With no one to answer, the node ends
``unanswered`` at once and ``None`` is returned: never a silent hang.
"""

from __future__ import annotations

import sys

from openprogram.agentic_programming.function import run_in_session
from openprogram.context.nodes import (
    ANSWERED,
    AWAITING,
    UNANSWERED,
    make_call,
)
from openprogram.context.outcome import finish
from openprogram.store.vars import AskHandler, get_ask_handler, get_call_id, get_store
from openprogram.store.vars import using_ask_handler as using_ask_user_handler

__all__ = [
    "AskHandler",
    "ask_user",
    "current_ask_user_handler",
    "set_default_ask_user_handler",
    "terminal_handler",
    "using_ask_user_handler",
]

_default_handler: AskHandler | None = None


def terminal_handler(question: str, choices: list[str] | None) -> str | None:
    """Ask on the terminal when there is one; None when stdin is not interactive."""
    if not (sys.stdin and sys.stdin.isatty()):
        return None
    hint = f" [{'/'.join(choices)}]" if choices else ""
    try:
        return input(f"{question}{hint} ")
    except EOFError:
        return None


def set_default_ask_user_handler(handler: AskHandler | None) -> None:
    global _default_handler
    _default_handler = handler


def current_ask_user_handler() -> AskHandler:
    """The handler a question asked here and now would go to (context, default, terminal)."""
    return get_ask_handler() or _default_handler or terminal_handler


def ask_user(question: str, *, choices: list[str] | None = None) -> str | None:
    """Ask the user ``question``; returns the answer, or None if nobody can answer."""
    return run_in_session(_ask, question, choices)


def _ask(question: str, choices: list[str] | None) -> str | None:
    writer = get_store()
    assert writer is not None
    node = make_call(
        "ask_user",
        "ask_user",
        input={"question": question, "choices": choices},
        caller=get_call_id(),
        status=AWAITING,
    )
    writer.append(node)  # never turn-level: an ask_user node does not move HEAD
    handler = current_ask_user_handler()
    try:
        answer = handler(question, choices)
    except BaseException as exc:
        writer.update(finish(node, exc=exc))
        raise
    writer.update(finish(node, ANSWERED if answer is not None else UNANSWERED, output=answer))
    return answer
