"""``agent_loop``: ask the model until it answers without calling a tool.

It runs in the caller's frame (``_call_id``): every exec is an ``llm`` node of that frame
and every tool call a ``tool`` node of it, so the next exec renders both as earlier steps
of the frame — the DAG is the loop's memory, there is no separate message list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from openprogram.agent.tools import Tool, checked_arguments, tool_spec
from openprogram.agentic_programming.function import get_call_id, using_call_id
from openprogram.context.nodes import make_call
from openprogram.context.outcome import finish
from openprogram.store.vars import get_store

if TYPE_CHECKING:
    from openprogram.agentic_programming.runtime import Runtime

EventCallback = Callable[[dict[str, Any]], None]

CONTINUE = (
    "The tool results are above as earlier steps. Answer the user's message now, "
    "or call another tool if you still need one."
)


@dataclass
class LoopResult:
    text: str
    iterations: int
    tool_calls: int


def agent_loop(
    content: Any,
    *,
    runtime: Runtime,
    tools: Mapping[str, Tool] | None = None,
    on_event: EventCallback | None = None,
    max_iterations: int = 8,
) -> LoopResult:
    """Exec ``content``; run the tools the model calls and exec again, at most
    ``max_iterations`` times (the last exec offers no tools, so the model has to answer)."""
    tools = dict(tools or {})
    specs = [tool_spec(name, fn) for name, fn in tools.items()] or None
    notify = on_event or (lambda _event: None)
    prompt, used = content, 0
    for iteration in range(1, max(1, max_iterations) + 1):
        last = iteration >= max_iterations
        text = runtime.exec(prompt, tools=None if last else specs)
        calls = [] if last else last_tool_calls()
        if not calls:
            notify({"type": "text", "text": text})
            return LoopResult(str(text or ""), iteration, used)
        for call in calls:
            run_tool(call, tools, notify)
            used += 1
        prompt = CONTINUE
    raise AssertionError("unreachable")


def last_tool_calls() -> list[dict[str, Any]]:
    """The tool calls of the frame's latest llm node (the Runtime records them there)."""
    writer = get_store()
    assert writer is not None
    for node_id in reversed(writer.session.children(get_call_id())):
        node = writer.get(node_id)
        if node.kind == "llm":
            return list(node.metadata.get("tool_calls") or [])
    return []


def run_tool(call: dict[str, Any], tools: Mapping[str, Tool], notify: EventCallback) -> None:
    """One ``tool`` node: the callable runs in its frame (an agentic tool nests under it);
    a failure is recorded on the node and shown to the model, not raised."""
    writer = get_store()
    assert writer is not None
    name, arguments = str(call.get("name")), call.get("arguments") or {}
    node = make_call("tool", name, input=arguments, caller=get_call_id(), call_id=call.get("id"))
    writer.append(node)
    notify({"type": "tool_call", "name": name, "arguments": node.input, "node_id": node.id})
    try:
        fn = tools.get(name)
        if fn is None:
            raise LookupError(f"no tool named {name!r}; the tools are {sorted(tools)}")
        kwargs = checked_arguments(name, fn, arguments)  # nothing runs on bad arguments
        with using_call_id(node.id):
            finish(node, output=fn(**kwargs))
    except BaseException as exc:
        finish(node, exc=exc)
        if not isinstance(exc, Exception):  # Ctrl-C: recorded, then it stops the turn
            writer.update(node)
            raise
    writer.update(node)
    notify({"type": "tool_result", "name": name, "node_id": node.id, "status": node.status})
