"""Calls the dispatcher makes *about* a turn rather than in it — the goal's judge, a
model-written title, a compaction's summary: their nodes hang under the turn's user
message (the DAG shows them there) marked ``metadata.aside``, and later prompts leave them
out of that turn's rendering (:func:`openprogram.context.render.turn_messages`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from openprogram.agentic_programming.function import using_call_id

if TYPE_CHECKING:
    from openprogram.store.session.context import SessionNodeWriter

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


def commit_meta(session_id: str, message: str, **fields: Any) -> None:
    """Write ``fields`` to the session's ``meta.json`` now, as a commit of its own (a
    rename, a goal run ended between turns).  The store commits what a process changed,
    so the session's HEAD node is recorded again unchanged beside the new ``meta.json``."""
    from openprogram.agent.session_db import default_db

    session = default_db().open(session_id)
    session.set_meta(**fields)
    head = session.head_id
    if head is not None:
        session.update(session.get(head))
    session.commit(message)
