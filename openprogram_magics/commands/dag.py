"""``%openprogram dag [ID] [--last N]``: the whole session's DAG, stale turns marked."""

from __future__ import annotations

from argparse import Namespace
from typing import Any

from openprogram_magics.commands import Host, arg, command, session_or_current


@command(
    "dag",
    "draw the whole session DAG",
    arg("session_id", nargs="?", metavar="ID"),
    arg("--last", type=int, default=50, metavar="N", help="unfold only the last N turns"),
)
def dag(host: Host, args: Namespace) -> Any:
    from openprogram_magics.commands.stale import marked_dag  # stale turns marked
    from openprogram_magics.widget import SavedDag

    return SavedDag(marked_dag(host, session_or_current(host, args.session_id), args.last))
