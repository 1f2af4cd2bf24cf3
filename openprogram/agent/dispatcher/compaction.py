"""History that compacts: when a turn's history would not fit the context budget, the
older turns are replaced *in the prompt* by a summary node; nothing leaves the session.

The summary node is a ``function`` node named ``summary`` under the user message of the
turn that needed it (the DAG shows it there); ``metadata.covers`` lists the turn-level
node ids it stands for, oldest first (a later summary takes over an earlier one's, so the
newest summary covers everything before the turns kept verbatim), ``metadata.written_by``
says whether the model wrote it (:func:`summarize_history`, an agentic function nested
under it) or the structural fallback did (no model, or the model call failed).  The
session's ``meta.json`` maps the newest node a summary covers to the summary
(``summaries``), so the history walk (:func:`openprogram.context.policy.select_history`)
renders the summary when it reaches that node and stops there.  The summary takes one place
of the policy's turn window, so at most ``turns - 1`` turns stay verbatim beside it (a
window of one turn shows the summary alone) and a window of no turns writes no summary: a
summary is only written where the walk will reach it.

The common case is cheap: :func:`needed` is the same bounded walk the prompt makes
(at most the policy's turns), so the decision costs the same for a 1,000-turn session as
for a 30-turn one (``benchmarks/bench_compaction.py``).  A provider error saying the
context is too long (:func:`is_context_overflow`) compacts once and retries once
(:func:`retry_on_overflow`); a second overflow is the turn's error, never a loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from openprogram.agentic_programming.function import (
    agentic_function,
    get_current_runtime,
    using_call_id,
)
from openprogram.agentic_programming.prompt import SUMMARIES_KEY, summary_lookup
from openprogram.agentic_programming.provider import is_context_overflow as is_context_overflow
from openprogram.context.nodes import COMPLETED, Call, make_call
from openprogram.context.policy import DEFAULT_TURNS, ContextPolicy, effective, estimate_tokens
from openprogram.errors import UserError

if TYPE_CHECKING:
    from openprogram.agent.dispatcher.prep import PreparedTurn
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram.store.session.context import SessionNodeWriter
    from openprogram.store.session.store import Session

T = TypeVar("T")

SUMMARY_NAME = "summary"
KEEP_RECENT = 4  # turns kept verbatim after a compaction (fewer when long or the window is short)
SUMMARY_SHARE = 4  # a summary takes at most budget / SUMMARY_SHARE tokens
TURN_CHARS = 600  # of each turn shown to the summarizer
MAX_INPUT_CHARS = 24_000  # of the turns handed to the summarizer in one call


def history_policy(runtime: Runtime | None) -> ContextPolicy:
    return effective(getattr(runtime, "context", None))


def window(policy: ContextPolicy) -> int:
    """How many earlier turns (a summary counting as one) ``policy`` lets a prompt show."""
    return policy.turns if policy.turns is not None else DEFAULT_TURNS


def needed(session: Session, before: str | None, policy: ContextPolicy) -> bool:
    """Whether the history a prompt chained after ``before`` would see leaves turns out
    (over the turn or token budget) that no summary stands for; never for a policy that
    shows no earlier turn (no summary would be shown either)."""
    from openprogram.agentic_programming.prompt import history_after

    if window(policy) == 0:
        return False
    history = history_after(session, before, policy)
    return history.earlier or bool(history.over_budget)


def before_turn(prepared: PreparedTurn) -> str | None:
    """Stage 3a: compact when this turn's history would not fit; the summary's id."""
    session = prepared.writer.nodes.session
    user = prepared.writer.user
    assert user is not None
    policy = history_policy(get_current_runtime())
    if not needed(session, user.predecessor, policy):
        return None
    summary = compact(prepared.writer.nodes, user.predecessor, policy, caller=user.id)
    return summary.id if summary is not None else None


def retry_on_overflow(prepared: PreparedTurn, run: Callable[[], T]) -> T:
    """``run()``; when the provider says the context is too long: one compaction (all but
    the newest turn), one retry.  A second overflow, or nothing to compact, is raised."""
    try:
        return run()
    except Exception as exc:
        if not is_context_overflow(exc):
            raise
        user = prepared.writer.user
        assert user is not None
        policy = history_policy(get_current_runtime())
        summary = compact(prepared.writer.nodes, user.predecessor, policy, caller=user.id, keep=1)
        if summary is None:
            raise
    return run()


def compacted_in(prepared: PreparedTurn) -> str | None:
    """The summary node this turn wrote (the newest one), if any."""
    user = prepared.writer.user
    if user is None:
        return None
    session = prepared.writer.nodes.session
    found = None
    for child_id in session.children(user.id):
        node = session.get(child_id)
        if node.kind == "function" and "covers" in node.metadata:
            found = node.id
    return found


def trigger_compaction(session_id: str, *, runtime: Runtime | None = None) -> str | None:
    """Compact ``session_id``'s history now (``%openprogram compact``): a turn of its own
    (a ``turn`` node named ``compact`` holding the summary), the summary's id; None when
    there is nothing to compact (fewer turns than are kept verbatim) or the history policy
    shows no earlier turn."""
    from openprogram.agent.dispatcher.turn_writer import TurnWriter
    from openprogram.agent.session_db import default_db
    from openprogram.store.session.context import session_context
    from openprogram.store.session.files import validate_session_id
    from openprogram.store.vars import get_store

    sid = validate_session_id(session_id)
    if not default_db().exists(sid):
        raise UserError(f"session {sid} has no turns yet: nothing to compact")
    with session_context(sid, runtime=runtime, source="chat", message="compact") as handle:
        writer = get_store()
        assert writer is not None
        session = writer.session
        before = session.head_id
        policy = history_policy(handle.runtime)
        turn = TurnWriter(writer).persist_user("compact the history", None, name="compact")
        summary = compact(writer, before, policy, caller=turn.id)
        if summary is None:
            turn.output = "nothing to compact"
        else:
            turn.output = f"summary {summary.id} covers {len(summary.metadata['covers'])} turns"
        writer.update(turn)
    return summary.id if summary is not None else None


# -- writing a summary -------------------------------------------------------------------
def compact(
    writer: SessionNodeWriter,
    before: str | None,
    policy: ContextPolicy,
    *,
    caller: str,
    keep: int = KEEP_RECENT,
) -> Call | None:
    """Write a summary node under ``caller`` standing for the turns before ``before``
    except the newest ones kept verbatim (at most ``keep``, at most half the token budget,
    and few enough that the summary still fits the turn window after them); None when no
    turn is left to cover or the policy shows no earlier turn."""
    session = writer.session
    budget = policy.tokens if policy.tokens is not None else 4000
    if window(policy) == 0:
        return None
    keep = min(keep, window(policy) - 1)  # the summary takes one place of the window
    turns, previous = uncovered_turns(session, before)  # newest first
    kept = _kept(session, turns, keep, budget // 2)
    newly = turns[kept:]
    if not newly:
        return None
    newly.reverse()  # oldest first
    covers = [*(previous.metadata.get("covers", []) if previous else []), *(t.id for t in newly)]
    if previous is not None:
        covers.append(previous.id)
    node = make_call(
        "function",
        SUMMARY_NAME,
        input={"turns": len(newly), "after": previous.id if previous else None},
        caller=caller,
        aside=True,  # a later prompt shows it in place of what it covers, not in its turn
    )
    node = writer.append(node)
    limit = max(200, budget // SUMMARY_SHARE * 3)  # characters: tokens are chars / 3
    text, by = _write(session, node.id, previous, newly, limit)
    node.output = text
    node.metadata.update(covers=covers, written_by=by, status=COMPLETED, through=newly[-1].id)
    writer.update(node)
    table = dict(session.meta.get(SUMMARIES_KEY) or {})
    table[newly[-1].id] = node.id
    session.set_meta(**{SUMMARIES_KEY: table})
    return node


def uncovered_turns(session: Session, before: str | None) -> tuple[list[Call], Call | None]:
    """The turn-level nodes from ``before`` back to the root or to the first node a
    summary stands for (newest first), and that summary."""
    find = summary_lookup(session) or (lambda _node_id: None)
    out: list[Call] = []
    seen: set[str] = set()
    node_id = before
    while node_id is not None and node_id not in seen:
        seen.add(node_id)
        summary = find(node_id)
        if summary is not None:
            return out, summary
        try:
            node = session.get(node_id)
        except KeyError:
            break
        if node.kind == "root":
            break
        out.append(node)
        node_id = node.predecessor
    return out, None


def _kept(session: Session, turns: list[Call], keep: int, tokens: int) -> int:
    """How many of the newest ``turns`` stay verbatim: at most ``keep``, within ``tokens``."""
    from openprogram.context.render import turn_messages

    def kids(node: Call) -> list[Call]:
        return [session.get(i) for i in session.children(node.id)]

    used, count = 0, 0
    for turn in turns[:keep]:
        used += estimate_tokens(turn_messages(turn, kids))
        if used > tokens:
            break
        count += 1
    return count


def _write(
    session: Session, node_id: str, previous: Call | None, turns: list[Call], limit: int
) -> tuple[str, str]:
    """The summary's text and who wrote it (``model`` or ``structure``)."""
    lines = [_turn_line(session, t) for t in turns]
    earlier = str(previous.output or "") if previous is not None else ""
    runtime = get_current_runtime()
    if runtime is not None and runtime.configured:
        try:
            with using_call_id(node_id):
                text = summarize_history(earlier, _joined(lines), limit)
            text = " ".join(str(text).split()) if "\n" not in str(text) else str(text).strip()
            if text:
                return _clip(text, limit), "model"
        except Exception:  # the provider failed: the structure still stands for the turns
            pass
    return structural_summary(earlier, lines, limit), "structure"


