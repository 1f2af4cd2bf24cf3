"""``%openprogram context [--full]``: what the next call is sent of earlier turns, and the
policy that chose them."""

from __future__ import annotations

from argparse import Namespace
from typing import TYPE_CHECKING

from openprogram_magics.commands import Host, arg, command

if TYPE_CHECKING:
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram_magics.notebook import NotebookMeta


@command(
    "context",
    "what the next call in a cell of this notebook is sent of earlier turns, and the policy",
    arg("--full", action="store_true", help="do not clip the messages"),
)
def context(host: Host, args: Namespace) -> list[str]:
    lines = context_lines(host.current_meta(), host.runtime(), full=args.full)
    print("\n".join(lines))
    return lines


def context_lines(meta: NotebookMeta | None, runtime: Runtime, *, full: bool = False) -> list[str]:
    """What the next call at the top of a cell of this notebook would be sent: the earlier
    turns the notebook's context policy lets through, counted back from the turn its next
    cell chains after (the notebook's last turn; the session's HEAD when the notebook has
    not written to it), their estimated tokens, what was left out, then the messages
    (on one line, clipped to 300 characters; ``full``: the exact text, line by line).
    When the session's HEAD has moved on past the notebook's last turn (another notebook
    or process wrote), it says so: the next cell forks and does not see those turns."""
    from openprogram.agent.session_db import default_db
    from openprogram.agentic_programming.prompt import history_after
    from openprogram.context.policy import ContextPolicy, effective
    from openprogram.view.inert import terminal_text
    from openprogram_magics.turn import chained_after

    policy = effective(runtime.context)
    rule = (
        f"policy: at most {policy.turns} turns and {policy.tokens} tokens of history, "
        f"failed turns {'included' if policy.failed else 'left out'} "
        "(%config OpenProgramMagics.history_turns / history_tokens / history_failed)"
    )
    db = default_db()
    if meta is None or not db.exists(meta.session_id):
        return ["the next call sees no earlier turns (the session has none yet)", rule]
    session_id = meta.session_id
    session = db.open(session_id)
    session.sync()  # turns another process wrote since
    head = session.head_id
    after = chained_after(session, meta) or head
    seen = history_after(session, after, runtime.context or ContextPolicy())
    left = [f"{len(seen.failed)} failed"] if seen.failed else []
    left += ["the turn over the token budget"] if seen.over_budget else []
    left += ["older turns"] if seen.earlier else []
    lines = [
        f"the next call sees {len(seen.turns)} earlier turns of {session_id} "
        f"(~{seen.tokens} tokens)" + (f"; left out: {', '.join(left)}" if left else ""),
        rule,
    ]
    if after != head:
        lines.append(
            f"this notebook's last turn is {after}; the session's HEAD moved on to {head} "
            f"(written elsewhere): the next cell forks from {after} and does not see it"
        )
    lines.append("  [system]    (the called function's docstring, if any)")
    for message in seen.messages:
        role = str(message.get("role"))
        head = f"  [{role}]{' ' * (10 - len(role))}"
        if full:  # the exact text, line by line (continuation lines indented under it)
            text = terminal_text(str(message.get("content", "")), keep_newlines=True)
            first, *rest = text.split("\n")
            lines.append(head + first)
            lines.extend(" " * len(head) + line for line in rest)
            continue
        text = terminal_text(" ".join(str(message.get("content", "")).split()))
        if len(text) > 300:
            text = text[:299] + "…"
        lines.append(head + text)
    lines.append("  [user]      (the call's content)")
    return lines
