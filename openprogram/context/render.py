"""Render what a frame sees (:class:`~openprogram.context.graph.Visible`) as chat messages.

Pure: no I/O.  The docstring becomes the one system message; earlier turns become plain
statements of what was asked and what came back (a chat turn: the user's words and the
reply; a cell: what it called and got back, never its source with ``%%openprogram``; see
:func:`turn_text`); earlier steps of the frame follow; the new content comes last.
``%openprogram context --full`` prints the exact text.

An ``llm`` node stores only its frame's own messages plus the ids of the earlier turns it
was given (``metadata["context"]``, see :mod:`openprogram.context.policy`), so a session
does not store every turn's text again in every later call: :func:`full_messages`
rebuilds the prompt that was sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from openprogram.context.graph import Visible
from openprogram.context.nodes import Call

MAX_MESSAGE_CHARS = 4000

Message = dict[str, Any]


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} chars cut]"


def as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def call_line(node: Call) -> str:
    """``name(arg=value, …)`` for a function/tool node."""
    args = node.input if isinstance(node.input, dict) else {}
    shown = ", ".join(f"{k}={clip(as_text(v), 200)!r}" for k, v in args.items())
    return f"{node.name}({shown})"


def step_messages(node: Call) -> list[Message]:
    """One earlier step of a frame as messages."""
    kind = node.kind
    if kind == "llm":
        content = node.input.get("content") if isinstance(node.input, dict) else node.input
        said = clip(as_text(node.output))
        calls = node.metadata.get("tool_calls")
        if not said and isinstance(calls, list) and calls:  # a reply that only called tools
            names = ", ".join(str(c.get("name")) for c in calls if isinstance(c, dict))
            said = f"[called {names}]"
        return [
            {"role": "user", "content": clip(as_text(content))},
            {"role": "assistant", "content": said},
        ]
    if kind == "ask_user":
        question = node.input.get("question") if isinstance(node.input, dict) else node.input
        return [{"role": "user", "content": f"Asked the user: {question}\nAnswer: {answer(node)}"}]
    status = "" if node.status == "completed" else f" [{node.status}]"
    out = clip(as_text(node.output or node.metadata.get("error")), 1000)
    return [{"role": "user", "content": f"Earlier step: {call_line(node)} -> {out}{status}"}]


def answer(node: Call) -> str:
    """What an ``ask_user`` node says the user answered: the answer, or how the question
    ended without one (declined, no answer in time...) and the default it fell back to."""
    if node.status == "answered":
        return as_text(node.output)
    outcome = node.metadata.get("outcome")
    if not isinstance(outcome, str) or outcome == "answered":
        return "(no answer)"
    fallback = "" if node.output is None else f"; the default was used: {as_text(node.output)}"
    return f"(no answer: {outcome.replace('_', ' ')}{fallback})"


def turn_messages(node: Call, children: Callable[[Call], list[Call]]) -> list[Message]:
    """One earlier turn as plain statements (:func:`turn_text`; a chat turn as the user's
    words and the reply, a top-level exec as its exchange); a compaction's
    summary node (``metadata.covers``) as the one message standing for the turns it covers.
    Calls made about the turn, not in it (``metadata.aside``: the goal's judge, a title,
    a summary) are left out of it."""
    if "covers" in node.metadata:
        return summary_messages(node)
    if node.kind == "turn":
        return _turn_history(node, children)
    if node.kind == "reply":
        return [{"role": "assistant", "content": clip(_asked(node))}]
    if node.kind == "llm":  # a top-level exec; the tools its reply called follow it
        tools = [step_messages(c) for c in children(node) if c.kind == "tool" and not c.is_open]
        return step_messages(node) + [m for part in tools for m in part]
    return [{"role": "user", "content": f"Earlier, {statement(node)}."}]


# -- earlier turns as plain statements ----------------------------------------------------------
#
# A weak model imitates the forms it is shown, so an earlier turn is not shown as code
# (a cell's source with its ``%%openprogram`` line, ``f(x) -> value``, ``(done)``) but as
# plain sentences of what was asked and what came back, in a user message:
#
#     Earlier (cell [2]):
#     - triage was called with ticket='the app crashes on save' and returned 'bug'.
#     - The model was asked 'Say hi.' and answered 'Hello!'.
#     - The cell's result: 3
#
# A cell that made no recorded call says which code ran.  A chat turn stays a conversation:
# the user's words, what its tools did (a user message of sentences like the above), then
# the reply as the assistant's message.  A top-level function call is one sentence
# ("Earlier, greet was called with name='Ada' and returned 'Hello, Ada.'.").
# :func:`turn_text` is the same text as one string (for a summary of earlier turns).


def statement(node: Call) -> str:
    """One call as a plain sentence: ``name was called with a='x' and returned 'y'``,
    ``... and failed: ValueError: ...``; a model call as what it was asked and answered."""
    if node.kind == "llm":
        content = node.input.get("content") if isinstance(node.input, dict) else node.input
        said = clip(as_text(node.output), 1000)
        return f"The model was asked {clip(as_text(content), 1000)!r} and answered {said!r}"
    args = node.input if isinstance(node.input, dict) else {}
    shown = ", ".join(f"{k}={_value(v, 200)}" for k, v in args.items())
    called = f"{node.name} was called" + (f" with {shown}" if shown else "")
    if node.status not in ("completed", "answered"):
        error = as_text(node.metadata.get("error")) or node.status
        return f"{called} and failed: {clip(error, 1000)}"
    if node.output in (None, ""):
        return f"{called} and returned nothing"
    return f"{called} and returned {_value(node.output, 1000)}"


def _value(value: Any, limit: int) -> str:
    """A value in a statement: text quoted (``'bug'``), anything else as written (``42``)."""
    return repr(clip(value, limit)) if isinstance(value, str) else clip(as_text(value), limit)


def _asked(node: Call) -> str:
    """What a turn's text asked: a chat message as written, a cell's source without its
    ``%%`` magic line."""
    text = as_text(node.input.get("text") if isinstance(node.input, dict) else node.input)
    lines = text.strip().splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        lines = lines[1:]
    return "\n".join(lines).strip()


def _statements(kids: list[Call], chat: bool = False) -> list[str]:
    """The calls made in a turn (its functions, tools and — not in a chat turn, whose reply
    says it — model calls; not asides, not rejected attempts), each as a sentence."""
    kinds = ("function", "tool") if chat else ("function", "tool", "llm")
    return [
        statement(c) + "."
        for c in kids
        if c.kind in kinds and not c.metadata.get("aside") and not c.metadata.get("rejected")
    ]


def _turn_history(node: Call, children: Callable[[Call], list[Call]]) -> list[Message]:
    kids = children(node)
    replies = [c for c in kids if c.kind == "reply" and not c.metadata.get("aside")]
    done = _statements(kids, chat=bool(replies))
    if replies:  # a chat message: a conversation
        messages: list[Message] = [{"role": "user", "content": clip(_asked(node))}]
        if done:
            messages.append({"role": "user", "content": clip("\n".join(["Meanwhile:", *done]))})
        said = "\n".join(_child_part(r) for r in replies)
        return [*messages, {"role": "assistant", "content": said}]
    return [{"role": "user", "content": clip(turn_text(node, lambda _n: kids))}]


def turn_text(node: Call, children: Callable[[Call], list[Call]]) -> str:
    """An earlier turn as plain statements: what was asked and what came back (see above).
    For a chat turn: the user's words, what its tools did, the reply."""
    kids = children(node)
    replies = [_child_part(c) for c in kids if c.kind == "reply" and not c.metadata.get("aside")]
    done = _statements(kids, chat=bool(replies))
    asked = _asked(node)
    if replies:
        lines = [f"The user said: {asked}", *done, *(f"The reply: {r}" for r in replies)]
        return "\n".join(lines)
    if node.output not in (None, ""):
        done.append(f"The {_what(node)}'s result: {clip(as_text(node.output), 1000)}")
    if not done:
        ended = "" if node.status == "completed" else f" ({node.status})"
        return f"Earlier ({node.name}), this code ran{ended} and returned nothing:\n{asked}"
    return "\n".join([f"Earlier ({node.name}):", *(f"- {line}" for line in done)])


