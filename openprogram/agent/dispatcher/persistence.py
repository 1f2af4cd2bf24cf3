"""Stage 5: the reply's text becomes the reply node's output (rendered in later turns).

A reply with no text (a model that called a tool and then said nothing) is recorded as it
is, with ``metadata.note`` saying so: the chat cell and the terminal show that note, so an
empty answer is never mistaken for one still to come.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openprogram.agent.agent_loop import LoopResult
    from openprogram.agent.dispatcher.turn_writer import TurnWriter


def persist_reply(writer: TurnWriter, outcome: LoopResult) -> None:
    reply = writer.reply
    assert reply is not None, "open_placeholder first"
    reply.output = outcome.text
    reply.metadata.update(iterations=outcome.iterations, tool_calls=outcome.tool_calls)
    note = empty_reply_note(outcome.text, outcome.tool_names)
    if note:
        reply.metadata["note"] = note
    writer.nodes.update(reply)


def empty_reply_note(text: str, tools: tuple[str, ...] = ()) -> str | None:
    """What to say of a reply with no text (None: it has some)."""
    if text.strip():
        return None
    if not tools:
        return "empty reply: the model answered with no text"
    called = ", ".join(dict.fromkeys(tools))  # each tool once, in the order first called
    n = len(tools)
    calls = "1 tool call" if n == 1 else f"{n} tool calls"
    return f"empty reply: the model called {called} ({calls}), then answered with no text"
