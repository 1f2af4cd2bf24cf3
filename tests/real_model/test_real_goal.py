"""A goal run and a compaction on the real model (issue 22): the stages taken — one judge
call per turn, continuation turns, a model-written summary standing for the older turns
in the next prompt — never the (weak) model's wisdom."""

from __future__ import annotations

from pathlib import Path

import pytest
from real_server import ALIAS, RealServer

from openprogram import create_runtime
from openprogram.agent import dispatcher as D
from openprogram.agent.dispatcher.goal import Goal
from openprogram.agent.session_db import default_db
from openprogram.providers.openai_provider import OpenAIProvider

pytestmark = pytest.mark.realmodel
JUDGE = "You check whether a goal is met"


def test_a_goal_run_and_a_compaction_end_to_end(
    real_server: RealServer, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENPROGRAM_MAX_TOKENS", "24")  # short replies: a quick test
    rt = create_runtime(OpenAIProvider(ALIAS, base_url=real_server.base_url))
    since = len(real_server.exchanges)
    request = D.TurnRequest(
        None, "Name a bird.", runtime=rt, goal=Goal("name two birds", max_turns=1)
    )
    result = D.process_user_turn(request)
    assert result.status == "completed" and result.goal is not None
    assert result.goal["status"] in ("met", "turn_limit")
    turns = result.goal["turns"]
    assert len(turns) == 1 + result.goal["continuations"]
    sent = real_server.chats(since)
    judged = [x for x in sent if str(x.body["messages"][0]["content"]).startswith(JUDGE)]
    assert len(judged) == len(turns)  # one judge call per turn, no more

    sid = result.session_id
    for text in ("Name a fish.", "Name a tree.", "Name a river."):
        D.process_user_turn(D.TurnRequest(sid, text, runtime=rt))
    summary_id = D.trigger_compaction(sid, runtime=rt)
    assert summary_id is not None
    summary = default_db().open(sid).get(summary_id)
    assert summary.metadata["written_by"] == "model" and summary.metadata["covers"]
    since = len(real_server.chats())
    D.process_user_turn(D.TurnRequest(sid, "And a mountain?", runtime=rt))
    chat = real_server.chats(since)[0]  # the turn's first call: the agent's
    contents = [str(m["content"]) for m in chat.body["messages"]]
    assert contents[0] == D.DEFAULT_SYSTEM
    assert any(c.startswith("[Summary of the ") for c in contents)
