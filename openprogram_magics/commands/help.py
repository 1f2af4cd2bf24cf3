"""``%openprogram help``: every command, generated from the parser."""

from __future__ import annotations

from argparse import Namespace

from openprogram_magics.commands import Host, command, help_text


@command("help", "this text")
def help_(host: Host, args: Namespace) -> None:
    print(help_text())
