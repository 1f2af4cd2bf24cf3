"""The kernel side of a map's nodes, pure: what a worker may see, and how what it sends
back becomes part of the session.

* :func:`snapshot` — the nodes a prompt rendered on a worker may show: the frame the items
  hang under with its callers, and the turns before it with the calls they made (light
  copies: no prompts, no tracebacks).
* :func:`adopt` — the nodes a worker recorded, given new ids (links remapped) and the
  worker's name, ready to be appended in item order.
* :func:`attempt_node` — a node for an attempt that sent nothing back (its worker died,
  it was cancelled, it could not be submitted).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from openprogram.context.graph import Graph
from openprogram.context.nodes import INTERRUPTED, OPEN_STATUSES, Call, make_call, new_id

Lookup = Callable[[str], Call | None]
Children = Callable[[str | None], list[str]]

_LIGHT_META = ("kind", "status", "error", "rejected")
_TURN_PARTS = ("function", "tool", "reply")  # what render shows of an earlier turn's calls


def _light(call: Call, *, keep_doc: bool = False) -> Call:
    keep = (*_LIGHT_META, "doc") if keep_doc else _LIGHT_META
    meta = {k: call.metadata[k] for k in keep if k in call.metadata}
    return Call(
        id=call.id,
        role=call.role,
        name=call.name,
        seq=call.seq,
        turn=call.turn,
        input=call.input,
        output=call.output,
        caller=call.caller,
        predecessor=call.predecessor,
        metadata=meta,
        created_at=call.created_at,
    )


def snapshot(
    lookup: Lookup,
    children: Children,
    head: str | None,
    anchor: str | None,
    *,
    max_turns: int,
    steps: bool,
) -> list[Call]:
    """What an item running under ``anchor`` may show in a prompt (see module doc);
    ``steps``: also the anchor's finished children (an exec made directly in that frame)."""
    graph = Graph(lookup, children, head)
    out: dict[str, Call] = {}
    for node in graph.ancestors(anchor):
        out[node.id] = _light(node, keep_doc=True)
    visible = graph.visible_for(anchor, max_turns=max_turns)
    for node in visible.history:
        out.setdefault(node.id, _light(node))
        for kid_id in children(node.id):
            kid = lookup(kid_id)
            if kid is not None and kid.kind in _TURN_PARTS:
                out.setdefault(kid.id, _light(kid))
    if steps:
        for node in visible.steps:
            out.setdefault(node.id, _light(node))
    return sorted(out.values(), key=lambda c: c.seq)


def adopt(
    nodes: list[Call],
    *,
    anchor: str | None,
    index: int,
    worker: str,
    worker_name: str | None,
    attempt: int = 1,
) -> list[Call]:
    """``nodes`` (as a worker recorded them, in order) with fresh ids and remapped links.

    The item's own nodes (those directly under ``anchor``) get ``item`` (and ``attempt``
    when it is a retry); every node gets the worker.  A node a worker left open (a thread
    of the function still running) is closed ``interrupted``.  Turn-level nodes (no
    anchor) lose their predecessor: the store chains them after HEAD when appended.
    """
    ids = {call.id: new_id() for call in nodes}
    for call in nodes:
        call.id = ids[call.id]
        call.caller = ids.get(call.caller, call.caller) if call.caller else None
        if call.caller is None:
            call.predecessor = None
        elif call.predecessor is not None:
            call.predecessor = ids.get(call.predecessor, call.predecessor)
        meta = call.metadata
        meta["worker"] = worker
        if worker_name is not None:
            meta["worker_name"] = worker_name
        if call.caller == anchor:
            meta["item"] = index
            if attempt > 1:
                meta["attempt"] = attempt
        if call.status in OPEN_STATUSES:
            meta["status"] = INTERRUPTED
            meta["error"] = "still open when its item's result was sent back"
    return nodes


def inputs_of(fn: Callable[..., Any], item: Any) -> dict[str, Any]:
    """The inputs a function node of ``fn(item)`` records (as ``@agentic_function`` does)."""
    try:
        bound = inspect.signature(fn).bind_partial(item).arguments
    except (TypeError, ValueError):
        return {"item": item}
    return {k: v for k, v in bound.items() if k != "runtime"}


def attempt_node(
    label: str,
    inputs: dict[str, Any],
    *,
    anchor: str | None,
    index: int,
    status: str,
    reason: str,
    attempt: int = 1,
    worker: str | None = None,
    worker_name: str | None = None,
) -> Call:
    """A ``function`` node for an attempt of item ``index`` that sent no node back."""
    node = make_call("function", label, input=inputs, caller=anchor, status=status)
    node.metadata.update(item=index, error=reason)
    if attempt > 1:
        node.metadata["attempt"] = attempt
    if worker is not None:
        node.metadata["worker"] = worker
    if worker_name is not None:
        node.metadata["worker_name"] = worker_name
    return node
