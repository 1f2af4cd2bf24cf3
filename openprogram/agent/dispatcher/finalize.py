"""Stage 6: close the reply, title a new session after its first message, build the result.

The commit itself is made by ``session_context`` when stage 3's block exits.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from openprogram.agent.dispatcher.titles import maybe_auto_title
from openprogram.agent.dispatcher.types import TurnResult
from openprogram.context.nodes import COMPLETED
from openprogram.context.outcome import finish

if TYPE_CHECKING:
    from openprogram.agent.dispatcher.prep import PreparedTurn


def finalize_turn(prepared: PreparedTurn) -> TurnResult:
    writer = prepared.writer
    reply = writer.reply
    assert reply is not None, "open_placeholder first"
    finish(reply)  # its duration is wall-clock: the reply began with the turn, maybe elsewhere
    reply.metadata["duration_ms"] = round((time.time() - reply.created_at) * 1000, 3)
    writer.nodes.update(reply)
    maybe_auto_title(prepared)
    return TurnResult(
        session_id=prepared.session_id,
        user_node_id=writer.head_for_finalize(),
        reply_node_id=reply.id,
        text=str(reply.output or ""),
        status=COMPLETED,
        created=prepared.created,
        note=reply.metadata.get("note"),
    )
