"""``%%openprogram --chat``: the cell's text is the user message of a chat turn.

The turn is handled by the dispatcher (``process_user_turn``) in the notebook's session,
chained after the notebook's last turn, so the model sees the code cells' turns as the
conversation so far.  Functions of the notebook marked with ``@openprogram.tool`` are its
tools (each call a ``tool`` node); ``ask_user`` is answered in the cell (headless: no
answer, never a hang); the reply streams into the cell as it arrives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openprogram_magics.magics import OpenProgramMagics


def run_chat_cell(magics: OpenProgramMagics, args: str, body: str, source: str) -> Any:
    from IPython.core.error import UsageError
    from IPython.display import display

    from openprogram.agent.chat import chat_turn, tools_in
    from openprogram.errors import UserError
    from openprogram_magics.notebook import MIME_TYPE, NotebookMeta
    from openprogram_magics.turn import _is_turn, notebook_ask_handler

    text = body.strip()
    if not text:
        raise UsageError("%%openprogram --chat: write the message in the cell")
    opts = magics.cell_args(args)
    shell = magics.shell
    assert shell is not None
    try:
        meta = magics._resolve(opts.session)
        after = None
        if meta.last_turn_id:
            from openprogram.agent.session_db import default_db

            db = default_db()
            if db.exists(meta.session_id) and _is_turn(db.open(meta.session_id), meta.last_turn_id):
                after = meta.last_turn_id
        result, streamed = chat_turn(
            text,
            session_id=meta.session_id,
            runtime=magics.runtime(),
            tools=tools_in(shell.user_ns),
            after=after,
            ask=notebook_ask_handler,
        )
    except UserError as exc:
        raise UsageError(str(exc)) from None
    magics.kernel_meta = NotebookMeta(result.session_id, result.user_node_id)
    magics._push_metadata()
    if not streamed and result.text:
        print(result.text)
    header = f"openprogram · session {result.session_id} · chat turn · {result.status}"
    if result.error:
        header += f" · {result.error}"
    display(
        {
            "text/plain": header,
            MIME_TYPE: {**magics.kernel_meta.to_json(), "status": result.status},
        },
        raw=True,
    )
    return None
