"""``TurnWriter``: the only module of the dispatcher that moves the session's HEAD.

A chat turn is a ``turn`` node (the user message) on the conversation chain, with the
``reply`` node (the assistant message) nested under it, and the reply's llm and tool nodes
nested under that.  So the user message is the one turn-level write and HEAD ends on it,
whether the reply completes or fails: a failed exchange stays in the history, which lets
the next message say "try again".  Every other module asks this one instead of touching
HEAD, which a test checks by grepping the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from openprogram.context.nodes import COMPLETED, make_call
from openprogram.context.outcome import finish

if TYPE_CHECKING:
    from openprogram.context.nodes import Call
    from openprogram.store.session.context import SessionNodeWriter


class TurnWriter:
    def __init__(self, nodes: SessionNodeWriter) -> None:
        self.nodes = nodes
        self.user: Call | None = None
        self.reply: Call | None = None

    def persist_user(
        self,
        text: str,
        predecessor: str | None,
        continuation: dict[str, Any] | None = None,
        *,
        name: str = "user",
        cell: str | None = None,
    ) -> Call:
        """Append the user message after ``predecessor`` (None: HEAD, resolved atomically
        with the append) and make it HEAD.  A goal's continuation turn is named
        ``continuation`` and keeps ``metadata.goal`` (``{"text", "n"}``); a command's turn
        (``compact``) is named after it.  ``cell``: the notebook cell the message came from,
        kept (secrets masked) as ``metadata.cell``."""
        marks: dict[str, Any] = {"goal": continuation} if continuation else {}
        if cell is not None:
            from openprogram.context.secrets import redact_secrets

            marks["cell"] = redact_secrets(cell)
        name = "continuation" if continuation else name
        node = make_call(
            "turn", name, input={"text": text}, predecessor=predecessor, status=COMPLETED, **marks
        )
        self.user = self.nodes.append(node, turn_level=True)
        return self.user

    def open_placeholder(self, agent_id: str, doc: str) -> Call:
        """The ``reply`` node (``running``) under the user message; HEAD does not move.
        ``doc`` is the agent's instruction: the reply frame's docstring, sent once."""
        assert self.user is not None, "persist_user first"
        node = make_call("reply", agent_id, caller=self.user.id, doc=doc)
        self.reply = self.nodes.append(node)
        return self.reply

    def record_failure(self, error: str, status: str) -> Call:
        """End the reply with ``status`` (``error``/``cancelled``) and ``error``; when it never
        opened, an ``error`` node under the user message says what went wrong.  HEAD is not
        touched: it moved to the user message when that was appended, and a nested node
        never moves it."""
        assert self.user is not None, "persist_user first"
        node = self.reply
        if node is None:
            node = self.nodes.append(make_call("error", "turn", caller=self.user.id))
        self.nodes.update(finish(node, status, error=error))
        return node

    def head_for_finalize(self) -> str:
        """The turn-level node this turn wrote (its user message), which HEAD moved to."""
        assert self.user is not None, "persist_user first"
        return self.user.id
