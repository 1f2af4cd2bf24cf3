"""``%openprogram diff [A] [B]``: pair the calls of two turns, lines or runs."""

from __future__ import annotations

from argparse import Namespace
from typing import Any

from openprogram_magics.commands import CommandError, Host, arg, command, session_or_current


@command(
    "diff",
    "pair the calls of two turns (or --lines, --runs) and say what changed and why",
    arg("a", nargs="?", metavar="A", help="a turn: node id, 5, 5@alice, head; --runs: a run id"),
    arg("b", nargs="?", metavar="B"),
    arg("--lines", action="store_true", help="the lines (branches) ending at A and B"),
    arg("--runs", action="store_true", help="two runs of this notebook (default: the last two)"),
    arg("--all", action="store_true", help="list the unchanged calls too"),
    arg("--widget", action="store_true", help="side by side in a widget (pairs open and close)"),
    arg("--session", default=None, metavar="ID", help="another session than the notebook's"),
)
def diff(host: Host, args: Namespace) -> Any:
    from openprogram.agent.session_db import default_db
    from openprogram.compare.sessions import diff_session, mode_of
    from openprogram_magics.diff_view import DiffView

    sid = session_or_current(host, args.session)
    if not default_db().exists(sid):
        raise CommandError(f"session {sid} has no turns yet")
    report = diff_session(default_db().open(sid), args.a, args.b, mode_of(args.lines, args.runs))
    title = f"openprogram diff · session {sid}"
    if args.widget:
        from openprogram_magics.diff_widget import DiffWidget, SavedDiff

        return SavedDiff(DiffWidget(report, title=title), all_rows=args.all)
    return DiffView(report, title=title, all_rows=args.all)
