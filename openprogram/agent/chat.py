"""A chat message from wherever the user types it (a notebook cell, a terminal): one
dispatcher turn whose reply streams to the user as it arrives.

``tool`` marks a function the chat agent may call; :func:`tools_in` collects the marked
functions of a namespace (a notebook's), so the model can use what the notebook defines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from openprogram.agent.dispatcher import TurnRequest, process_user_turn
from openprogram.agentic_programming.ask_user import using_ask_user_handler
from openprogram.agentic_programming.echo import Echo, using_echo

if TYPE_CHECKING:
    from openprogram.agent.dispatcher.types import TurnResult
    from openprogram.agentic_programming.ask_user import AskHandler
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram.agentic_programming.tool_loop import EventCallback

F = TypeVar("F", bound=Callable[..., Any])
TOOL_MARK = "__openprogram_tool__"


def tool(fn: F) -> F:
    """Offer ``fn`` to chat turns as a tool (its docstring describes it to the model, its
    annotated parameters are the arguments)."""
    setattr(fn, TOOL_MARK, True)
    return fn


def tools_in(namespace: Mapping[str, Any]) -> dict[str, Callable[..., Any]]:
    """The functions of ``namespace`` marked with :func:`tool`, by name."""
    return {
        name: value
        for name, value in namespace.items()
        if callable(value) and getattr(value, TOOL_MARK, False) and not name.startswith("_")
    }


def chat_turn(
    text: str,
    *,
    session_id: str | None,
    runtime: Runtime | None = None,
    tools: Mapping[str, Callable[..., Any]] | None = None,
    after: str | None = None,
    ask: AskHandler | None = None,
    out: TextIO | None = None,
    goal: Any = None,
    cell: str | None = None,
    on_event: EventCallback | None = None,
) -> tuple[TurnResult, bool]:
    """Send ``text`` as the user message of a turn of ``session_id`` (after node ``after``,
    else HEAD); the reply streams to ``out`` (default stdout) piece by piece.  Returns the
    turn's result and whether any text was streamed.  With ``goal`` (text or a ``Goal``)
    the goal's continuation turns follow, each reply streamed, a line between them saying
    what the goal's check found; the result is the last turn's.  A reply with no text is
    said so in a line of its own (``[empty reply: …]``).  ``cell``: the notebook cell the
    message was typed in (kept on the turn node); ``on_event`` hears every event of the
    turn (``user``, ``reply_started``, ``goal``, ``result``…) after this function did."""
    echo = Echo("", out)  # bound to the reply's frame once it opens

    def heard(event: dict[str, Any]) -> None:
        if event.get("type") == "reply_started":
            echo.frame_id = str(event["node_id"])
        elif event.get("type") == "goal":
            say_goal(event["state"], out)
        elif event.get("type") == "result" and event["result"].note:
            say_note(event["result"].note, out)
        if on_event is not None:
            on_event(event)

    request = TurnRequest(
        session_id=session_id,
        text=text,
        runtime=runtime,
        on_event=heard,
        fork_from=after,
        tools=dict(tools or {}),
        goal=goal,
        cell=cell,
    )
    asking = using_ask_user_handler(ask) if ask is not None else nullcontext()
    with using_echo(echo), asking:
        result = process_user_turn(request)
    return result, echo.total > 0


def say_goal(state: dict[str, Any], out: TextIO | None = None) -> None:
    """One line between a goal run's turns (and at its end), as the user sees it."""
    import sys

    from openprogram.context.secrets import redact_secrets
    from openprogram.view.inert import terminal_text

    status = str(state.get("status", ""))
    n = state.get("continuations", 0)
    why = f": {state['reason']}" if state.get("reason") else ""
    if status == "active":
        line = f"[goal not met yet{why} — continuation {int(n) + 1}]"
    else:
        line = f"[goal {status.replace('_', ' ')} after {n} continuation(s){why}]"
    stream = out if out is not None else sys.stdout
    print("\n" + terminal_text(redact_secrets(line)), file=stream, flush=True)


def say_note(note: str, out: TextIO | None = None) -> None:
    """A line saying what a turn's reply node notes (an empty reply), as the user sees it."""
    import sys

    from openprogram.view.inert import terminal_text

    stream = out if out is not None else sys.stdout
    print(terminal_text(f"[{note}]"), file=stream, flush=True)
