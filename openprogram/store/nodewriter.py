"""``NodeWriter``: what a turn's store is, on disk or in memory, and the one HEAD rule.

Two writers record a turn's nodes: :class:`~openprogram.store.session.writer.
SessionNodeWriter` (into a session on disk, in the kernel or a script) and
:class:`~openprogram.store.memory.MemoryRecorder` (in memory, on a worker of
:func:`openprogram.map`).  Agentic code sees either through :class:`NodeWriter`.

A turn-level write (a node with no caller: a cell's turn, a chat reply, a top-level call)
chains after HEAD and becomes HEAD.  Both writers decide how with :func:`chain_after_head`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from openprogram.context.nodes import Call


class NodeWriter(Protocol):
    """The store of a turn, as ``TurnState.writer`` holds it."""

    session_id: str

    @property
    def session(self) -> Any: ...  # what a prompt reads: get, children, head_id

    @property
    def turn(self) -> int: ...

    @property
    def head_id(self) -> str | None: ...

    def append(self, call: Call, *, turn_level: bool = False) -> Call: ...

    def append_many(self, calls: Sequence[Call]) -> list[Call]: ...

    def update(self, call: Call) -> None: ...

    def get(self, node_id: str) -> Call: ...

    def commit(self, message: str) -> str | None: ...


def chain_after_head(call: Call, head: str | None) -> str:
    """Link the turn-level ``call`` after ``head`` and return the new HEAD (``call.id``).

    No predecessor given: it follows HEAD.  One given that is not HEAD (a notebook
    continuing its own last turn after another copy moved the session on, a chat message
    forked from an earlier node): the call branches there, and
    ``metadata.forked_from_head`` keeps where HEAD was.  The caller holds whatever lock
    makes reading HEAD and moving it one step.
    """
    if call.predecessor is None:
        call.predecessor = head
    elif call.predecessor != head:
        call.metadata["forked_from_head"] = head
    return call.id
