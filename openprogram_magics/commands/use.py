"""``%openprogram use ID``: this notebook continues session ID."""

from __future__ import annotations

from argparse import Namespace

from openprogram_magics.commands import CommandError, Host, arg, command, unknown_session


@command("use", "continue session ID in this notebook", arg("session_id", metavar="ID"))
def use(host: Host, args: Namespace) -> str:
    from openprogram.agent.session_db import default_db
    from openprogram.store.session.files import validate_session_id
    from openprogram_magics.notebook import NotebookMeta
    from openprogram_magics.sessions import list_sessions

    sid = validate_session_id(args.session_id)
    if not default_db().exists(sid):
        raise CommandError(unknown_session(sid, [str(m["id"]) for m in list_sessions()]))
    before = host.current_session_id()
    host.set_session(NotebookMeta(sid))
    was = f" (it was on {before})" if before and before != sid else ""
    print(f"openprogram: this notebook now continues session {sid}{was}")
    return sid