@agentic_function(name="summarize_history", context=ContextPolicy(turns=0))
def summarize_history(
    earlier: str, turns: str, max_chars: int, runtime: Runtime | None = None
) -> str:
    """You keep a running summary of a long conversation so the assistant can go on
    without the old messages. Merge the earlier summary (if any) and the turns below
    into one summary: the user's goals and requests, facts and decisions established,
    results found, open questions, names and numbers that matter. Plain sentences, no
    preamble, within the character limit given."""
    assert runtime is not None, "a summary is written in a turn, which has a runtime"
    content = (
        f"Earlier summary:\n{earlier or '(none)'}\n\nTurns to add (oldest first):\n{turns}\n\n"
        f"Write the merged summary in at most {max_chars} characters."
    )
    return str(runtime.exec(content))


def structural_summary(earlier: str, lines: list[str], limit: int) -> str:
    """A summary without a model: the earlier summary, then one line per turn; the oldest
    lines give way first when it is too long."""
    body = [earlier] if earlier else []
    body += lines
    text = "\n".join(body)
    while len(text) > limit and len(body) > 1:
        body.pop(0)
        text = "\n".join(["(older turns left out)", *body])
    return _clip(text, limit)


def _turn_line(session: Session, turn: Call) -> str:
    """One line for a turn: what was asked, what came back (clipped)."""
    said = turn.input.get("text") if isinstance(turn.input, dict) else turn.input
    reply = turn.output
    for child_id in session.children(turn.id):
        child = session.get(child_id)
        if child.kind == "reply" and child.output not in (None, ""):
            reply = child.output
    ask = " ".join(str(said or "").split())[: TURN_CHARS // 2]
    got = " ".join(str(reply or "").split())[: TURN_CHARS // 2]
    return f"- {ask}" + (f" → {got}" if got else "")


def _joined(lines: list[str]) -> str:
    text = "\n".join(lines)
    return text if len(text) <= MAX_INPUT_CHARS else "…\n" + text[-MAX_INPUT_CHARS:]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
