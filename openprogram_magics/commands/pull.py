"""``%openprogram pull [REMOTE]``: fetch the session from a git remote and join it."""

from __future__ import annotations

from argparse import Namespace

from openprogram_magics.commands import Host, arg, command, remote_of, session_or_current


@command(
    "pull",
    "fetch the session from a git remote and join it (both lines kept)",
    arg("remote", nargs="?", metavar="REMOTE", help="URL, path or remote name (default origin)"),
)
def pull(host: Host, args: Namespace) -> str:
    from openprogram_magics.sharing import pull_session

    meta = host.current_meta()
    got = pull_session(session_or_current(host, None), args.remote, remote_of(meta))
    print(got.describe())
    return got.status
