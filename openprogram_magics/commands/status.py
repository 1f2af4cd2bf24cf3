"""``%openprogram status``: the notebook's session, where it is stored, and its provider."""

from __future__ import annotations

from argparse import Namespace
from typing import Any

from openprogram_magics.commands import PROG, Host, command


@command("status", "session id, where it is stored, turns, HEAD, provider")
def status(host: Host, args: Namespace) -> dict[str, Any]:
    from openprogram_magics.sessions import session_status

    rt = host.runtime()
    info = session_status(host.current_session_id(), rt, host.auto)
    lines = [f"{k:>10}: {v}" for k, v in info.items()]
    resolution = getattr(host, "resolution", None)  # each setting with the layer it came from
    if resolution is not None:
        lines = [line for line in lines if line.split(":")[0].strip() not in ("provider", "model")]
        for line in resolution().lines():
            label, value = line.split(": ", 1)
            lines.append(f"{label:>10}: {value}")
    if not rt.configured:
        lines.append(f"  provider: none — `{PROG} provider test` works offline")
    print("\n".join(lines))
    return info
