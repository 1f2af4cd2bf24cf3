"""``session_context``: the one place that installs the per-turn session context.

Every entry point — the notebook magic, the CLI and research harness, the chat
dispatcher, the subprocess runner, the tests — enters a turn through this manager, so an
``@agentic_function`` behaves the same everywhere: its docstring reaches the model, nodes
persist, history renders, ``ask_user`` is tracked and nested calls are attributed.

Session boundary: continuity is expressed by passing ``session_id``, never by call count.

* ``session_id`` given → reuse it (created under that id if missing);
* ``None`` → a new session is minted and its id exposed on the handle (callers print it).

Sessions never close: leaving the context puts the previous turn state back (also when
the body raises), commits the turn, and deletes nothing.  The state is one value
(:class:`openprogram.store.vars.TurnState`), installed with ``using_turn``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from openprogram.context.nodes import new_id
from openprogram.store.session.files import mint_session_id, validate_session_id
from openprogram.store.session.store import default_db
from openprogram.store.session.writer import SessionNodeWriter
from openprogram.store.vars import current, default_runtime, using_turn

if TYPE_CHECKING:
    from openprogram.store.session.store import SessionStore


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
    """Install the turn state (writer, turn id, runtime; no frame yet: ``call_id`` None) for
    one turn of ``session_id``; commit the turn on exit.

    Everything the turn writes goes through ``handle.writer`` (the chat dispatcher persists
    its user message there first thing), so the whole turn is one shard and one commit.

    With no provider configured the store is still installed, so the DAG, docstrings and
    history all work; only ``runtime.exec`` fails, saying how to configure a provider.
    """
    database = db if db is not None else default_db()
    sid = mint_session_id(id_prefix) if session_id is None else validate_session_id(session_id)
    created = not database.exists(sid)
    if created:
        database.create_session(sid, agent_id, source=source, title=title)
    rt = runtime
    if rt is None and create_runtime_if_none:
        rt = default_runtime()
    tid = turn_id or new_id("turn")
    writer = SessionNodeWriter(database, sid)
    handle = SessionHandle(
        db=database,
        session_id=sid,
        runtime=rt,
        turn_id=tid,
        created=created,
        writer=writer,
        message=message or "",
    )
    outer = current()  # who answers questions, the echo, the stop flag carry on
    state = replace(
        outer,
        writer=writer,
        turn_id=tid,
        runtime=rt if rt is not None else outer.runtime,
        call_id=None,
    )
    # the turn's one state; the previous one is back after, also when the body raises
    with using_turn(state):
        try:
            yield handle
        finally:
            turn = writer._turn
            if turn is not None:
                writer.session.end_turn(turn)  # nothing of this turn is left running
            label = (handle.message.strip().splitlines() or [""])[0][:72]
            prefix = f"turn {turn}" if turn is not None else "session"
            writer.commit(f"{prefix}: {label}" if label else prefix)
