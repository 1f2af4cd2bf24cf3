"""Calls the dispatcher makes *about* a turn rather than in it — the goal's judge, a
model-written title, a compaction's summary: their nodes hang under the turn's user
message (the DAG shows them there) marked ``metadata.aside``, and later prompts leave them
out of that turn's rendering (:func:`openprogram.context.render.turn_messages`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from openprogram.agentic_programming.function import using_call_id

if TYPE_CHECKING:
    from openprogram.store.session.writer import SessionNodeWriter

T = TypeVar("T")
ASIDE = "aside"


def run_aside(nodes: SessionNodeWriter, caller: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in the frame of ``caller``; the nodes it adds there are marked aside
    (also when it raises)."""
    before = set(nodes.session.children(caller))
    try:
        with using_call_id(caller):
            return fn(*args)
    finally:
        for child_id in nodes.session.children(caller):
            if child_id not in before:
                node = nodes.get(child_id)
                node.metadata[ASIDE] = True
                nodes.update(node)
