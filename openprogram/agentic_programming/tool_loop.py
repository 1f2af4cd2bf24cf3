"""The tool loop: ``runtime.exec(content, tools=[...])`` runs the tools the model calls.

One implementation, used by ``exec`` in any frame (a cell, a script, an agentic function,
``llm()``) and by the chat dispatcher's agent loop.  Round *i* is one model call, an ``llm``
node of the calling frame like any exec (so retries, the budget, pacing, streaming and the
gates work per call); each tool that reply calls is a ``tool`` node **under that llm node**
(an agentic function used as a tool nests under its tool node).  A tool runs with the
arguments exactly as the provider parsed them (:attr:`Reply.tool_calls`); the nodes keep a
redacted copy for people and nothing here reads it back.

A tool's result, or its error (it raised, its arguments did not validate, no tool has that
name), goes back to the model as an earlier step of the frame: the next round renders the
frame's steps, so the DAG is the loop's memory.  Tools are offered on rounds 1..N-1 and
round N is sent none, so the model has to answer; when the loop gets that far the last
``llm`` node's ``finish_reason`` is ``max_iterations`` (the provider's own is kept as
``model_finish_reason``), as is the returned reply's.  ``tool_choice`` applies to the first
round only (a forced tool would otherwise be called forever).

Bad arguments are the model's to fix, a bounded number of times: arguments that are not
JSON or not a JSON object (the provider's :attr:`ToolCall.problem`), or that fail the
tool's signature (a wrong or missing key, a wrong type: :func:`checked_arguments`) are
refused before the tool runs and the refusal goes back as that tool's error.  A round in
which every call had bad arguments counts once; after ``MAX_ARGUMENT_RETRIES`` (2) such
rounds in one exec, the next one raises :class:`~openprogram.errors.ToolArgumentsError`
naming the tool and the last problem (the turn ends there, with the tool nodes recorded).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from openprogram.agentic_programming.function import get_call_id, using_call_id
from openprogram.agentic_programming.provider import Reply, ToolCall, ToolRun, add_usage
from openprogram.agentic_programming.tool_args import (
    NODE_MARKS,
    Tool,
    checked_arguments,
    tool_spec,
)
from openprogram.context.nodes import make_call
from openprogram.context.outcome import finish
from openprogram.errors import ToolArgumentsError, UserError
from openprogram.store.vars import get_store

DEFAULT_MAX_ITERATIONS = 8
MAX_ARGUMENT_RETRIES = 2  # rounds of bad arguments sent back to fix; the next one raises
MAX_ITERATIONS = "max_iterations"
CHOICE_WORDS = ("auto", "none", "required")

CONTINUE = (
    "The tool results are above as earlier steps. Answer the user's message now, "
    "or call another tool if you still need one."
)
FINAL = (
    "The tool results are above as earlier steps. No more tools can be called: answer "
    "the user's message now with what you have."
)

#: What a run tells its listener as it goes: ``{"type": "tool_call" | "tool_result" | ..., ...}``.
#: The one definition: the agent loop, the dispatcher and the process runner hear the same.
Event = dict[str, Any]
EventCallback = Callable[[Event], None]
# ask(content, tool specs or None, tool_choice, iteration) -> (reply, the gated value)
Ask = Callable[[Any, "list[dict[str, Any]] | None", "str | None", int], "tuple[Reply, Any]"]


def runnable_tools(tools: Any) -> dict[str, Tool] | None:
    """The callables of ``tools`` by name, or None when ``tools`` holds only JSON specs
    (dicts: sent to the provider as they are, the caller handles the calls) or nothing.

    ``tools`` is a list of callables (named by ``__name__``), a mapping name -> callable,
    or a list of spec dicts; a mix of callables and specs, or anything else, is refused."""
    if tools is None:
        return None
    if isinstance(tools, Mapping):
        named = dict(tools)
        bad = [k for k, v in named.items() if not isinstance(k, str) or not callable(v)]
        if bad:
            raise UserError(f"tools= maps names to callables; {bad[0]!r} is not one")
        return named or None
    if isinstance(tools, str | bytes) or not hasattr(tools, "__iter__"):
        raise UserError(f"tools= takes a list of functions, got {type(tools).__name__}")
    items = list(tools)
    specs = [t for t in items if isinstance(t, Mapping)]
    if len(specs) == len(items):
        return None
    if specs:
        raise UserError("tools= takes functions (the loop runs them) or JSON specs, not both")
    out: dict[str, Tool] = {}
    for fn in items:
        if not callable(fn):
            raise UserError(f"tools= takes functions; {fn!r} is not callable")
        name = getattr(fn, "__name__", None)
        if not isinstance(name, str) or not name.isidentifier():
            raise UserError(f"tool {fn!r} has no usable name: pass tools={{'name': fn}}")
        if name in out:
            raise UserError(f"two tools are named {name!r}: pass tools={{'name': fn, ...}}")
        out[name] = fn
    return out


def checked_choice(tool_choice: str | None, names: list[str]) -> str | None:
    """``tool_choice`` if it is ``auto``, ``none``, ``required`` or one of ``names``."""
    if tool_choice is None or tool_choice in CHOICE_WORDS or tool_choice in names:
        return tool_choice
    raise UserError(
        f"tool_choice={tool_choice!r} is none of {', '.join(CHOICE_WORDS)} or a tool's "
        f"name ({', '.join(names) or 'no tools given'})"
    )


def checked_bound(max_iterations: int | None) -> int:
    if max_iterations is None:
        return DEFAULT_MAX_ITERATIONS
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, int):
        raise UserError(f"max_iterations must be a whole number, got {max_iterations!r}")
    if max_iterations < 1:
        raise UserError(f"max_iterations must be at least 1, got {max_iterations}")
    return max_iterations


def run_tool_loop(
    ask: Ask,
    content: Any,
    tools: Mapping[str, Tool],
    *,
    tool_choice: str | None = None,
    max_iterations: int | None = None,
    on_event: EventCallback | None = None,
) -> tuple[Reply, Any]:
    """Ask, run the tools the reply calls, ask again — until the model answers without a
    tool call or ``max_iterations`` model calls were made.  Returns the last reply (with
    every :class:`ToolRun`, the summed usage and the iteration count) and its gated value."""
    bound = checked_bound(max_iterations)
    names = list(tools)
    choice = checked_choice(tool_choice, names)
    specs = [tool_spec(name, fn) for name, fn in tools.items()]
    notify = on_event or _quiet
    prompt, runs, usage = content, [], None
    refused = 0  # rounds whose every tool call had bad arguments
    for iteration in range(1, bound + 1):
        last = iteration >= bound
        offered = None if last else specs
        reply, value = ask(prompt, offered, choice if iteration == 1 else None, iteration)
        usage = add_usage(usage, reply.usage)
        finish_reason = reply.finish_reason
        if last:
            finish_reason = _mark_bound(reply)
        elif reply.tool_calls:
            ran = [run_tool(call, tools, notify, caller=reply.node_id) for call in reply.tool_calls]
            runs.extend(ran)
            if all(run.bad_arguments for run in ran):
                refused += 1
                if refused > MAX_ARGUMENT_RETRIES:
                    raise ToolArgumentsError(
                        f"the model called tools with bad arguments {refused} times in a row "
                        f"(sent back {MAX_ARGUMENT_RETRIES} times to fix); the last: "
                        f"{ran[-1].error}"
                    )
            else:
                refused = 0
            prompt = FINAL if iteration + 1 >= bound else CONTINUE
            continue
        final = Reply(
            reply.text,
            tool_calls=reply.tool_calls,
            tool_runs=runs,
            usage=usage,
            finish_reason=finish_reason,
            model=reply.model,
            node_id=reply.node_id,
            iterations=iteration,
        )
        return final, final if value is reply else value
    raise AssertionError("unreachable")


def _mark_bound(reply: Reply) -> str:
    """The last round was reached: its ``llm`` node says so (the provider's reason kept)."""
    writer = get_store()
    if writer is not None and reply.node_id is not None:
        node = writer.get(reply.node_id)
        meta = node.metadata
        meta["model_finish_reason"] = meta.get("finish_reason")
        meta["finish_reason"] = MAX_ITERATIONS
        writer.update(node)
    return MAX_ITERATIONS


def _quiet(_event: dict[str, Any]) -> None:
    return None


def run_tool(
    call: ToolCall | Mapping[str, Any],
    tools: Mapping[str, Tool],
    notify: EventCallback = _quiet,
    *,
    caller: str | None = None,
) -> ToolRun:
    """One ``tool`` node under ``caller`` (default: the current frame): the callable runs in
    its frame with the call's exact arguments; a failure (it raised, bad arguments, no such
    tool) is recorded on the node and returned for the model to see, not raised —
    except Ctrl-C, which is recorded and stops the turn."""
    if not isinstance(call, ToolCall):
        arguments = call.get("arguments")
        call = ToolCall(
            str(call.get("id") or ""),
            str(call.get("name")),
            arguments if isinstance(arguments, dict) else {},
            None if isinstance(arguments, dict) else "the arguments are not a JSON object",
        )
    writer = get_store()
    assert writer is not None
    name, arguments = call.name, call.arguments
    parent = caller if caller is not None else get_call_id()
    marks = getattr(tools.get(name), NODE_MARKS, None) or {}  # an MCP tool: its server
    node = make_call("tool", name, input=arguments, caller=parent, call_id=call.id or None, **marks)
    writer.append(node)
    notify({"type": "tool_call", "name": name, "arguments": node.input, "node_id": node.id})
    error: str | None = None
    bad = False
    try:
        fn = tools.get(name)
        if fn is None:
            raise LookupError(f"no tool named {name!r}; the tools are {sorted(tools)}")
        bad = True
        if call.problem is not None:  # the provider could not read them
            raise ToolArgumentsError(f"bad arguments for tool {name!r}: {call.problem}")
        kwargs = checked_arguments(name, fn, arguments)  # nothing runs on bad arguments
        bad = False
        with using_call_id(node.id):
            result = fn(**kwargs)
            if inspect.isawaitable(result):
                result = _await(result)
        finish(node, output=result)
    except BaseException as exc:
        finish(node, exc=exc)
        error = str(node.metadata.get("error") or exc)
        if not isinstance(exc, Exception):  # Ctrl-C: recorded, then it stops the turn
            writer.update(node)
            raise
        result = None
    writer.update(node)
    notify({"type": "tool_result", "name": name, "node_id": node.id, "status": node.status})
    return ToolRun(call, result, error, node.id, bad_arguments=bad)


def _await(awaitable: Any) -> Any:
    """An async tool's result, run to completion on a worker thread (the caller may be
    inside a running event loop, as in Jupyter)."""
    import asyncio
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    async def wait() -> Any:
        return await awaitable

    context = contextvars.copy_context()
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(context.run, asyncio.run, wait()).result()
