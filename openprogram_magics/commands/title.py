"""``%openprogram title [TEXT]``: show or set the session's title."""

from __future__ import annotations

from argparse import Namespace

from openprogram_magics.commands import CommandError, Host, arg, command, session_or_current


@command(
    "title",
    "show or set the session's title (a title you set is never replaced)",
    arg("text", nargs="*", metavar="TEXT"),
)
def title(host: Host, args: Namespace) -> str:
    from openprogram.agent.dispatcher.titles import rename, title_of
    from openprogram.agent.session_db import default_db
    from openprogram.view.inert import terminal_text

    sid = session_or_current(host, None)
    if not args.text:
        meta = default_db().open(sid).meta if default_db().exists(sid) else {"id": sid}
        shown = title_of(meta) or "(none yet)"
        source = meta.get("title_source")
        print(terminal_text(f"title: {shown}" + (f" ({source})" if source else "")))
        return shown
    try:
        named = rename(sid, " ".join(args.text))
    except Exception as exc:
        raise CommandError(str(exc)) from None
    print(terminal_text(f"openprogram: session {sid} is titled {named!r}"))
    return named
