"""``%%openprogram --chat``: the cell's text is the user message of a chat turn.

The turn is handled by the dispatcher (``process_user_turn``) in the notebook's session,
chained after the notebook's last turn, so the model sees the code cells' turns as the
conversation so far.  Functions of the notebook marked with ``@openprogram.tool`` are its
tools (each call a ``tool`` node); ``ask_user`` is answered in the cell (headless: no
answer, never a hang); the reply streams into the cell as it arrives, as one output
updated in place, and the turn's DAG is drawn as every cell's turn is
(:mod:`openprogram_magics.chat_view`).  A reply with no text says so.  The turn node
keeps the cell's text (``metadata.cell``), by which ``%openprogram stale`` knows the cell.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO, cast

if TYPE_CHECKING:
    from openprogram_magics.cells import CellHost
    from openprogram_magics.cells.options import CellOptions
    from openprogram_magics.chat_view import ChatDag


def run_chat_cell(host: CellHost, opts: CellOptions, body: str, source: str) -> Any:
    from IPython.core.error import UsageError

    from openprogram.agent.chat import chat_turn, tools_in
    from openprogram.agent.session_db import default_db
    from openprogram.errors import UserError
    from openprogram_magics.ask import notebook_ask_handler
    from openprogram_magics.chat_view import ChatDag, live_view
    from openprogram_magics.commands.goal import goal_done, notebook_goal
    from openprogram_magics.reply_output import ReplyOutput, updates_in_place
    from openprogram_magics.turn import chained_after

    text = body.strip()
    if not text:
        raise UsageError("%%openprogram --chat: write the message in the cell")
    turns = host.turns
    shell = host.shell
    assert shell is not None
    raw = turns.raw_cell or ""
    cell = raw if raw.lstrip().startswith("%%openprogram") else source
    reply = ReplyOutput() if updates_in_place(shell) else None
    dag = ChatDag(live_view(turns.settings))
    try:
        meta, pinned = turns.cell_session(opts.session)
        db, sid = default_db(), meta.session_id
        after = chained_after(db.open(sid), meta) if db.exists(sid) else None
        result, streamed = chat_turn(
            text,
            session_id=meta.session_id,
            runtime=turns.runtime(),
            tools=tools_in(shell.user_ns),
            after=after,
            ask=notebook_ask_handler,
            out=cast("TextIO | None", reply),
            goal=notebook_goal(host),
            cell=cell,
            on_event=dag.on_event,
        )
    except UserError as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:  # Ctrl-C ends a goal run as a stop does
        goal_done(host, {"status": "stopped"})
        if dag.turn_ids:  # recorded (its reply cancelled): drawn, and the next turn follows it
            done = replace(meta, last_turn_id=dag.turn_ids[-1])
            turns.turn_done(done, pinned)
            header = f"openprogram · session {done.session_id} · {turns_label(dag)}chat turn"
            show_turn(dag, header + " · cancelled", {**done.to_json(), "status": "cancelled"})
        raise
    finally:
        dag.close()
        if reply is not None:
            reply.close()
    goal_done(host, result.goal)
    done = replace(meta, last_turn_id=result.user_node_id)
    turns.turn_done(done, pinned)
    if not streamed and result.text:
        from openprogram.context.secrets import redact_secrets

        # as a streamed reply would be
        print(redact_secrets(result.text), file=cast("TextIO | None", reply))
        if reply is not None:
            reply.close()
    header = f"openprogram · session {result.session_id} · {turns_label(dag)}chat turn"
    header += f" · {result.status}"
    if result.error:
        header += f" · {result.error}"
    if result.note:
        header += f" · {result.note}"
    if result.goal is not None:
        header += f" · goal {result.goal['status']} ({result.goal['continuations']} continuations)"
    payload = {**done.to_json(), "status": result.status}
    if result.note:
        payload["note"] = result.note
    if result.goal is not None:  # the run's turns, for a reader of the saved outputs
        payload["goal"] = {k: result.goal[k] for k in ("text", "status", "continuations", "turns")}
    if pinned:  # not the notebook's session: readers of saved outputs skip it
        payload["pinned"] = True
    show_turn(dag, header, payload)
    return None


def show_turn(dag: ChatDag, header: str, payload: dict[str, Any]) -> None:
    """The cell's final output: its turns' DAG (or, if drawing fails, the header alone),
    with the session's mime part."""
    from IPython.display import display

    from openprogram_magics.notebook import MIME_TYPE

    try:
        dag.show(header, payload)
    except Exception as exc:  # a view must never lose the turn: the header and payload stay
        print(f"openprogram: could not draw the turn ({type(exc).__name__}: {exc})")
        display({"text/plain": header, MIME_TYPE: payload}, raw=True)


def turns_label(dag: ChatDag) -> str:
    """``turn N · `` (``turns N–M · `` for a goal run) of the header, once known."""
    if not dag.turns:
        return ""
    low, high = min(dag.turns), max(dag.turns)
    return f"turn {low} · " if low == high else f"turns {low}–{high} · "
