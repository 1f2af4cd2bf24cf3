"""What a turn's store is in memory, and the one HEAD rule both writers follow.

:class:`MemoryRecorder` is the store while an item of :func:`openprogram.map` runs on a
worker: agentic calls record their nodes as into a session (the same ``Call`` objects, the
same links) but nothing touches a disk, a lock or git.  The nodes it wrote (:attr:`written`)
go back with the item's result and the kernel, the session's only writer, appends them.
``seen`` are the nodes the calls may look at (their frame and the turns before it).  It
offers what agentic code uses of a ``SessionNodeWriter`` and, as its own ``session``, what
a prompt reads (``get``, ``children``, ``head_id``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from openprogram.context.nodes import Call


def chain_after_head(call: Call, head: str | None) -> str:
    """Link the turn-level ``call`` (no caller) after ``head``; returns the new HEAD.

    No predecessor given: it follows HEAD.  One given that is not HEAD (a notebook
    continuing its own last turn after another copy moved the session on, a chat message
    forked from an earlier node): it branches there and ``metadata.forked_from_head`` keeps
    where HEAD was.  The caller holds whatever lock makes reading and moving HEAD one step.
    """
    if call.predecessor is None:
        call.predecessor = head
    elif call.predecessor != head:
        call.metadata["forked_from_head"] = head
    return call.id


class MemoryRecorder:
    def __init__(
        self, session_id: str, turn: int, seen: Iterable[Call], head_id: str | None
    ) -> None:
        self.session_id = session_id
        self._turn = turn
        self._head = head_id
        self._nodes: dict[str, Call] = {}
        self._children: dict[str | None, list[str]] = {}
        for call in sorted(seen, key=lambda c: c.seq):
            self._nodes[call.id] = call
            self._children.setdefault(call.caller, []).append(call.id)
        self._seq = max((c.seq for c in self._nodes.values()), default=-1) + 1
        self.written: list[Call] = []  # the nodes recorded here, in the order they were made
        self._mu = threading.Lock()  # the mapped function may use threads of its own

    @property
    def session(self) -> MemoryRecorder:
        return self

    @property
    def turn(self) -> int:
        return self._turn

    @property
    def head_id(self) -> str | None:
        return self._head

    def append(self, call: Call, *, turn_level: bool = False) -> Call:
        """Record a new node; a turn-level node is chained after HEAD and becomes HEAD."""
        with self._mu:
            call.seq, call.turn = self._seq, self._turn
            self._seq += 1
            if turn_level:
                self._head = chain_after_head(call, self._head)
            self._nodes[call.id] = call
            self._children.setdefault(call.caller, []).append(call.id)
            self.written.append(call)
        return call

    def append_many(self, calls: Sequence[Call]) -> list[Call]:
        return [self.append(call) for call in calls]

    def update(self, call: Call) -> None:
        with self._mu:
            self._nodes[call.id] = call

    def get(self, node_id: str) -> Call:
        """A copy of the node, as ``Session.get`` hands out (edits stay the reader's)."""
        try:
            return self._nodes[node_id].copy()
        except KeyError:
            raise KeyError(f"no node {node_id!r} in this worker's view") from None

    def children(self, caller: str | None) -> list[str]:
        with self._mu:
            return list(self._children.get(caller, ()))

    def commit(self, message: str) -> str | None:
        """Nothing to commit: the kernel commits what it appends."""
        return None

    def __repr__(self) -> str:
        return f"MemoryRecorder(session_id={self.session_id!r}, written={len(self.written)})"
