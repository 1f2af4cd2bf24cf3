"""``%openprogram import FILE | --embedded``: a session from a bundle or the saved notebook."""

from __future__ import annotations

from argparse import Namespace

from openprogram_magics.commands import PROG, CommandError, Host, arg, command, megabytes


@command(
    "import",
    "import a session from a bundle, or --embedded from the saved notebook",
    arg("bundle", nargs="?", metavar="FILE"),
    arg("--embedded", action="store_true", help="the bundle `embed` saved in this notebook"),
    arg("--notebook", metavar="NB.ipynb", help="with --embedded: read this notebook"),
    arg("--as", dest="as_id", metavar="NEW_ID", help="import under another session id"),
    arg("--join", action="store_true", help="with --as: join NEW_ID's unrelated history"),
    arg("--max-mb", type=megabytes, default=10.0, metavar="MB", help="embedded size cap"),
)
def import_(host: Host, args: Namespace) -> str:
    from openprogram_magics.sharing import import_embedded, import_session

    if args.embedded == (args.bundle is not None):
        raise CommandError("usage: %openprogram import FILE | import --embedded")
    if args.embedded:
        got = import_embedded(args.notebook, args.as_id, int(args.max_mb * 1048576), args.join)
    else:
        got = import_session(args.bundle, args.as_id, args.join)
    print(got.describe() + f"; `{PROG} use {got.session_id}` continues it here")
    return got.session_id