def _what(node: Call) -> str:
    return "cell" if str(node.name).startswith("cell") else "turn"


def summary_messages(node: Call) -> list[Message]:
    """A summary node in a prompt: what the turns it covers said, in a few lines."""
    covers = node.metadata.get("covers")
    count = len(covers) if isinstance(covers, list) else 0
    head = f"[Summary of the {count} earlier turns (kept in the session, not shown here)]"
    return [{"role": "user", "content": f"{head}\n{clip(as_text(node.output))}"}]


def _child_part(node: Call) -> str:
    """What a call made during a turn contributes to that turn's assistant message; a chat
    ``reply`` nested under a user message contributes its text (or how it ended)."""
    if node.kind != "reply":
        return f"{call_line(node)} -> {clip(as_text(node.output), 1000)}"
    if node.output not in (None, ""):
        return clip(as_text(node.output))
    return f"[{node.status}] {as_text(node.metadata.get('error'))}".strip()


def render_messages(
    visible: Visible,
    content: Any,
    children: Callable[[Call], list[Call]] = lambda _node: [],
) -> list[Message]:
    """The full prompt: docstring once, history, earlier steps, then ``content``."""
    messages: list[Message] = []
    if visible.doc:
        messages.append({"role": "system", "content": visible.doc})
    for node in visible.history:
        messages.extend(turn_messages(node, children))
    rounds = sum(1 for node in visible.steps if node.kind == "llm")
    for node in visible.steps:
        rounds -= node.kind == "llm"  # model calls made after this step
        aged = rounds >= AGE_ROUNDS and node.kind == "tool"
        messages.extend(aged_step(node) if aged else step_messages(node))
    messages.append({"role": "user", "content": as_text(content)})
    return messages


