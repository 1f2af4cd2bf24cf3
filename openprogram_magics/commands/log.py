"""``%openprogram log [ID]``: the session's git log, one line per turn."""

from __future__ import annotations

from argparse import Namespace

from openprogram_magics.commands import Host, arg, command, session_or_current


@command(
    "log", "the session's git log, one line per turn", arg("session_id", nargs="?", metavar="ID")
)
def log(host: Host, args: Namespace) -> list[str]:
    from openprogram.agent.session_db import default_db
    from openprogram_magics.sessions import session_log

    sid = session_or_current(host, args.session_id)
    if args.session_id is None and not default_db().exists(sid):
        print(f"openprogram: session {sid} has no turns yet (it is stored at the first turn)")
        return []
    lines = session_log(sid)
    print("\n".join(lines))
    return lines
