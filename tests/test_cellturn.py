"""A notebook's turns as a plain object (``cellturn``), with no IPython shell: a cell's
turn goes to the notebook's session and the next one chains after it, the frontend is told
each metadata change, the provider chosen in the notebook wins over ``%config`` and
rebuilds the runtime, and a cell cannot pin a session this machine does not have."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from openprogram import agentic_function
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.runtime import Runtime
from openprogram_magics.cellturn import NotebookTurns
from openprogram_magics.commands import CommandError
from openprogram_magics.notebook import NotebookMeta


@dataclass
class Settings:
    """The magics' traitlets, with their defaults (provider: the offline test one)."""

    provider: str = "test"
    model: str = ""
    live_dag: bool = False
    stream: bool = False
    budget_tokens: int = 0
    budget_usd: float = 0.0
    budget_per: str = "session"
    requests_per_minute: float = 0.0
    request_timeout: float = 0.0
    history_turns: int = 20
    history_tokens: int = 4000
    history_failed: bool = False


@agentic_function
def triage(ticket: str, runtime: Runtime | None = None) -> str:
    """Classify the ticket."""
    assert runtime is not None
    return str(runtime.exec(ticket))


def run_cell(turns: NotebookTurns, source: str, count: int) -> object:
    turns.cell_started(source, count)
    turns.begin_turn(None, source)
    result = triage(source)
    turns.cell_ended(None, result)
    return result


def test_cells_are_turns_of_one_session_and_the_frontend_hears_each(
    capsys: pytest.CaptureFixture[str],
) -> None:
    told: list[NotebookMeta] = []
    turns = NotebookTurns(Settings(), user_ns=dict, on_meta=told.append)
    assert run_cell(turns, "crash on save", 1) == "[test reply] crash on save"
    run_cell(turns, "add dark mode", 2)
    meta = turns.kernel_meta
    assert meta is not None and [m.session_id for m in told] == [meta.session_id] * 2
    session = default_db().open(meta.session_id)
    first, second = [n for n in session.nodes() if n.kind == "turn"]
    assert second.predecessor == first.id and told[-1].last_turn_id == second.id
    assert f"new session {meta.session_id}" in capsys.readouterr().out
    assert turns.bare_call_turn("between cells") is None  # no cell runs: not the notebook's


def test_the_notebooks_provider_wins_over_config_and_rebuilds_the_runtime() -> None:
    settings = Settings(provider="", model="")
    turns = NotebookTurns(settings)
    assert turns.default_runtime() is None  # nothing chosen here: the environment's
    turns.choose_provider("test", "tiny")
    chosen = turns.resolution()
    assert (chosen.provider.value, chosen.provider.layer) == ("test", "notebook")
    first = turns.runtime()
    assert first.model == "tiny" and turns.runtime() is first and turns.default_runtime() is first
    settings.history_turns = 3  # read by every call: the same runtime, narrower history
    assert turns.runtime() is first and first.context is not None
    assert first.context.turns == 3
    turns.choose_provider("test", "bigger")
    assert turns.runtime() is not first and turns.runtime().model == "bigger"


def test_a_cell_cannot_pin_a_session_this_machine_does_not_have() -> None:
    turns = NotebookTurns(Settings())
    turns.cell_started("x", 1)
    with pytest.raises(CommandError, match="nb_typo"):
        turns.begin_turn("nb_typo", "%%openprogram --session nb_typo\nx")
    assert turns.turn is None and not default_db().exists("nb_typo")


def test_a_session_new_just_minted_is_not_said_to_be_from_another_machine(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from openprogram.store.session.files import mint_session_id

    turns = NotebookTurns(Settings())
    sid = mint_session_id("nb")
    turns.set_session(NotebookMeta(sid))  # what `%openprogram new` does
    run_cell(turns, "crash on save", 1)
    out = capsys.readouterr().out
    assert "machine" not in out, out
    assert default_db().exists(sid) and turns.kernel_meta is not None
    assert turns.kernel_meta.session_id == sid
