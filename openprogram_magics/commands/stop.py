"""``%openprogram stop``: stop the background run after its current call (again: now)."""

from __future__ import annotations

from argparse import Namespace

from openprogram_magics.commands import CommandError, Host, command


@command("stop", "stop the background run after its current call (again: kill it now)")
def stop(host: Host, args: Namespace) -> str:
    run = getattr(host, "background", None)
    if run is None:
        raise CommandError(
            "no background run in this kernel (%%openprogram --background starts one)"
        )
    said = str(run.stop())
    print(f"openprogram: {said}")
    return said
