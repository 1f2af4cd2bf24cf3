"""Stages 1-2: make sure the session exists, resolve the predecessor, persist the message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from openprogram.agent.dispatcher.turn_writer import TurnWriter
from openprogram.agent.session_db import default_db
from openprogram.errors import UserError
from openprogram.store.session.ids import mint_session_id, validate_session_id
from openprogram.store.session.writer import SessionNodeWriter

if TYPE_CHECKING:
    from openprogram.agent.dispatcher.types import TurnRequest
    from openprogram.context.nodes import Call
    from openprogram.store.session.store import Session, SessionStore


@dataclass
class PreparedTurn:
    session_id: str
    created: bool
    writer: TurnWriter
    user: Call


def prepare_turn(request: TurnRequest) -> PreparedTurn:
    """Stage 1: ensure the session; stage 2: resolve where the message links, persist it."""
    db = default_db()
    session_id, created = ensure_session(db, request)
    nodes = SessionNodeWriter(db, session_id)
    predecessor = resolve_predecessor(nodes.session, request.fork_from)
    writer = TurnWriter(nodes)
    user = writer.persist_user(request.text, predecessor, request.continuation, cell=request.cell)
    return PreparedTurn(session_id, created, writer, user)


def ensure_session(db: SessionStore, request: TurnRequest) -> tuple[str, bool]:
    """The request's session (created under that id if missing), or a new ``chat_…`` one."""
    if request.session_id is None:
        session_id = mint_session_id("chat")
    else:
        session_id = validate_session_id(request.session_id)
    if db.exists(session_id):
        return session_id, False
    db.create_session(session_id, request.agent_id, source="chat")
    return session_id, True


def resolve_predecessor(session: Session, fork_from: str | None) -> str | None:
    """``fork_from`` (checked to exist: a typo must not start a dangling branch), else None,
    which the append resolves to HEAD under the session lock (no race with other writers)."""
    if fork_from is None:
        return None
    try:
        session.get(fork_from)
    except KeyError:
        raise UserError(f"cannot fork from {fork_from!r}: no such node in {session.id}") from None
    return fork_from
