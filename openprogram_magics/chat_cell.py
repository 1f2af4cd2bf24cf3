"""``%%openprogram --chat``: the cell's text is a chat message to the agent (filled in by
the chat step)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openprogram_magics.magics import OpenProgramMagics


def run_chat_cell(magics: OpenProgramMagics, args: str, body: str, source: str) -> Any:
    from IPython.core.error import UsageError

    raise UsageError("%%openprogram --chat is not available yet")
