"""A goal that keeps working: after each turn a judge decides whether the goal is met;
if not, the dispatcher runs a continuation turn, until the goal is met, a limit is reached
(continuation turns, tokens, cost), the run is stopped, or the agent asked the user a
question (the user's answer is the next message; the goal stays open).

The judge is an ``@agentic_function`` whose docstring is its instruction, called once per
turn inside that turn (its ``function`` node and its one ``llm`` node hang under the turn's
user message), with the goal and the turn's reply as its content.  A continuation turn is
a turn of the session like any other, its user node named ``continuation`` with
``metadata.goal = {"text", "n"}`` (the DAG shows the name; the detail panel the field).

The state after each turn (``GoalState.to_dict()``) is on ``TurnResult.goal`` and in the
session's ``meta.json`` (``goal``), which ``%openprogram goal`` reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, TypeGuard

from openprogram.agent.dispatcher.aside import commit_meta, run_aside
from openprogram.agentic_programming.function import agentic_function
from openprogram.agentic_programming.stopping import stop_requested
from openprogram.context.outcome import ended_sentence
from openprogram.context.policy import ContextPolicy
from openprogram.errors import RunStopped, UserError

if TYPE_CHECKING:
    from openprogram.agent.dispatcher.prep import PreparedTurn
    from openprogram.agent.dispatcher.types import TurnRequest, TurnResult
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram.context.nodes import Call

DEFAULT_MAX_TURNS = 10  # continuation turns after the first
REPLY_CHARS = 3000  # of the turn's reply shown to the judge

# what a goal run ended with (``active``: it goes on, ``question``: waits for the user)
ACTIVE, MET, TURN_LIMIT, TOKEN_LIMIT, COST_LIMIT = (
    "active",
    "met",
    "turn_limit",
    "token_limit",
    ("cost_limit"),
)
STOPPED, QUESTION, FAILED, CLEARED = "stopped", "question", "failed", "cleared"
ENDED = frozenset({MET, TURN_LIMIT, TOKEN_LIMIT, COST_LIMIT, STOPPED, FAILED, CLEARED})

CONTINUE = (
    "Keep working toward the goal: {goal}\n"
    "The check after the last turn said it is not met yet: {reason}\n"
    "{next}Continue from where the last turn stopped; do not repeat what is done."
)


@dataclass(frozen=True)
class Goal:
    """What to keep working on, and the limits of one goal run: at most ``max_turns``
    continuation turns, ``max_tokens`` tokens and ``max_cost_usd`` dollars over the run's
    turns (judge calls included).  ``None``: no such limit."""

    text: str
    max_turns: int = DEFAULT_MAX_TURNS
    max_tokens: int | None = None
    max_cost_usd: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise UserError('a goal needs words: goal "what to achieve"')
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int):
            raise UserError(f"a goal's turn limit is a whole number, got {self.max_turns!r}")
        if self.max_turns < 0:
            raise UserError(f"a goal's turn limit must be 0 or more, got {self.max_turns}")


def as_goal(value: Any) -> Goal | None:
    """``TurnRequest.goal`` as a :class:`Goal` (text alone: the default limits)."""
    if value is None or isinstance(value, Goal):
        return value
    if isinstance(value, str):
        return Goal(value)
    raise UserError(f"goal= takes text or a Goal, got {type(value).__name__}")


@dataclass
class GoalState:
    """Where a goal run is after a turn."""

    text: str
    status: str = ACTIVE
    continuations: int = 0  # continuation turns run so far
    reason: str = ""  # the judge's last word (or why the run ended)
    next: str = ""  # what the judge said to do next
    tokens: int = 0
    cost_usd: float = 0.0
    turns: list[str] | None = None  # the user node ids of the run's turns, in order

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    met: bool
    reason: str
    next: str = ""
    status: str = ""  # set when the check itself ended the run (stopped, failed)


@agentic_function(name="goal_judge", context=ContextPolicy(turns=0))
def judge_goal(goal: str, reply: str, runtime: Runtime | None = None) -> dict[str, Any]:
    """You check whether a goal is met by the work an assistant did so far.
    Read the goal and the assistant's latest reply. Answer with one JSON object and
    nothing else: {"met": true or false, "reason": "one sentence why", "next": "if not
    met, the next concrete step"}. Say met only when the reply itself achieves the goal."""
    assert runtime is not None, "the judge runs in a turn, which has a runtime"
    answer = runtime.exec(f"Goal: {goal}\n\nThe assistant's latest reply:\n{reply}")
    return parse_verdict(str(answer))


def parse_verdict(text: str) -> dict[str, Any]:
    """The judge's reply as ``{"met", "reason", "next"}``; a reply that is not the JSON
    asked for counts as not met, and says so (never a second call)."""
    from openprogram.agentic_programming.validate import extract_json

    try:
        data = extract_json(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("met"), bool):
        return {
            "met": data["met"],
            "reason": str(data.get("reason") or ""),
            "next": str(data.get("next") or ""),
        }
    words = " ".join(text.split())[:200]
    return {"met": False, "reason": f"the check's reply was not the JSON asked for: {words}"}


def judge_turn(prepared: PreparedTurn, request: TurnRequest, result: TurnResult) -> Verdict:
    """Stage 6b: the one judge call of this turn, under the turn's user message."""
    goal = as_goal(request.goal)
    assert goal is not None
    reply = result.text if len(result.text) <= REPLY_CHARS else result.text[:REPLY_CHARS] + "…"
    reply = reply or "(no reply)"
    try:
        writer = prepared.writer
        said = run_aside(writer.nodes, writer.head_for_finalize(), judge_goal, goal.text, reply)
    except RunStopped:  # a stop during the check: the turn stands, the run ends
        return Verdict(False, "stopped during the goal check", status=STOPPED)
    except Exception as exc:  # the check failed (provider down...): the turn stands
        from openprogram.context.outcome import error_text

        return Verdict(False, f"the goal check failed: {error_text(exc)}", status=FAILED)
    return Verdict(bool(said.get("met")), str(said.get("reason", "")), str(said.get("next", "")))


def turn_cost(prepared: PreparedTurn) -> tuple[int, float, bool]:
    """Tokens and dollars spent by this turn's calls (the judge's included), and whether
    the agent asked the user a question in it."""
    session = prepared.writer.nodes.session
    tokens, cost, asked = 0, 0.0, False
    todo = [prepared.writer.head_for_finalize()]
    while todo:
        node_id = todo.pop()
        for child_id in session.children(node_id):
            node = session.get(child_id)
            meta = node.metadata
            if node.kind == "llm":
                tokens += llm_tokens(node)
            if _num(meta.get("cost")):
                cost += float(meta["cost"])
            asked = asked or node.kind == "ask_user"
            todo.append(child_id)
    return tokens, cost, asked


def llm_tokens(node: Call) -> int:
    """An ``llm`` node's tokens: the provider's count, else estimated as the budget does
    (the prompt's recorded estimate plus the reply's characters / 3)."""
    usage = node.metadata.get("usage")
    if isinstance(usage, dict):
        counted = [v for v in (usage.get("input_tokens"), usage.get("output_tokens")) if _num(v)]
        if counted:
            return int(sum(counted))
    context = node.metadata.get("context")
    prompt = context.get("prompt_tokens") if isinstance(context, dict) else None
    return (int(prompt) if _num(prompt) else 0) + -(-len(str(node.output or "")) // 3)


def _num(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def after_turn(
    prepared: PreparedTurn, request: TurnRequest, result: TurnResult, state: GoalState
) -> GoalState:
    """Stage 6b of a completed turn: judge it, add what it spent, decide whether the run goes
    on; the state is kept in the session's ``meta.json`` (written by the turn's commit)."""
    goal = as_goal(request.goal)
    assert goal is not None
    state.turns = [*(state.turns or []), result.user_node_id]
    verdict = judge_turn(prepared, request, result)
    state.reason, state.next = verdict.reason, verdict.next
    tokens, cost, asked = turn_cost(prepared)
    state.tokens += tokens
    state.cost_usd = round(state.cost_usd + cost, 8)
    state.status = verdict.status or _next_status(goal, state, verdict.met, asked)
    prepared.writer.nodes.session.set_meta(goal=state.to_dict())
    return state


def _next_status(goal: Goal, state: GoalState, met: bool, asked: bool) -> str:
    if met:
        return MET
    if asked:
        return QUESTION
    if stop_requested():
        return STOPPED
    if goal.max_tokens is not None and state.tokens >= goal.max_tokens:
        return TOKEN_LIMIT
    if goal.max_cost_usd is not None and state.cost_usd >= goal.max_cost_usd:
        return COST_LIMIT
    if state.continuations >= goal.max_turns:
        return TURN_LIMIT
    return ACTIVE


def continuation_request(request: TurnRequest, state: GoalState, last: TurnResult) -> TurnRequest:
    """The next turn of the run: in the last turn's session, chained after its message."""
    state.continuations += 1
    step = f"Next step: {state.next}\n" if state.next else ""
    text = CONTINUE.format(goal=state.text, reason=state.reason or "(no reason given)", next=step)
    mark = {"text": state.text, "n": state.continuations}
    return replace(
        request,
        session_id=last.session_id,
        text=text,
        fork_from=last.user_node_id,
        continuation=mark,
    )


def new_state(request: TurnRequest) -> GoalState:
    goal = as_goal(request.goal)
    assert goal is not None
    return GoalState(goal.text)


def keep_working(
    request: TurnRequest, run_turn: Callable[[TurnRequest, GoalState], TurnResult]
) -> TurnResult:
    """Turns of ``request`` and its continuations until the goal run ends; the last
    turn's result, its ``goal`` saying how the run ended."""
    from openprogram.agent.dispatcher.types import emit

    request = replace(request, goal=as_goal(request.goal))
    state = new_state(request)
    try:
        result = run_turn(request, state)
        while result.goal is not None and result.goal["status"] == ACTIVE:
            state = GoalState(**result.goal)
            emit(request, {"type": "goal", "state": state.to_dict()})
            request = continuation_request(request, state, result)
            result = run_turn(request, state)
    except KeyboardInterrupt:  # Ctrl-C, a stop: the turn is recorded cancelled; so is the run
        record_stopped(request.session_id, state)
        raise
    if result.goal is None:  # the turn failed before its check
        status = STOPPED if result.status == "cancelled" else FAILED
        why = ended_sentence("the turn", result.status, result.error)
        result.goal = GoalState(new_state(request).text, status, reason=why).to_dict()
    emit(request, {"type": "goal", "state": result.goal})
    return result


def record_stopped(session_id: str | None, state: GoalState) -> None:
    """The run ended by an interrupt mid-turn: ``meta.json`` says so (its own commit)."""
    from openprogram.agent.session_db import default_db

    if session_id is None or not default_db().exists(session_id):
        return
    state.status, state.reason = STOPPED, "interrupted during a turn"
    try:
        commit_meta(session_id, "goal stopped", goal=state.to_dict())
    except Exception:  # never hide the interrupt behind a bookkeeping error
        pass
