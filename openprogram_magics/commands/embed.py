"""``%openprogram embed``: keep the session in the notebook (a bundle in the cell's output)."""

from __future__ import annotations

from argparse import Namespace
from typing import Any

from openprogram_magics.commands import Host, arg, command, megabytes, session_or_current


@command(
    "embed",
    "keep the session in this notebook (a bundle in this cell's output; save to keep)",
    arg("--max-mb", type=megabytes, default=10.0, metavar="MB", help="refuse above (default 10)"),
)
def embed(host: Host, args: Namespace) -> Any:
    from openprogram_magics.sharing import EmbeddedBundle, embed_payload

    sid = session_or_current(host, None)
    return EmbeddedBundle(embed_payload(sid, int(args.max_mb * 1048576)))
