"""A goal that keeps working (issue 22): after each turn one judge call decides whether the
goal is met; if not, a continuation turn follows — until met, a limit, a stop, or a
question to the user.  The ``function`` provider scripts the model and the judge."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from openprogram import create_runtime
from openprogram.agent import dispatcher as D
from openprogram.agent.background import BackgroundRun
from openprogram.agent.dispatcher.goal import Goal
from openprogram.agent.session_db import default_db
from openprogram.context.nodes import Call
from openprogram.errors import UserError
from openprogram.providers.base import LLMRequest, LLMResponse, ToolCall
from openprogram.providers.test import FunctionProvider
from openprogram_magics import commands

JUDGE = "You check whether a goal is met"


def is_judge(request: LLMRequest) -> bool:
    return str(request.messages[0].get("content", "")).startswith(JUDGE)


def verdict(met: bool, reason: str, next_step: str = "") -> str:
    return json.dumps({"met": met, "reason": reason, "next": next_step})


class Script:
    """The model: the agent answers ``work N``; the judge says met at ``met_at``."""

    def __init__(self, met_at: int | None, on_agent: Callable[[int], None] | None = None):
        self.met_at, self.on_agent = met_at, on_agent
        self.agent_calls = 0
        self.judge_calls: list[LLMRequest] = []
        self.other_calls = 0  # a title written after a few turns
        self.agent_requests: list[LLMRequest] = []

    def __call__(self, request: LLMRequest) -> str:
        if not str(request.messages[0].get("content", "")).startswith(("You check", "You are")):
            self.other_calls += 1
            return "Papers that contradict X"
        if is_judge(request):
            n = len(self.judge_calls)
            self.judge_calls.append(request)
            if self.met_at is not None and n >= self.met_at:
                return verdict(True, "three papers are summarised")
            return verdict(False, f"only {n} papers so far", "find one more paper")
        n = self.agent_calls
        self.agent_calls += 1
        self.agent_requests.append(request)
        if self.on_agent is not None:
            self.on_agent(n)
        return f"work {n}"


def chain_turns(session_id: str) -> list[Call]:
    session = default_db().open(session_id)
    return [c for c in session.chain(session.head_id, 50) if c.kind != "root"]


def under(session_id: str, node_id: str) -> list[Call]:
    session = default_db().open(session_id)
    return [session.get(i) for i in session.children(node_id)]


def goal_request(script: Script, goal: Any, **kw: Any) -> D.TurnRequest:
    rt = create_runtime(FunctionProvider(script), backoff=0.0, max_retries=0)
    return D.TurnRequest(None, "find three papers that contradict X", runtime=rt, goal=goal, **kw)


def test_a_goal_met_on_the_third_continuation_runs_four_turns_and_stops_there() -> None:
    script = Script(met_at=3)
    events: list[dict[str, Any]] = []
    result = D.process_user_turn(
        goal_request(script, "summarise three papers", on_event=events.append)
    )

    assert result.status == "completed" and result.text == "work 3"
    assert result.goal is not None
    assert (result.goal["status"], result.goal["continuations"]) == ("met", 3)
    turns = chain_turns(result.session_id)
    assert [t.name for t in turns] == ["user", "continuation", "continuation", "continuation"]
    assert [t.metadata.get("goal", {}).get("n") for t in turns] == [None, 1, 2, 3]
    assert result.goal["turns"] == [t.id for t in turns]
    # the continuation says what the check found and what to do next
    assert "only 0 papers so far" in str(turns[1].input["text"])
    assert "find one more paper" in str(turns[1].input["text"])
    # exactly one judge call per turn, each under its turn's user message
    assert len(script.judge_calls) == 4 and script.agent_calls == 4
    for turn in turns:
        (judge,) = [c for c in under(result.session_id, turn.id) if c.name == "goal_judge"]
        assert judge.kind == "function" and judge.status == "completed"
        assert [c.kind for c in under(result.session_id, judge.id)] == ["llm"]
    assert "The assistant's latest reply:\nwork 3" in script.judge_calls[-1].messages[-1]["content"]
    # the checks are asides: later prompts show the turns' replies, never the judge's words
    assert not [r for r in script.agent_requests if "goal_judge" in str(r.messages)]
    meta = default_db().open(result.session_id).meta
    assert meta["goal"]["status"] == "met"  # what `%openprogram goal` shows
    goal_events = [e["state"]["status"] for e in events if e["type"] == "goal"]
    assert goal_events == ["active", "active", "active", "met"]


def test_a_goal_stops_at_its_turn_limit() -> None:
    script = Script(met_at=None)
    result = D.process_user_turn(goal_request(script, Goal("never done", max_turns=2)))
    assert result.goal is not None
    assert (result.goal["status"], result.goal["continuations"]) == ("turn_limit", 2)
    assert len(chain_turns(result.session_id)) == 3 and len(script.judge_calls) == 3


def test_a_goal_stops_at_its_token_limit() -> None:
    script = Script(met_at=None)
    result = D.process_user_turn(goal_request(script, Goal("never done", max_tokens=1)))
    assert result.goal is not None and result.goal["status"] == "token_limit"
    assert result.goal["tokens"] > 0 and len(chain_turns(result.session_id)) == 1


def test_openprogram_stop_ends_a_goal_run_after_the_call_in_flight() -> None:
    """The goal runs on a background run (as ``--background`` work does); ``%openprogram
    stop`` during the first continuation's model call ends the run: that turn's reply is
    kept, its goal check is not made, no further turn starts."""
    host = SimpleNamespace(background=None)
    said: list[str] = []

    def stop_during(n: int) -> None:
        if n == 1:
            said.append(commands.run(host, "stop"))  # type: ignore[arg-type]

    script = Script(met_at=None, on_agent=stop_during)
    request = goal_request(script, "never done")
    run = BackgroundRun(lambda _run: D.process_user_turn(request), label="goal")
    host.background = run
    run.start()
    result = run.wait(60)

    assert said == ["stopping after the current call (stop again to kill it now)"]
    assert result.goal["status"] == "stopped"
    turns = chain_turns(result.session_id)
    assert [t.name for t in turns] == ["user", "continuation"]
    assert result.text == "work 1" and result.status == "completed"
    assert len(script.judge_calls) == 1  # the stopped turn's check never reached the model
    nodes = default_db().open(result.session_id).nodes()
    assert not [n for n in nodes if n.status == "running"]


def test_a_question_to_the_user_pauses_the_goal() -> None:
    from openprogram import ask_user

    def confirm(question: str) -> str:
        """Ask the user."""
        return str(ask_user(question))

    calls = {"agent": 0}

    def model(request: LLMRequest) -> LLMResponse:
        if is_judge(request):
            return LLMResponse(verdict(False, "needs the user's choice"))
        calls["agent"] += 1
        if calls["agent"] == 1:
            return LLMResponse("", tool_calls=[ToolCall("c", "confirm", {"question": "Which X?"})])
        return LLMResponse("asked which X")

    rt = create_runtime(FunctionProvider(model), backoff=0.0, max_retries=0)
    request = D.TurnRequest(None, "go", runtime=rt, goal="pick X", tools={"confirm": confirm})
    result = D.process_user_turn(request)
    assert result.goal is not None and result.goal["status"] == "question"
    assert len(chain_turns(result.session_id)) == 1


def test_a_goal_needs_words() -> None:
    with pytest.raises(UserError, match="a goal needs words"):
        Goal("  ")
    with pytest.raises(UserError, match="goal= takes text or a Goal"):
        D.process_user_turn(D.TurnRequest(None, "x", goal=3))


def test_openprogram_chat_goal_in_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """The offline ``test`` provider's judge never writes the JSON asked for: not met, so
    the one continuation allowed runs and the run ends at its limit, saying so."""
    from openprogram.cli import main

    argv = ["chat", "--provider", "test", "--goal", "name a heron", "--goal-turns", "1"]
    assert main([*argv, "-m", "what bird is grey and tall?"]) == 0
    out = capsys.readouterr().out
    assert "[goal not met yet: the check's reply was not the JSON asked for" in out
    assert "— continuation 1]" in out and "[goal turn limit after 1 continuation(s)" in out
    sid = out.split()[1]
    assert [t.name for t in chain_turns(sid)] == ["user", "continuation"]
    assert main(["chat", "--goal-turns", "-1", "--goal", "x", "-m", "hi"]) == 2
    assert "a goal's turn limit must be 0 or more" in capsys.readouterr().err


def test_the_goal_command_sets_shows_and_clears_the_notebooks_goal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    script = Script(met_at=1)
    done = D.process_user_turn(goal_request(script, "two facts"))
    host = SimpleNamespace(current_session_id=lambda: done.session_id)
    set_ = commands.run(host, 'goal "three facts about herons" --turns 2')  # type: ignore[arg-type]
    assert set_ == Goal("three facts about herons", max_turns=2) and host.chat_goal == set_
    capsys.readouterr()
    state = commands.run(host, "goal")  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "goal: three facts about herons (at most 2 continuation turns)" in out
    assert "last run: two facts: goal met after 1 continuation(s)" in out
    assert state["status"] == "met"
    commands.run(host, "goal --clear")  # type: ignore[arg-type]
    assert host.chat_goal is None
    with pytest.raises(UserError, match="a goal needs words"):
        commands.run(host, 'goal " "')  # type: ignore[arg-type]


def test_ctrl_c_in_a_continuation_cancels_that_turn_and_ends_the_run() -> None:
    def interrupt(n: int) -> None:
        if n == 1:
            raise KeyboardInterrupt

    script = Script(met_at=None, on_agent=interrupt)
    request = goal_request(script, "never done")
    with pytest.raises(KeyboardInterrupt):
        D.process_user_turn(request)
    (sid,) = [m["id"] for m in default_db().list_sessions()]
    turns = chain_turns(sid)
    assert [t.name for t in turns] == ["user", "continuation"]
    (reply,) = [c for c in under(sid, turns[1].id) if c.kind == "reply"]
    assert reply.status == "cancelled"
    on_disk = json.loads((default_db().open(sid).path / "meta.json").read_text())
    assert on_disk["goal"]["status"] == "stopped"  # committed
    assert on_disk["goal"]["reason"] == "interrupted during a turn"
