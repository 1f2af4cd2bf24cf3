"""A goal in a notebook, through a real kernel (nbclient, as ``openprogram run`` does):
``%openprogram goal`` then a ``%%openprogram --chat`` cell runs the goal's continuation
turns, each reply streamed under the cell between lines saying what the check found, and
the saved notebook, read back from disk, shows the whole run (the replies in one output,
the run's turns in its DAG)."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

from openprogram.store.session.store import SessionStore
from openprogram_magics.headless import run_notebook
from openprogram_magics.notebook import MIME_TYPE

REPO = Path(__file__).resolve().parents[1]
PYTHONPATH = os.environ.get("PYTHONPATH", "")
pytestmark = [pytest.mark.kernel, pytest.mark.timeout(180)]

SETUP = """
import json
from openprogram.providers import create_runtime
from openprogram.providers.test import FunctionProvider

checks = []

def model(request):
    system = request.messages[0]["content"]
    if system.startswith("You check whether a goal is met"):
        checks.append(1)
        met = len(checks) >= 3
        return json.dumps({"met": met, "reason": f"{len(checks)} of 3 facts", "next": "one more"})
    if system.startswith("You are a helpful assistant"):
        return f"fact number {len(checks) + 1} about herons"
    return "Heron facts"

from openprogram_magics import use_runtime
use_runtime(create_runtime(FunctionProvider(model), backoff=0.0))
"""


def test_a_chat_cell_with_a_goal_runs_its_continuations_and_the_saved_notebook_shows_them(
    tmp_path: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), PYTHONPATH])))
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext openprogram_magics\n" + SETUP),
        nbformat.v4.new_code_cell('%openprogram goal "three facts about herons" --turns 5'),
        nbformat.v4.new_code_cell("%%openprogram --chat\nTell me three facts about herons."),
        nbformat.v4.new_code_cell("%openprogram goal"),
    ]
    path = tmp_path / "goal.ipynb"
    nbformat.write(nb, path)
    ran = run_notebook(path, timeout=120)
    assert ran.error is None, ran.error

    saved = nbformat.read(path, as_version=4)  # reopened from disk
    chat = saved.cells[2]
    (reply,) = [o for o in chat.outputs if "text/plain" in o.get("data", {}) and len(o.data) == 1]
    text = reply.data["text/plain"]  # the run's replies, one output updated in place
    expected = [
        "fact number 1 about herons",
        "[goal not met yet: 1 of 3 facts — continuation 1]",
        "fact number 2 about herons",
        "[goal not met yet: 2 of 3 facts — continuation 2]",
        "fact number 3 about herons",
        "[goal met after 2 continuation(s): 3 of 3 facts]",
    ]
    positions = [text.find(piece) for piece in expected]
    assert -1 not in positions and positions == sorted(positions), text
    (turn,) = [o.data for o in chat.outputs if MIME_TYPE in o.get("data", {})]
    payload = turn[MIME_TYPE]
    assert payload["goal"]["status"] == "met" and payload["goal"]["continuations"] == 2
    drawn = [line.split("[")[0].strip() for line in turn["text/plain"].splitlines()[2:]]
    assert [d for d in drawn if d in ("● user", "● continuation")] == [
        "● user",
        "● continuation",
        "● continuation",
    ]  # the DAG draws the run's three turns
    status = "".join(o.get("text", "") for o in saved.cells[3].outputs)
    assert "goal met after 2 continuation(s)" in status

    store = SessionStore(op_home)  # the session as another process reads it
    try:
        session = store.open(payload["session_id"])
        turns = [session.get(i) for i in payload["goal"]["turns"]]
        assert [t.name for t in turns] == ["user", "continuation", "continuation"]
        assert payload["last_turn_id"] == turns[-1].id
        assert [t.predecessor for t in turns[1:]] == [t.id for t in turns[:-1]]
        assert session.meta["goal"]["status"] == "met"
    finally:
        store.close()
