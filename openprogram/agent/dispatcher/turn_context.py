"""Stage 1: the turn's session and ContextVars.  This *is* ``session_context`` — no
dispatcher copy of it: it mints the session (``request.session_id`` None: a new ``chat_…``
id) or opens it (created under that id if missing), installs the turn state, and commits
the whole turn — the user message, the reply and everything under them — when the block
exits.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from openprogram.store.session.context import session_context

if TYPE_CHECKING:
    from openprogram.agent.dispatcher.types import TurnRequest
    from openprogram.store.session.context import SessionHandle

ID_PREFIX = "chat"  # a new session's id: chat_…
SOURCE = "chat"  # what a session a chat turn created says it came from


def bind(request: TurnRequest) -> AbstractContextManager[SessionHandle]:
    return session_context(
        request.session_id,
        agent_id=request.agent_id,
        runtime=request.runtime,
        id_prefix=ID_PREFIX,
        source=SOURCE,
        message=request.text,
    )
