"""The kernel side of a map's nodes, pure: what a worker may see, and how what it sends
back becomes part of the session.

* :func:`snapshot` — the nodes a prompt rendered on a worker may show: the frame the items
  hang under with its callers, and the earlier turns its context policy chooses with the
  calls they made (light copies: no prompts, no tracebacks).
* :func:`adopt` — the nodes a worker recorded, given new ids (links remapped) and the
  worker's name, ready to be appended in item order.
* :func:`attempt_node` — a node for an attempt that sent nothing back (its worker died,
  it was cancelled, it could not be submitted).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from openprogram.context.graph import Graph
from openprogram.context.nodes import INTERRUPTED, OPEN_STATUSES, Call, make_call, new_id
from openprogram.context.policy import ContextPolicy, effective, frame_policy, select_history
from openprogram.context.render import turn_messages

Lookup = Callable[[str], Call | None]
Children = Callable[[str | None], list[str]]

_LIGHT_META = ("kind", "status", "error", "rejected")
_FRAME_META = (*_LIGHT_META, "doc", "context")  # a frame's docstring and context policy
_TURN_PARTS = ("function", "tool", "reply")  # what render shows of an earlier turn's calls


def _light(call: Call, *, keep: tuple[str, ...] = _LIGHT_META) -> Call:
    return dataclasses.replace(
        call, metadata={k: call.metadata[k] for k in keep if k in call.metadata}
    )


def snapshot(
    lookup: Lookup,
    children: Children,
    head: str | None,
    anchor: str | None,
    *,
    policy: ContextPolicy | None,
    steps: bool,
) -> list[Call]:
    """What an item running under ``anchor`` may show in a prompt (see module doc).

    The earlier turns are those the context ``policy`` (the runtime's, under the policies
    of the enclosing frames) chooses here — with the calls they made — plus the turns it
    looked at and left out (they decide what it keeps), so an exec on a worker chooses the
    same history.  ``steps``: also the anchor's finished children (an exec made directly in
    that frame, by a function that is not agentic)."""
    graph = Graph(lookup, children, head)
    frames = graph.ancestors(anchor)
    out: dict[str, Call] = {n.id: _light(n, keep=_FRAME_META) for n in frames}

    def kids(node: Call) -> list[Call]:
        return [k for k in (lookup(i) for i in children(node.id)) if k is not None]

    start = graph.history_start(frames)
    history = select_history(
        lookup,
        start,
        effective(frame_policy(frames), policy),
        lambda node: turn_messages(node, kids),
    )
    rendered = [*history.turns, *(lookup(i) for i in history.over_budget)]
    for node in rendered:
        if node is not None:
            out.setdefault(node.id, _light(node))
            for kid in kids(node):
                if kid.kind in _TURN_PARTS:
                    out.setdefault(kid.id, _light(kid))
    looked_at = [*rendered, *(lookup(i) for i in history.failed)]
    for node in looked_at:
        if node is not None:
            out.setdefault(node.id, _light(node))
    oldest = min((n for n in looked_at if n is not None), key=lambda n: n.seq, default=None)
    beyond = lookup(oldest.predecessor) if oldest and oldest.predecessor else None
    if oldest is None and start is not None:
        beyond = lookup(start)  # nothing chosen: what stopped the walk
    if beyond is not None:
        out.setdefault(beyond.id, _light(beyond))
    if steps:
        for node in graph.steps(anchor):
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
