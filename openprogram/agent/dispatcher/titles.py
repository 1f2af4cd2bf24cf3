"""Session titles: the first message's first line at once, a model-written title after a
few turns, and a user's rename that nothing overwrites.

``meta.json`` keeps ``title`` and ``title_source``: ``first_message`` (set at the first
turn), ``model`` (written by :func:`write_title`, once, after :data:`RETITLE_AFTER` turns)
or ``user`` (``%openprogram title …`` / :func:`rename`: final).  ``sessions list``, the DAG's
header and ``%openprogram status`` show the title.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from openprogram.agent.dispatcher.aside import commit_meta, run_aside
from openprogram.agentic_programming.function import agentic_function
from openprogram.context.policy import ContextPolicy
from openprogram.errors import UserError

if TYPE_CHECKING:
    from openprogram.agent.dispatcher.prep import PreparedTurn
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram.store.session.store import Session

TITLE_CHARS = 60
RETITLE_AFTER = 4  # turns on the conversation chain before the model writes a title
FIRST, MODEL, USER = "first_message", "model", "user"


def one_line(text: str, limit: int = TITLE_CHARS) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit] + "…"


def default_title(text: str) -> str:
    """The title a session gets from its first message: its first line, clipped."""
    first = next((line for line in str(text).splitlines() if line.strip()), "")
    return one_line(first)


def untitled(session: Session) -> bool:
    title = session.meta.get("title")
    return not title or title == session.id


def maybe_auto_title(prepared: PreparedTurn) -> None:
    """A session still titled with its id gets the first line of its first message
    (written to ``meta.json`` by the turn's commit)."""
    session = prepared.writer.nodes.session
    if not untitled(session):
        return
    user = prepared.writer.user
    text = user.input.get("text", "") if user is not None and isinstance(user.input, dict) else ""
    title = default_title(text)
    if title:
        session.set_meta(title=title, title_source=FIRST)


@agentic_function(name="session_title", context=ContextPolicy(turns=0))
def write_title(conversation: str, runtime: Runtime | None = None) -> str:
    """You name conversations. Read the conversation below and answer with a title of at
    most eight words that says what it is about: the title only, no quotes, no
    punctuation at the end."""
    assert runtime is not None, "a title is written in a turn, which has a runtime"
    return str(runtime.exec(conversation))


def clean_title(text: str) -> str:
    """The model's reply as a title: its first line, without quotes or a closing stop."""
    line = default_title(text).strip()
    if line.lower().startswith("title:"):
        line = line[6:]
    line = line.strip().strip("\"'`*#").strip().rstrip(".").strip("\"'`*").strip()
    return one_line(line)


def after_turn(prepared: PreparedTurn) -> None:
    """Stage 6c: after :data:`RETITLE_AFTER` turns, one model call writes the title —
    unless the user named the session or the model did already.  A failed call keeps the
    title there is."""
    session = prepared.writer.nodes.session
    source = session.meta.get("title_source")
    if source in (MODEL, USER) or (source is None and not untitled(session)):
        return  # a title from elsewhere (a notebook's, a research task's) is kept
    user = prepared.writer.user
    assert user is not None
    chain = [n for n in session.chain(user.id, RETITLE_AFTER + 1) if n.kind != "root"]
    if len(chain) < RETITLE_AFTER:
        return
    conversation = "\n".join(_turn_line(session, n.id) for n in reversed(chain[:RETITLE_AFTER]))
    try:
        title = clean_title(run_aside(prepared.writer.nodes, user.id, write_title, conversation))
    except Exception:  # no model, a provider error: the first message's title stays
        return
    if title:
        session.set_meta(title=title, title_source=MODEL)


def _turn_line(session: Session, node_id: str) -> str:
    node = session.get(node_id)
    said = node.input.get("text") if isinstance(node.input, dict) else node.input
    lines = [f"user: {one_line(str(said or ''), 400)}"]
    for child_id in session.children(node_id):
        child = session.get(child_id)
        if child.kind == "reply" and child.output:
            lines.append(f"assistant: {one_line(str(child.output), 400)}")
    return "\n".join(lines)


def rename(session_id: str, title: str) -> str:
    """The user names the session: ``title`` is kept (committed now) and never replaced
    by a model-written one."""
    from openprogram.agent.session_db import default_db

    line = one_line(title, 200)
    if not line:
        raise UserError('a title needs words: title "what this session is about"')
    db = default_db()
    if not db.exists(session_id):
        raise UserError(f"session {session_id} has no turns yet: name it after its first turn")
    commit_meta(session_id, f"title: {line}", title=line, title_source=USER)
    return line


def title_of(meta: dict[str, Any]) -> str:
    """The title a view shows ('' while the session has only its id)."""
    title = meta.get("title")
    return str(title) if title and title != meta.get("id") else ""