AGE_ROUNDS = 2  # a tool result this many model calls old is shown by its size and node
AGE_CHARS = 400  # ... when it is longer than this


def aged_step(node: Call) -> list[Message]:
    """A long tool result the model has seen for a while: its size and the node keeping
    it, not its text (short results and errors stay as they are)."""
    text = as_text(node.output)
    if node.status != "completed" or len(text) <= AGE_CHARS:
        return step_messages(node)
    shown = f"[{len(text)} chars, seen earlier; kept in node {node.id}]"
    return [{"role": "user", "content": f"Earlier step: {call_line(node)} -> {shown}"}]


def full_messages(
    node: Call,
    lookup: Callable[[str], Call | None],
    children: Callable[[Call], list[Call]] = lambda _node: [],
) -> list[Message]:
    """The prompt an ``llm`` node was sent: its own messages with the earlier turns it
    names (``metadata["context"]["turns"]``) rendered back in at ``context["at"]``.

    A node from before the context record (whole prompt stored) is returned as stored; a
    turn that can no longer be read is shown as a one-line placeholder.
    """
    own = node.metadata.get("messages")
    own = list(own) if isinstance(own, list) else []
    context = node.metadata.get("context")
    if not isinstance(context, dict) or not isinstance(context.get("turns"), list):
        return own
    at = context.get("at", 0)
    at = at if isinstance(at, int) and 0 <= at <= len(own) else 0
    history: list[Message] = []
    for turn_id in context["turns"]:
        turn = lookup(turn_id) if isinstance(turn_id, str) else None
        if turn is None:
            history.append({"role": "user", "content": f"[earlier turn {turn_id} not found]"})
        else:
            history.extend(turn_messages(turn, children))
    return own[:at] + history + own[at:]
