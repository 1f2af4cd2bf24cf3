"""``%openprogram call NAME key=value…``: run one tool or agentic function of the notebook
with these arguments, no model, as a turn of the notebook's session.

Each value is read as a Python literal (``n=3``, ``xs=[1, 2]``, ``flag=True``,
``name='Ada Lovelace'``), else taken as the string it is (``topic=graphs``).  ``NAME`` is
a function of the notebook marked ``@openprogram.tool`` or an ``@agentic_function`` (or an
importable ``package.module:function``).  ``--retry TURN`` runs it as a retry of a failed
turn: a sibling of that turn, after its predecessor.

In a replay (``openprogram run --replay``) the call never runs: the recording's turn of
the same call answers it (:mod:`openprogram_magics.replay_call`), or it is skipped.
"""

from __future__ import annotations

import ast
from argparse import Namespace
from dataclasses import replace
from typing import Any

from openprogram_magics.commands import (
    PROG,
    CommandError,
    Host,
    arg,
    command,
    session_or_current,
)


def parse_arguments(pairs: list[str]) -> dict[str, Any]:
    """``["k=v", ...]`` as keyword arguments (values as Python literals, else strings)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.isidentifier():
            raise CommandError(f"{PROG} call: arguments are key=value, got {pair!r}")
        if key in out:
            raise CommandError(f"{PROG} call: {key} is given twice")
        try:
            out[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            out[key] = text
    return out


def notebook_tools(host: Host) -> dict[str, Any]:
    """The notebook's functions a call may name: ``@openprogram.tool`` ones and agentic
    functions of the user namespace."""
    from openprogram.agent.chat import TOOL_MARK

    shell = getattr(host, "shell", None)
    namespace = getattr(shell, "user_ns", None) or {}
    return {
        name: value
        for name, value in namespace.items()
        if callable(value)
        and not name.startswith("_")
        and (getattr(value, TOOL_MARK, False) or getattr(value, "__agentic__", False))
    }


@command(
    "call",
    "run a tool or agentic function with these arguments (no model), as a turn",
    arg("name", metavar="NAME"),
    arg("arguments", nargs="*", metavar="KEY=VALUE"),
    arg("--retry", default=None, metavar="TURN", help="as a retry of the failed turn TURN"),
)
def call(host: Host, args: Namespace) -> Any:
    from openprogram.agent.dispatcher import dispatch_forced_tool_call
    from openprogram.agent.session_db import default_db
    from openprogram_magics import replay_call
    from openprogram_magics.bridge import replay_run
    from openprogram_magics.turn import chained_after

    kwargs = parse_arguments(args.arguments)
    replay = replay_run()
    recorded = None
    if replay is not None:  # a forced tool call never runs in a replay
        recorded = replay_call.recording_of(replay.session_id, args.name, kwargs)
        if recorded is None:
            return None
    sid = session_or_current(host, None)
    meta = host.current_meta()
    db = default_db()
    after = None
    if args.retry is None and meta is not None and db.exists(sid):
        after = chained_after(db.open(sid), meta)
    result = dispatch_forced_tool_call(
        sid,
        args.name,
        kwargs,
        tools={args.name: recorded.tool(kwargs)} if recorded else notebook_tools(host),
        runtime=host.runtime(),
        after=after,
        retry_of=args.retry,
    )
    if recorded is not None:
        replay_call.answered(result.user_node_id)
    if meta is not None:
        host.set_session(replace(meta, last_turn_id=result.user_node_id))
    shown = result.text if result.status == "completed" else f"{result.status}: {result.error}"
    if recorded is None:
        print(f"openprogram: {args.name} · turn {result.user_node_id} · {shown}")
    else:
        print(
            f"openprogram: replay: {args.name} · turn {result.user_node_id} · {shown} "
            f"(answered from the recording of turn {recorded.turn_id}; the tool did not run)"
        )
    return result
