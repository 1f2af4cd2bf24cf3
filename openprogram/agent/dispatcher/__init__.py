"""The chat-turn execution path (seed 003), split by responsibility.

This module only orchestrates: :func:`process_user_turn` is the entry point of every
caller, :func:`_process_turn_once` runs the numbered stages, each a named call into a
sibling module:

1-2  ``prep.prepare_turn``              session, predecessor, the user message persisted
3    ``turn_context.bind``              ``session_context`` (commits the turn on exit)
3b   ``TurnWriter.open_placeholder``    the ``reply`` node, running
4    ``_run_loop_blocking``             the agent loop in the reply's frame
5    ``persistence.persist_reply``      the reply's text
6    ``finalize.finalize_turn``         completed, auto-title, the result
7    the ``result`` event, after the commit
err  ``error_path.handle_turn_error``   the failure on the reply, an error result

The test seam ``_run_loop_blocking`` is a module global looked up at call time, so
``monkeypatch.setattr(D, "_run_loop_blocking", ...)`` is seen by the pipeline.
"""

from __future__ import annotations

from openprogram.agent.dispatcher import (
    error_path,
    finalize,
    persistence,
    prep,
    turn_context,
)
from openprogram.agent.dispatcher.loop_runner import run_loop_blocking as _run_loop_blocking
from openprogram.agent.dispatcher.turn_writer import TurnWriter
from openprogram.agent.dispatcher.types import (
    DEFAULT_SYSTEM,
    Event,
    EventCallback,
    TurnRequest,
    TurnResult,
    emit,
)

__all__ = [
    "DEFAULT_SYSTEM",
    "Event",
    "EventCallback",
    "TurnRequest",
    "TurnResult",
    "TurnWriter",
    "process_user_turn",
]


def process_user_turn(request: TurnRequest) -> TurnResult:
    """Run one user message through the agent; the reply (or the failure) is persisted
    either way.  ``KeyboardInterrupt`` is recorded as ``cancelled``, then re-raised."""
    return _process_turn_once(request)


def _process_turn_once(request: TurnRequest) -> TurnResult:
    prepared = prep.prepare_turn(request)  # 1-2
    emit(request, {"type": "user", "session_id": prepared.session_id, "node_id": prepared.user.id})
    with turn_context.bind(request, prepared) as handle:  # 3
        try:
            reply = prepared.writer.open_placeholder(request.agent_id, request.system)  # 3b
            emit(request, {"type": "reply_started", "node_id": reply.id})
            outcome = _run_loop_blocking(request, handle, reply)  # 4
            persistence.persist_reply(prepared.writer, outcome)  # 5
            result = finalize.finalize_turn(prepared)  # 6
        except BaseException as exc:  # err
            result = error_path.handle_turn_error(prepared, exc)
            if not isinstance(exc, Exception):
                raise
    emit(request, {"type": "result", "result": result})  # 7
    return result
