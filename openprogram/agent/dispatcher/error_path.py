"""The except branch: the failure lands on the reply node, the caller gets an error result.

Which node records it and where HEAD stays is ``TurnWriter.record_failure``'s business.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openprogram.agent.dispatcher.types import TurnResult
from openprogram.agentic_programming.function import is_cancellation
from openprogram.context.nodes import CANCELLED, ERROR
from openprogram.context.outcome import error_text

if TYPE_CHECKING:
    from openprogram.agent.dispatcher.prep import PreparedTurn


def handle_turn_error(prepared: PreparedTurn, exc: BaseException) -> TurnResult:
    status = CANCELLED if is_cancellation(exc) else ERROR
    error = error_text(exc)
    node = prepared.writer.record_failure(error, status)
    writer = prepared.writer
    return TurnResult(
        session_id=prepared.session_id,
        user_node_id=writer.head_for_finalize(),
        reply_node_id=writer.reply.id if writer.reply is not None else None,
        text=str(node.output or ""),
        status=status,
        error=error,
        created=prepared.created,
    )
