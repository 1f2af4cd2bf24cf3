"""The chat-turn execution path (seed 003), split by responsibility.

This module only orchestrates: :func:`process_user_turn` is the entry point of every
caller, :func:`_process_turn_once` runs the numbered stages, each a named call into a
sibling module:

1    ``turn_context.bind``              ``session_context``: the session minted or opened,
                                        the turn's ContextVars (commits the turn on exit)
2    ``prep.prepare_turn``              predecessor, the user message persisted
3a   ``compaction.before_turn``         a summary node when the history would not fit
3b   ``TurnWriter.open_placeholder``    the ``reply`` node, running
3c   ``runtime_attach.runtime_blocks``  agentic tools as child-process runtime blocks
     ``approval_registry.gated``        (``tools_in_process``); tools the rules hold ask first
4    ``_run_loop_blocking``             the agent loop in the reply's frame (a context
                                        overflow: one compaction, one retry)
5    ``persistence.persist_reply``      the reply's text
6    ``finalize.finalize_turn``         completed, first title, the result
6b   ``goal.after_turn``                the goal's judge (a goal run: ``goal.keep_working``)
6c   ``titles.after_turn``              a model-written title after a few turns
7    the ``result`` event, after the commit
err  ``error_path.handle_turn_error``   the failure on the reply, an error result

The test seam ``_run_loop_blocking`` is a module global looked up at call time, so
``monkeypatch.setattr(D, "_run_loop_blocking", ...)`` is seen by the pipeline.

Callers import the seed's surface (003 §5) from here: ``process_user_turn``,
``TurnRequest``, ``TurnResult``, ``dispatch_forced_tool_call``, ``trigger_compaction``,
``approval_registry`` and ``_wrap_agentic_runtime_block`` (an agentic function as a tool
whose every call runs in a child process).
"""

from __future__ import annotations

from dataclasses import replace

from openprogram.agent.dispatcher import (
    compaction,
    error_path,
    finalize,
    goal,
    persistence,
    prep,
    runtime_attach,
    titles,
    turn_context,
)
from openprogram.agent.dispatcher.approval import ApprovalRegistry, approval_registry
from openprogram.agent.dispatcher.compaction import trigger_compaction
from openprogram.agent.dispatcher.forced_tool import dispatch_forced_tool_call
from openprogram.agent.dispatcher.loop_runner import run_loop_blocking as _run_loop_blocking
from openprogram.agent.dispatcher.runtime_attach import _wrap_agentic_runtime_block
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
    "ApprovalRegistry",
    "Event",
    "EventCallback",
    "TurnRequest",
    "TurnResult",
    "TurnWriter",
    "_wrap_agentic_runtime_block",
    "approval_registry",
    "dispatch_forced_tool_call",
    "process_user_turn",
    "trigger_compaction",
]


def process_user_turn(request: TurnRequest) -> TurnResult:
    """Run one user message through the agent; the reply (or the failure) is persisted
    either way.  ``KeyboardInterrupt`` is recorded as ``cancelled``, then re-raised.
    With ``request.goal`` the goal's continuation turns follow (``goal.keep_working``)."""
    if request.goal is not None:
        return goal.keep_working(request, _process_turn_once)
    return _process_turn_once(request)


def _process_turn_once(request: TurnRequest, state: goal.GoalState | None = None) -> TurnResult:
    with turn_context.bind(request) as handle:  # 1
        prepared = prep.prepare_turn(request, handle)  # 2
        user = {"type": "user", "session_id": prepared.session_id, "node_id": prepared.user.id}
        emit(request, user)
        try:
            summary = compaction.before_turn(prepared)  # 3a, None when the history fits
            reply = prepared.writer.open_placeholder(request.agent_id, request.system)  # 3b
            emit(request, {"type": "reply_started", "node_id": reply.id})
            mcp = getattr(handle.runtime, "mcp_tools", None)  # 3c, with its MCP servers' tools
            blocks = runtime_attach.runtime_blocks(request)
            tools = approval_registry.gated({**(mcp(strict=False) if mcp else {}), **blocks})
            tooled = replace(request, tools=tools)
            outcome = compaction.retry_on_overflow(  # 4, once more after a compaction
                prepared, lambda: _run_loop_blocking(tooled, handle, reply)
            )
            persistence.persist_reply(prepared.writer, outcome)  # 5
            result = finalize.finalize_turn(prepared)  # 6
            result.compacted = summary or compaction.compacted_in(prepared)
            if state is not None:  # 6b: the goal's one judge call
                result.goal = goal.after_turn(prepared, request, result, state).to_dict()
            titles.after_turn(prepared)  # 6c: a model-written title after a few turns
        except BaseException as exc:  # err
            result = error_path.handle_turn_error(prepared, exc)
            if not isinstance(exc, Exception):
                raise
    emit(request, {"type": "result", "result": result})  # 7
    return result
