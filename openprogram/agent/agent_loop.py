"""``agent_loop``: a chat reply — ask the model until it answers without calling a tool.

It is ``runtime.exec(content, tools=...)`` in the caller's frame (``_call_id``): the tool
loop is :mod:`openprogram.agentic_programming.tool_loop`, the one ``exec`` runs in any
frame.  Every model call is an ``llm`` node of that frame and every tool call a ``tool``
node under the ``llm`` node that asked for it; the next call renders both as earlier steps
of the frame — the DAG is the loop's memory, there is no separate message list.  The tools
run from the reply the provider returned (exact arguments), never from the stored copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from openprogram.agentic_programming.provider import Reply
from openprogram.agentic_programming.tool_args import Tool
from openprogram.agentic_programming.tool_loop import CONTINUE, EventCallback, run_tool

if TYPE_CHECKING:
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram.context.policy import ContextPolicy


__all__ = ["CONTINUE", "LoopResult", "agent_loop", "run_tool"]


@dataclass
class LoopResult:
    text: str
    iterations: int
    tool_calls: int
    finish_reason: str | None = None
    tool_names: tuple[str, ...] = ()  # the tools the loop ran, in order


def agent_loop(
    content: Any,
    *,
    runtime: Runtime,
    tools: Mapping[str, Tool] | None = None,
    on_event: EventCallback | None = None,
    max_iterations: int = 8,
    context: ContextPolicy | None = None,
) -> LoopResult:
    """Exec ``content`` with ``tools``: the tools the model calls run and it is asked again,
    at most ``max_iterations`` times (the last call offers no tools, so the model has to
    answer)."""
    notify = on_event or (lambda _event: None)
    reply = runtime.exec(
        content,
        tools=dict(tools or {}) or None,
        max_iterations=max_iterations,
        on_tool_event=notify,
        context=context,
    )
    text = str(reply or "")
    notify({"type": "text", "text": text})
    if not isinstance(reply, Reply):
        return LoopResult(text, 1, 0)
    names = tuple(run.call.name for run in reply.tool_runs)
    return LoopResult(text, reply.iterations, len(reply.tool_runs), reply.finish_reason, names)
