"""``%openprogram push [REMOTE]``: send the session to a git remote."""

from __future__ import annotations

from argparse import Namespace

from openprogram_magics.commands import Host, arg, command, remote_of, session_or_current


@command(
    "push",
    "send the session to refs/openprogram/sessions/ID of a git remote",
    arg("remote", nargs="?", metavar="REMOTE", help="URL, path or remote name (default origin)"),
)
def push(host: Host, args: Namespace) -> str:
    from dataclasses import replace

    from openprogram_magics.sharing import push_session

    meta = host.current_meta()
    message, remember = push_session(session_or_current(host, None), args.remote, remote_of(meta))
    if meta is not None and remember and remember != meta.remote:
        host.set_session(replace(meta, remote=remember))
    print(message)
    return message
