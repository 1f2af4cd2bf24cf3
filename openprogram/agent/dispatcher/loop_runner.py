"""Stage 4: run the agent loop inside the reply's frame, blocking until it answers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from openprogram.agent.agent_loop import agent_loop
from openprogram.agent.dispatcher.types import emit
from openprogram.agentic_programming.function import using_call_id
from openprogram.context.policy import ContextPolicy

# a chat turn whose prompt overflows the model's window compacts (compaction.retry_on_overflow)
# instead of the Runtime's retry with half the history
COMPACTS = ContextPolicy(overflow="raise")

if TYPE_CHECKING:
    from openprogram.agent.agent_loop import LoopResult
    from openprogram.agent.dispatcher.types import TurnRequest
    from openprogram.context.nodes import Call
    from openprogram.store.session.context import SessionHandle


def run_loop_blocking(request: TurnRequest, handle: SessionHandle, reply: Call) -> LoopResult:
    assert handle.runtime is not None  # session_context always installs one
    with using_call_id(reply.id):  # the loop's llm and tool nodes hang under the reply
        return agent_loop(
            request.text,
            runtime=handle.runtime,
            tools=request.tools,
            on_event=lambda event: emit(request, event),
            max_iterations=request.max_iterations,
            context=COMPACTS,
        )
