"""``%openprogram context [--full]``: what the next call is sent of earlier turns."""

from __future__ import annotations

from argparse import Namespace

from openprogram_magics.commands import Host, arg, command


@command(
    "context",
    "what the next call in a cell of this notebook is sent of earlier turns, and the policy",
    arg("--full", action="store_true", help="do not clip the messages"),
)
def context(host: Host, args: Namespace) -> list[str]:
    from openprogram_magics.sessions import context_lines

    lines = context_lines(host.current_meta(), host.runtime(), full=args.full)
    print("\n".join(lines))
    return lines
