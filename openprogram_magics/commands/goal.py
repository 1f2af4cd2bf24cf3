"""``%openprogram goal [TEXT] [--clear] [--turns N] [--tokens N] [--usd X]``: the goal the
notebook's chat cells keep working on.

The goal lives on the magics object (``chat_goal``) until a goal run ends; each
``%%openprogram --chat`` cell works on it (continuation turns follow the cell's message
until the goal is met, a limit, a stop or a question to the user), and the run's state is
kept in the session's ``meta.json`` (``goal``).
"""

from __future__ import annotations

from argparse import Namespace
from typing import Any

from openprogram_magics.commands import PROG, CommandError, Host, arg, command

GOAL_ATTR = "chat_goal"  # the magics object's attribute holding the notebook's goal


def notebook_goal(host: Any) -> Any:
    """The goal the notebook's chat cells work on (a ``Goal``), or None."""
    return getattr(host, GOAL_ATTR, None)


def goal_done(host: Any, state: dict[str, Any] | None) -> None:
    """After a chat cell's goal run: an ended run clears the notebook's goal (a question
    to the user keeps it: the answer, in the next chat cell, resumes it)."""
    from openprogram.agent.dispatcher.goal import ENDED

    if state is not None and state.get("status") in ENDED:
        setattr(host, GOAL_ATTR, None)


def goal_line(state: dict[str, Any]) -> str:
    """One line saying where a goal run is."""
    status = str(state.get("status", "?"))
    n = state.get("continuations", 0)
    why = f" — {state['reason']}" if state.get("reason") else ""
    return f"goal {status.replace('_', ' ')} after {n} continuation(s){why}"


@command(
    "goal",
    "set the goal chat cells keep working on; no argument: its status",
    arg("text", nargs="?", metavar="TEXT"),
    arg("--clear", action="store_true", help="end the goal"),
    arg("--turns", type=int, default=None, metavar="N", help="at most N continuation turns"),
    arg("--tokens", type=int, default=None, metavar="N", help="at most N tokens in the run"),
    arg("--usd", type=float, default=None, metavar="X", help="at most X dollars in the run"),
)
def goal(host: Host, args: Namespace) -> Any:
    from openprogram.agent.dispatcher.goal import DEFAULT_MAX_TURNS, Goal

    if args.clear:
        had = notebook_goal(host)
        setattr(host, GOAL_ATTR, None)
        print(f"openprogram: goal cleared ({had.text})" if had else "openprogram: no goal set")
        return None
    if args.text is None:
        return _goal_status(host)
    turns = DEFAULT_MAX_TURNS if args.turns is None else args.turns
    try:
        new = Goal(args.text, max_turns=turns, max_tokens=args.tokens, max_cost_usd=args.usd)
    except Exception as exc:
        raise CommandError(str(exc)) from None
    setattr(host, GOAL_ATTR, new)
    print(
        f"openprogram: goal set: {new.text}\n"
        f"  each %%openprogram --chat cell keeps working on it (at most {turns} continuation "
        f"turns); `{PROG} goal` shows where it is, `{PROG} goal --clear` ends it"
    )
    return new


def _goal_status(host: Host) -> dict[str, Any] | None:
    from openprogram.agent.session_db import default_db
    from openprogram.view.inert import terminal_text

    current = notebook_goal(host)
    sid = host.current_session_id()
    state = None
    if sid and default_db().exists(sid):
        found = default_db().open(sid).meta.get("goal")
        state = found if isinstance(found, dict) else None
    if current is None and state is None:
        print(f'openprogram: no goal; `{PROG} goal "what to achieve"` sets one')
        return None
    lines = []
    if current is not None:
        lines.append(f"goal: {current.text} (at most {current.max_turns} continuation turns)")
    if state is not None:
        lines.append(f"last run: {state.get('text')}: {goal_line(state)}")
    print(terminal_text("\n".join(lines)).replace("\\n", "\n"))
    return state
