"""Titles (issue 22): a session is titled from its first message at once, the model writes
a title after a few turns, and a title the user sets sticks; ``sessions list``, the DAG
and ``%openprogram status`` show it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from openprogram import create_runtime
from openprogram.agent import dispatcher as D
from openprogram.agent.dispatcher.titles import RETITLE_AFTER, clean_title, rename
from openprogram.agent.session_db import default_db
from openprogram.cli import main
from openprogram.errors import UserError
from openprogram.providers.base import LLMRequest
from openprogram.providers.test import FunctionProvider
from openprogram_magics import commands

TITLER = "You name conversations"


class Model:
    def __init__(self) -> None:
        self.titles: list[LLMRequest] = []

    def __call__(self, request: LLMRequest) -> str:
        if str(request.messages[0]["content"]).startswith(TITLER):
            self.titles.append(request)
            return '"Heron migration routes."'
        return "noted"


def turns(n: int, model: Model, sid: str | None = None) -> str:
    rt = create_runtime(FunctionProvider(model), backoff=0.0, max_retries=0)
    for i in range(n):
        sid = D.process_user_turn(
            D.TurnRequest(sid, f"where do herons fly in winter? ({i})\nsecond line", runtime=rt)
        ).session_id
    assert sid is not None
    return sid


def meta(sid: str) -> dict[str, Any]:
    return dict(default_db().open(sid).meta)


def listed(capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["sessions", "list"]) == 0
    return capsys.readouterr().out


def test_the_first_message_titles_the_session_then_the_model_retitles_it_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = Model()
    sid = turns(1, model)
    assert (meta(sid)["title"], meta(sid)["title_source"]) == (
        "where do herons fly in winter? (0)",
        "first_message",
    )
    assert "where do herons fly in winter? (0)" in listed(capsys)

    turns(RETITLE_AFTER - 2, model, sid)
    assert model.titles == [] and meta(sid)["title_source"] == "first_message"
    turns(1, model, sid)  # the RETITLE_AFTER-th turn: one title call
    assert len(model.titles) == 1
    assert (meta(sid)["title"], meta(sid)["title_source"]) == ("Heron migration routes", "model")
    asked = str(model.titles[0].messages[-1]["content"])
    assert asked.count("user: where do herons fly") == RETITLE_AFTER
    turns(3, model, sid)
    assert len(model.titles) == 1  # written once
    assert "Heron migration routes" in listed(capsys)

    session = default_db().open(sid)  # the title call hangs under its turn, as an aside
    (call,) = [n for n in session.nodes() if n.name == "session_title"]
    assert call.metadata["aside"] is True and session.get(call.caller or "").kind == "turn"


def test_a_users_rename_sticks(capsys: pytest.CaptureFixture[str]) -> None:
    model = Model()
    sid = turns(2, model)
    host = _Host(sid)
    assert commands.run(host, 'title "Field notes: herons"') == "Field notes: herons"  # type: ignore[arg-type]
    assert (meta(sid)["title"], meta(sid)["title_source"]) == ("Field notes: herons", "user")
    on_disk = json.loads((default_db().open(sid).path / "meta.json").read_text())
    assert on_disk["title"] == "Field notes: herons"  # committed at once
    turns(RETITLE_AFTER + 1, model, sid)
    assert model.titles == []  # never asked: the user's title stays
    assert meta(sid)["title"] == "Field notes: herons"
    capsys.readouterr()
    assert commands.run(host, "title") == "Field notes: herons"  # type: ignore[arg-type]
    assert "title: Field notes: herons (user)" in capsys.readouterr().out
    info = commands.run(host, "status")  # type: ignore[arg-type]
    assert info["title"] == "Field notes: herons"
    assert "Field notes: herons" in listed(capsys)

    from openprogram_magics.widget import show_dag

    assert show_dag(sid).title == f"{sid} · Field notes: herons"


def test_bad_titles_are_one_line_errors() -> None:
    with pytest.raises(UserError, match="a title needs words"):
        rename("chat_x", "   ")
    with pytest.raises(UserError, match="has no turns yet"):
        rename("chat_never_made", "A title")
    assert clean_title("Title: **Birds of the marsh.**\nmore") == "Birds of the marsh"


class _Host:
    """What the commands read of a notebook (a real magics object in a kernel)."""

    provider, model, auto, replay_session = "test", "", False, None

    def __init__(self, sid: str) -> None:
        self.sid = sid

    def current_session_id(self) -> str:
        return self.sid

    def current_meta(self) -> None:
        return None

    def runtime(self) -> Any:
        return create_runtime("test")
