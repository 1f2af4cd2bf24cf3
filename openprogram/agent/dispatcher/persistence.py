"""Stage 5: the reply's text becomes the reply node's output (rendered in later turns)."""

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
    writer.nodes.update(reply)
