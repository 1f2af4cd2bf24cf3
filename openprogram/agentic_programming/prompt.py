"""Building an exec's prompt from a session, and rebuilding the prompt an ``llm`` node sent.

``session`` is anything with ``get(id) -> Call``, ``children(id) -> [id]`` and ``head_id``
(a stored :class:`~openprogram.store.session.store.Session`).  The choice of earlier turns
is :mod:`openprogram.context.policy`'s; the text is :mod:`openprogram.context.render`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openprogram.context.graph import Graph, Visible
from openprogram.context.nodes import Call
from openprogram.context.policy import (
    ContextPolicy,
    History,
    effective,
    frame_policy,
    select_history,
)
from openprogram.context.render import full_messages, render_messages, turn_messages

Message = dict[str, Any]


class Prompt:
    """One rendered prompt: the frame's own messages (docstring, earlier steps, content)
    with the history spliced in at ``record["at"]``; ``record`` is what the ``llm`` node
    keeps about the history (the turn ids, tokens, what was left out, the policy)."""

    __slots__ = ("history", "own", "record")

    def __init__(self, own: list[Message], history: list[Message], record: dict[str, Any]) -> None:
        self.own = own
        self.history = history
        self.record = record

    @property
    def messages(self) -> list[Message]:
        at = self.record["at"]
        return self.own[:at] + self.history + self.own[at:]


class _Reader:
    """A session's nodes as the two callables the pure code takes."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def lookup(self, node_id: str) -> Call | None:
        try:
            return self.session.get(node_id)  # type: ignore[no-any-return]
        except Exception:  # unknown id, unreadable file: the node is not there
            return None

    def kids(self, node: Call) -> list[Call]:
        return [c for c in (self.lookup(i) for i in self.session.children(node.id)) if c]

    def history(self, before: str | None, policy: ContextPolicy) -> History:
        render = lambda n: turn_messages(n, self.kids)  # noqa: E731
        return select_history(self.lookup, before, policy, render, summary_lookup(self.session))


#: ``meta.json`` key of a compacted session: newest covered node id -> its summary node id
#: (written by :mod:`openprogram.agent.dispatcher.compaction`).
SUMMARIES_KEY = "summaries"


def summary_lookup(session: Any) -> Callable[[str], Call | None] | None:
    """``node id -> the summary node standing for it and everything before it`` (None for
    a session never compacted: the walk then costs nothing more)."""
    meta = getattr(session, "meta", None)
    table = meta.get(SUMMARIES_KEY) if isinstance(meta, dict) else None
    if not isinstance(table, dict) or not table:
        return None

    def find(node_id: str) -> Call | None:
        summary_id = table.get(node_id)
        if not isinstance(summary_id, str):
            return None
        try:
            return session.get(summary_id)  # type: ignore[no-any-return]
        except Exception:  # unreadable: the walk goes on through the turns themselves
            return None

    return find


def build_prompt(
    session: Any, frame_id: str | None, content: Any, *layers: ContextPolicy | None
) -> Prompt:
    """The prompt of an exec in ``frame_id`` (None: top level); ``layers`` narrowest first
    (the call's, then the runtime's; the enclosing functions' go between)."""
    reader = _Reader(session)
    graph = Graph(reader.lookup, session.children, session.head_id)
    chain = graph.ancestors(frame_id)
    call, *wider = layers or (None,)
    policy = effective(call, frame_policy(chain), *wider)
    history = reader.history(graph.history_start(chain), policy)
    doc = chain[0].metadata.get("doc") if chain else None
    own = render_messages(Visible(doc=doc or None, steps=graph.steps(frame_id)), content)
    record = history.record(policy)
    record["at"] = 1 if doc else 0
    return Prompt(own, history.messages, record)


def history_after(session: Any, before: str | None, policy: ContextPolicy) -> History:
    """The earlier turns a top-level call chained after ``before`` would see."""
    return _Reader(session).history(before, effective(policy))


def sent_messages(session: Any, node: Call) -> list[Message]:
    """The whole prompt ``node`` (an ``llm`` node of ``session``) was sent, rebuilt from the
    earlier turns it names (it stores only its frame's own messages)."""
    reader = _Reader(session)
    return full_messages(node, reader.lookup, reader.kids)
