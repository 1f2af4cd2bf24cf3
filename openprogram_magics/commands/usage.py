"""``%openprogram usage [ID] [--calls]``: tokens and cost by function, turn and session."""

from __future__ import annotations

from argparse import Namespace
from typing import Any

from openprogram_magics.commands import CommandError, Host, arg, command, session_or_current


@command(
    "usage",
    "tokens and cost (USD) by function, turn and session",
    arg("session_id", nargs="?", metavar="ID"),
    arg("--calls", action="store_true", help="list every call too"),
)
def usage(host: Host, args: Namespace) -> dict[str, Any]:
    from openprogram.agent.session_db import default_db
    from openprogram.usage.totals import summarize, usage_table

    sid = session_or_current(host, args.session_id)
    db = default_db()
    if not db.exists(sid):
        raise CommandError(f"session {sid} has no turns yet")
    nodes = db.open(sid).nodes()
    print(f"session {sid}\n" + usage_table(nodes, calls=args.calls))
    return summarize(nodes)
