"""Stage 2: resolve where the user message links and persist it, in the turn stage 1
(``turn_context.bind``, that is ``session_context``) opened."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from openprogram.agent.dispatcher.turn_writer import TurnWriter
from openprogram.errors import UserError

if TYPE_CHECKING:
    from openprogram.agent.dispatcher.types import TurnRequest
    from openprogram.context.nodes import Call
    from openprogram.store.session.context import SessionHandle
    from openprogram.store.session.store import Session


@dataclass
class PreparedTurn:
    session_id: str
    created: bool
    writer: TurnWriter
    user: Call


def prepare_turn(request: TurnRequest, handle: SessionHandle) -> PreparedTurn:
    """The user message, persisted through the turn's node writer after ``fork_from`` (or
    HEAD) — the turn-level write that moves HEAD (``TurnWriter``)."""
    predecessor = resolve_predecessor(handle.writer.session, request.fork_from)
    writer = TurnWriter(handle.writer)
    user = writer.persist_user(request.text, predecessor, request.continuation, cell=request.cell)
    return PreparedTurn(handle.session_id, handle.created, writer, user)


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
