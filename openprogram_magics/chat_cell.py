"""``%%openprogram --chat``: the cell's text is the user message of a chat turn.

The turn is handled by the dispatcher (``process_user_turn``) in the notebook's session,
chained after the notebook's last turn, so the model sees the code cells' turns as the
conversation so far.  Functions of the notebook marked with ``@openprogram.tool`` are its
tools (each call a ``tool`` node); ``ask_user`` is answered in the cell (headless: no
answer, never a hang); the reply streams into the cell as it arrives.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openprogram_magics.magics import OpenProgramMagics


def run_chat_cell(magics: OpenProgramMagics, args: str, body: str, source: str) -> Any:
    from IPython.core.error import UsageError
    from IPython.display import display

    from openprogram.agent.chat import chat_turn, tools_in
    from openprogram.agent.session_db import default_db
    from openprogram.errors import UserError
    from openprogram_magics.ask import notebook_ask_handler
    from openprogram_magics.chatcommands import goal_done, notebook_goal
    from openprogram_magics.notebook import MIME_TYPE
    from openprogram_magics.turn import chained_after

    text = body.strip()
    if not text:
        raise UsageError("%%openprogram --chat: write the message in the cell")
    opts = magics.cell_args(args)
    shell = magics.shell
    assert shell is not None
    try:
        meta, pinned = magics.cell_session(opts.session)
        db, sid = default_db(), meta.session_id
        after = chained_after(db.open(sid), meta) if db.exists(sid) else None
        result, streamed = chat_turn(
            text,
            session_id=meta.session_id,
            runtime=magics.runtime(),
            tools=tools_in(shell.user_ns),
            after=after,
            ask=notebook_ask_handler,
            goal=notebook_goal(magics),
        )
    except UserError as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:  # Ctrl-C ends a goal run as a stop does
        goal_done(magics, {"status": "stopped"})
        raise
    goal_done(magics, result.goal)
    done = replace(meta, last_turn_id=result.user_node_id)
    magics.turn_done(done, pinned)
    if not streamed and result.text:
        from openprogram.context.secrets import redact_secrets

        print(redact_secrets(result.text))  # as a streamed reply would be
    header = f"openprogram · session {result.session_id} · chat turn · {result.status}"
    if result.error:
        header += f" · {result.error}"
    if result.goal is not None:
        header += f" · goal {result.goal['status']} ({result.goal['continuations']} continuations)"
    payload = {**done.to_json(), "status": result.status}
    if result.goal is not None:  # the run's turns, for a reader of the saved outputs
        payload["goal"] = {k: result.goal[k] for k in ("text", "status", "continuations", "turns")}
    if pinned:  # not the notebook's session: readers of saved outputs skip it
        payload["pinned"] = True
    display({"text/plain": header, MIME_TYPE: payload}, raw=True)
    return None
