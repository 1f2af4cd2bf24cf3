"""``dispatch_forced_tool_call``: run one tool (or agentic function) with given arguments,
no model, as a turn of its own.

The turn is a ``turn`` node named ``forced_tool`` (its text ``/call NAME(k=v, ...)``,
``metadata.forced_tool`` the tool's name) with the ``tool`` node under it, which runs the
callable exactly as the tool loop runs a model's call (arguments validated against the
signature; an agentic function nests its frame under the tool node; a failure is
recorded on the tool node).  Later turns render it like any turn: the call and its result.

This module bypasses the agent loop, so it writes HEAD itself (seed 003 §3: it and
``turn_writer.py`` are the only dispatcher modules that do): the turn node is appended
turn-level, after HEAD, after ``after``, or — a retry, ``retry_of`` — after the failed
turn's predecessor (a sibling of the failed turn; ``metadata.retry_of`` names it).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from openprogram.agent.dispatcher import error_path, prep, turn_context
from openprogram.agent.dispatcher.types import EventCallback, TurnRequest, TurnResult, emit
from openprogram.agentic_programming.provider import ToolCall
from openprogram.agentic_programming.tool_loop import run_tool
from openprogram.context.nodes import CANCELLED, COMPLETED, ERROR, make_call
from openprogram.context.outcome import is_cancellation
from openprogram.errors import UserError

if TYPE_CHECKING:
    from openprogram.agentic_programming.provider import ToolRun
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram.context.nodes import Call
    from openprogram.store.session.session import Session

Tool = Callable[..., Any]
TURN_NAME = "forced_tool"
SHOWN_ARGUMENT = 80  # characters of one argument in the turn's text


def dispatch_forced_tool_call(
    session_id: str | None,
    name: str,
    kwargs: Mapping[str, Any] | None = None,
    *,
    tools: Mapping[str, Tool] | None = None,
    runtime: Runtime | None = None,
    on_event: EventCallback | None = None,
    after: str | None = None,
    retry_of: str | None = None,
    agent_id: str = "main",
) -> TurnResult:
    """Run tool ``name`` with ``kwargs`` as a turn of ``session_id`` (None: a new session).

    ``name`` is a key of ``tools`` or an importable ``package.module:function``.  The
    result's ``text`` is the tool's output (or its error), ``reply_node_id`` the tool node;
    ``status`` is ``error`` (``reason`` ``tool``) when the tool failed.  Ctrl-C is recorded
    as ``cancelled`` and re-raised.  Approval rules (``approval_registry``) are not asked:
    the user asked for this call."""
    arguments = dict(kwargs or {})
    mcp = getattr(runtime, "mcp_tools", None)
    if mcp is not None and name not in (tools or {}) and ":" not in name:
        tools = {**mcp(), **(tools or {})}  # an MCP server's tool
    fn = resolve_tool(name, tools)
    text = call_text(name, arguments)
    request = TurnRequest(session_id, text, agent_id=agent_id, runtime=runtime, on_event=on_event)
    with turn_context.bind(request) as handle:  # the session minted or opened, as for a turn
        sid, created, nodes = handle.session_id, handle.created, handle.writer
        predecessor = anchor(nodes.session, after, retry_of)
        marks: dict[str, Any] = {"forced_tool": name}
        if retry_of is not None:
            marks["retry_of"] = retry_of
        node = make_call(
            "turn",
            TURN_NAME,
            input={"text": text, "tool": name, "arguments": arguments},
            predecessor=predecessor,
            status=COMPLETED,
            **marks,
        )
        turn = nodes.append(node, turn_level=True)  # this path moves HEAD itself (§3)
        emit(request, {"type": "user", "session_id": sid, "node_id": turn.id})
        try:
            call = ToolCall("forced", name, arguments)
            ran = run_tool(call, {name: fn}, lambda event: emit(request, event), caller=turn.id)
        except BaseException as exc:  # Ctrl-C: the tool node is already cancelled
            emit(request, {"type": "result", "result": _result(sid, created, turn, None, exc)})
            raise
    result = _result(sid, created, turn, ran, None)
    emit(request, {"type": "result", "result": result})
    return result


def resolve_tool(name: str, tools: Mapping[str, Tool] | None) -> Tool:
    """``tools[name]``, else the function ``package.module:function`` names."""
    if not isinstance(name, str) or not name:
        raise UserError(f"a forced tool call needs a tool name, got {name!r}")
    if tools and name in tools:
        return tools[name]
    if ":" in name:
        module_name, _, qualname = name.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise UserError(f"cannot import tool {name!r}: {exc}") from None
        if callable(obj):
            return obj  # type: ignore[no-any-return]
    known = ", ".join(sorted(tools or {})) or "none given"
    raise UserError(
        f"no tool named {name!r} (the tools: {known}; or name one as 'package.module:function')"
    )


def anchor(session: Session, after: str | None, retry_of: str | None) -> str | None:
    """Where the forced turn links: after ``retry_of``'s predecessor (a retry), after
    ``after``, else None (HEAD, resolved with the append)."""
    if retry_of is not None:
        if after is not None:
            raise UserError("a retry links after the failed turn's predecessor: give no after=")
        try:
            failed = session.get(retry_of)
        except KeyError:
            raise UserError(f"cannot retry {retry_of!r}: no such node in {session.id}") from None
        if failed.kind != "turn":
            raise UserError(f"cannot retry {retry_of!r}: it is a {failed.kind} node, not a turn")
        return failed.predecessor
    return prep.resolve_predecessor(session, after)


def call_text(name: str, arguments: Mapping[str, Any]) -> str:
    """``/call name(k=v, ...)``: the turn's text, what a later prompt shows of it."""
    shown = []
    for key, value in arguments.items():
        said = json.dumps(value, default=str, ensure_ascii=False)
        shown.append(
            f"{key}={said if len(said) <= SHOWN_ARGUMENT else said[:SHOWN_ARGUMENT] + '…'}"
        )
    return f"/call {name}({', '.join(shown)})"


def _result(
    sid: str, created: bool, turn: Call, ran: ToolRun | None, exc: BaseException | None
) -> TurnResult:
    if exc is not None:
        why = error_path.classify(exc)
        status = CANCELLED if is_cancellation(exc) else ERROR
        return TurnResult(
            sid,
            turn.id,
            None,
            "",
            status,
            str(exc) or type(exc).__name__,
            created,
            reason=why.reason,
        )
    assert ran is not None
    if ran.error is not None:
        return TurnResult(
            sid, turn.id, ran.node_id, ran.error, ERROR, ran.error, created, reason="tool"
        )
    output = ran.output
    text = output if isinstance(output, str) else json.dumps(output, default=str)
    return TurnResult(sid, turn.id, ran.node_id, text, COMPLETED, None, created)
