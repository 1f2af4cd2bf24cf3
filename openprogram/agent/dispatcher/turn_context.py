"""Stage 3: the turn's ContextVars.  This *is* ``session_context`` — no dispatcher copy of it.

It reuses the node writer that persisted the user message, so the message, the reply and
everything under it are one turn of the session and one commit (made when the block exits).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from openprogram.store.session.context import session_context

if TYPE_CHECKING:
    from openprogram.agent.dispatcher.prep import PreparedTurn
    from openprogram.agent.dispatcher.types import TurnRequest
    from openprogram.store.session.context import SessionHandle


@contextmanager
def bind(request: TurnRequest, prepared: PreparedTurn) -> Iterator[SessionHandle]:
    with session_context(
        prepared.session_id,
        agent_id=request.agent_id,
        runtime=request.runtime,
        source="chat",
        message=request.text,
        writer=prepared.writer.nodes,
    ) as handle:
        yield handle
