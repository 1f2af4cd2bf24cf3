"""``%openprogram list``: the sessions on this machine, newest first."""

from __future__ import annotations

from argparse import Namespace
from typing import Any

from openprogram_magics.commands import Host, command


@command("list", "sessions on this machine, newest first")
def list_(host: Host, args: Namespace) -> list[dict[str, Any]]:
    from openprogram.view.inert import terminal_text
    from openprogram_magics.sessions import list_sessions

    sessions = list_sessions()
    for meta in sessions:  # a title may come from anyone's session: its escapes are shown
        shown = meta.get("place") or meta.get("title", "")  # the notebook where it is now
        line = f"{meta['id']:<28} turns={meta.get('turns', '?'):<5} {shown}"
        print(terminal_text(line))
    if not sessions:
        print("no sessions yet")
    return sessions
