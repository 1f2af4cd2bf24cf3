"""``%openprogram auto on|off``: every following cell is a turn."""

from __future__ import annotations

from argparse import Namespace

from openprogram_magics.commands import Host, arg, command


@command(
    "auto",
    "make every following cell a turn (no %%openprogram needed)",
    arg("state", choices=["on", "off"]),
)
def auto(host: Host, args: Namespace) -> None:
    host.auto = args.state == "on"
    print(f"openprogram: every cell is a turn: {args.state}")
