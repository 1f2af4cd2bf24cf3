"""``%openprogram call`` in a replay (``openprogram run --replay``): answered from the
recording, never run.

A forced tool call reaches wherever its tool reaches (a URL, a file, a service), so a
replay does not run it: the recorded session's turn of the same call (the tool's name and
every argument, as the live run recorded them) gives its result — its tool's output, or
its error — and the replay writes that as its own turn, as a replayed ``%%openprogram``
cell writes the recorded replies, so later turns see what the live run's saw.  Each
recorded turn answers once, in the order they were made.  A call with no recording is
skipped with a note.
"""

from __future__ import annotations

import inspect
import json
import keyword
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openprogram.context.nodes import Call

_answered: set[str] = set()  # recorded turns that answered (and the turns a replay wrote)


@dataclass(frozen=True)
class Recorded:
    """The recorded turn of a forced call and what its tool gave."""

    turn_id: str
    output: Any
    error: str | None  # "Type: message", as the tool node recorded it

    def tool(self, arguments: dict[str, Any]) -> Any:
        """A callable taking exactly ``arguments`` that gives the recorded result."""

        def recorded(**_: Any) -> Any:
            if self.error is None:
                return self.output
            kind, sep, message = self.error.partition(": ")
            if not sep or not kind.isidentifier() or keyword.iskeyword(kind):
                kind, message = "ToolError", self.error
            raise type(kind, (Exception,), {})(message)

        params = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY) for k in arguments]
        recorded.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        return recorded


def _normal(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def recorded_call(nodes: list[Call], name: str, arguments: dict[str, Any]) -> Recorded | None:
    """The first recorded turn of the forced call of tool ``name`` with ``arguments`` (all
    of them, as the turn recorded them) that has not answered yet (``nodes``: the recorded
    session's, in seq order)."""
    from openprogram.agent.dispatcher.forced_tool import TURN_NAME
    from openprogram.context.nodes import sanitize

    wanted = _normal(sanitize(arguments))
    turn = next(
        (
            n
            for n in nodes
            if n.kind == "turn"
            and n.name == TURN_NAME
            and isinstance(n.input, dict)
            and n.input.get("tool") == name
            and _normal(n.input.get("arguments")) == wanted
            and n.id not in _answered
        ),
        None,
    )
    if turn is None:
        return None
    ran = next((n for n in nodes if n.kind == "tool" and n.caller == turn.id), None)
    if ran is None:  # the call never ran (interrupted before its tool began)
        return None
    error = None
    if ran.status != "completed":
        error = str(ran.metadata.get("error") or ran.status)
    return Recorded(turn.id, ran.output, error)


def recording_of(recorded_session: str, name: str, arguments: dict[str, Any]) -> Recorded | None:
    """The recorded turn of ``%openprogram call NAME`` with ``arguments`` in
    ``recorded_session`` that answers now (marked answered); None, with a note, when the
    recording holds no such call (a replay never runs it)."""
    from openprogram.agent.session_db import default_db

    db = default_db()
    found = None
    if db.exists(recorded_session):
        found = recorded_call(db.open(recorded_session).nodes(), name, arguments)
    if found is None:
        print(
            f"openprogram: replay: `%openprogram call {name}` skipped (the recording holds no "
            "such call; a replay never runs a forced tool call)"
        )
        return None
    _answered.add(found.turn_id)
    return found


def answered(turn_id: str) -> None:
    """The turn a replay wrote for a recorded call never answers a later call itself."""
    _answered.add(turn_id)
