"""No secret leaves the kernel in an output: every message the kernel sends its frontend
(a cell's ``execute_result``, ``display_data`` and its updates, ``stream`` text, an
error's traceback, a widget's state) is masked on its way out.

The one place all of them pass is the kernel session's packer (``Session.pack``, which
serializes each part of a message before it is signed and sent); the extension wraps it.
What it packs is checked with one ``bytes in bytes`` test per known secret value
(:func:`openprogram.context.secrets.needs_masking`); only a message that holds one, or a
URL with a password, is packed again from its masked copy
(:func:`~openprogram.context.secrets.redact_shown`).  The program's own values stay
whole: only what is shown and saved is masked.

Outside a kernel (a terminal IPython) nothing leaves the process this way, and nothing is
installed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

MARK = "_openprogram_masks"  # set on a wrapped packer: the packer it wraps


def masking_packer(pack: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """``pack`` that serializes a masked copy of what holds a secret."""
    if getattr(pack, MARK, None) is not None:  # wrapped already
        return pack
    from openprogram.context.secrets import needs_masking, redact_shown

    def masked(obj: Any) -> bytes:
        data = pack(obj)
        if not needs_masking(data):
            return data
        return pack(redact_shown(obj))

    setattr(masked, MARK, pack)
    return masked


def kernel_sessions(shell: Any) -> list[Any]:
    """The jupyter_client sessions that send ``shell``'s messages (one, usually, shared
    by the kernel, its display publisher, display hook and output streams)."""
    holders = [
        getattr(shell, "kernel", None),
        getattr(shell, "display_pub", None),
        getattr(shell, "displayhook", None),
        sys.stdout,
        sys.stderr,
    ]
    found: list[Any] = []
    for holder in holders:
        session = getattr(holder, "session", None)
        if callable(getattr(session, "pack", None)) and all(s is not session for s in found):
            found.append(session)
    return found


def install(shell: Any) -> int:
    """Mask every message ``shell``'s kernel sends; returns how many sessions it wraps."""
    sessions = kernel_sessions(shell)
    for session in sessions:
        session.pack = masking_packer(session.pack)
    return len(sessions)


def uninstall(shell: Any) -> None:
    for session in kernel_sessions(shell):
        original = getattr(session.pack, MARK, None)
        if original is not None:
            session.pack = original
