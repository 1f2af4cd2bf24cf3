"""``%openprogram new [--id ID]``: a fresh session for this notebook."""

from __future__ import annotations

from argparse import Namespace

from openprogram_magics.commands import PROG, CommandError, Host, arg, command


@command(
    "new",
    "start a fresh session for this notebook",
    arg("--id", dest="session_id", default=None, metavar="ID", help="with this id"),
)
def new(host: Host, args: Namespace) -> str:
    from openprogram.agent.session_db import default_db
    from openprogram.store.session.files import mint_session_id, validate_session_id
    from openprogram_magics.notebook import NotebookMeta

    sid = mint_session_id("nb") if args.session_id is None else args.session_id
    if args.session_id is not None and default_db().exists(validate_session_id(sid)):
        raise CommandError(f"session {sid} exists; `{PROG} use {sid}` continues it")
    meta = NotebookMeta(sid)
    host.set_session(meta)
    print(f"openprogram: new session {meta.session_id} for this notebook")
    return meta.session_id
