"""``SessionNodeWriter``: what ``_store`` holds during a turn.

A thin wrapper binding a session to the turn being written: it hands out the turn number
(the storage shard) on first write and forwards appends and updates to the session.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from openprogram.context.nodes import Call

if TYPE_CHECKING:
    from openprogram.store.session.store import Session, SessionStore


class SessionNodeWriter:
    def __init__(self, db: SessionStore, session_id: str) -> None:
        self.db = db
        self.session_id = session_id
        self.session: Session = db.open(session_id)
        self.session.sync()  # see what other processes wrote since this one last looked
        self._turn: int | None = None

    @property
    def turn(self) -> int:
        if self._turn is None:
            self._turn = self.session.begin_turn()
        return self._turn

    @property
    def head_id(self) -> str | None:
        return self.session.head_id

    def append(self, call: Call, *, turn_level: bool = False) -> Call:
        """Record a new node; a turn-level node also becomes HEAD."""
        turn = self._turn if self._turn is not None else self.turn
        return self.session.append(call, turn=turn, advance_head=turn_level)

    def append_many(self, calls: Sequence[Call]) -> list[Call]:
        """Record nested nodes (none moves HEAD) in one batch, seqs in the given order."""
        return self.session.append_many(calls, turn=self.turn)

    def update(self, call: Call) -> None:
        self.session.update(call)

    def get(self, node_id: str) -> Call:
        return self.session.get(node_id)

    def commit(self, message: str) -> str | None:
        return self.session.commit(message)

    def __repr__(self) -> str:
        return f"SessionNodeWriter(session_id={self.session_id!r}, turn={self._turn})"
