"""``session_context``: the one place that enters a turn of a session, for every front (the
notebook magic, the CLI and research harness, the chat dispatcher, the subprocess runner,
the tests), so an ``@agentic_function`` behaves the same everywhere; and
:class:`SessionNodeWriter`, the turn's store on disk.

Continuity is ``session_id`` (``None``: a new session is minted, its id on the handle),
never a call count.  Sessions never close: leaving the context puts the previous turn
state back (also when the body raises), commits the turn and deletes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from openprogram.context.nodes import Call, new_id
from openprogram.store.session.files import mint_session_id, validate_session_id
from openprogram.store.session.store import default_db
from openprogram.store.vars import current, default_runtime, using_turn

if TYPE_CHECKING:
    from openprogram.store.session.store import Session, SessionStore


class SessionNodeWriter:
    """A session bound to the turn being written: the turn number (the storage shard) is
    taken at the first write; appends and updates go to the session."""

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


@dataclass
class SessionHandle:
    """What ``session_context`` yields.  ``message`` becomes the turn's commit message."""

    db: SessionStore
    session_id: str
    runtime: Any  # the Runtime (its layer is above the store's: not named here)
    turn_id: str
    created: bool
    writer: SessionNodeWriter
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@contextmanager
def session_context(
    session_id: str | None = None,
    *,
    agent_id: str = "main",
    turn_id: str | None = None,
    runtime: Any = None,
    create_runtime_if_none: bool = True,
    id_prefix: str = "session",
    source: str = "python",
    title: str | None = None,
    message: str | None = None,
    db: SessionStore | None = None,
) -> Iterator[SessionHandle]:
    """Install the turn state (writer, turn id, runtime; no frame yet) for one turn of
    ``session_id`` and commit the turn on exit: everything it writes goes through
    ``handle.writer``, one shard and one commit.  With no provider configured the store is
    still installed; only ``runtime.exec`` fails, saying how to configure one."""
    database = db if db is not None else default_db()
    sid = mint_session_id(id_prefix) if session_id is None else validate_session_id(session_id)
    created = not database.exists(sid)
    if created:
        database.create_session(sid, agent_id, source=source, title=title)
    if runtime is None and create_runtime_if_none:
        runtime = default_runtime()
    writer = SessionNodeWriter(database, sid)
    tid = turn_id or new_id("turn")
    handle = SessionHandle(database, sid, runtime, tid, created, writer, message or "")
    outer = current()  # who answers questions, the echo, the stop flag carry on
    rt = runtime if runtime is not None else outer.runtime
    with using_turn(replace(outer, writer=writer, turn_id=tid, runtime=rt, call_id=None)):
        try:
            yield handle
        finally:
            turn = writer._turn
            if turn is not None:
                writer.session.end_turn(turn)  # nothing of this turn is left running
            label = (handle.message.strip().splitlines() or [""])[0][:72]
            prefix = f"turn {turn}" if turn is not None else "session"
            writer.commit(f"{prefix}: {label}" if label else prefix)
