"""The agent package's session database (``agent/session_db.py``, the seed's path to the
store): ``default_db()`` is where a turn opened without a store goes, under
``$OPENPROGRAM_HOME``, and what it wrote reads back from there."""

from __future__ import annotations

from pathlib import Path

from openprogram import create_runtime, session_context
from openprogram.agent.session_db import default_db
from openprogram.providers.test import TestProvider


def test_a_turn_without_a_store_lands_in_the_default_db_under_the_home(op_home: Path) -> None:
    runtime = create_runtime(TestProvider())
    with session_context("nb_default", runtime=runtime):
        runtime.exec("hello")
    db = default_db()
    assert db is default_db()  # one store per process
    assert db.exists("nb_default")
    assert (op_home / "sessions" / "nb_default").is_dir()
    assert [n.kind for n in db.open("nb_default").nodes()].count("llm") == 1
