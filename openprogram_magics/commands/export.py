"""``%openprogram export FILE``: write the session as a git bundle."""

from __future__ import annotations

from argparse import Namespace

from openprogram_magics.commands import Host, arg, command, session_or_current


@command("export", "write the session as a git bundle", arg("output", metavar="FILE"))
def export(host: Host, args: Namespace) -> str:
    from openprogram_magics.sharing import export_session

    path = export_session(session_or_current(host, None), args.output)
    print(f"wrote {path} ({path.stat().st_size} bytes)")
    return str(path)
