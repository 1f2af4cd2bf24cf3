"""A one-cell ``--session ID`` affects that cell only, in every cell mode (issue 11 item 5):
a plain, a ``--chat`` and a ``--background`` cell pinned to another session write their
turn there, mark their output ``pinned``, and leave the notebook on its own session, whose
next cell chains after the notebook's last turn; re-pointing is ``%openprogram use``."""

from __future__ import annotations

import pytest

from openprogram.agent.session_db import default_db
from openprogram_magics.notebook import MIME_TYPE
from tests.test_magics import AGENTS, Shell, turns_of

PINNED = {
    "plain": '%%openprogram --session pinned_cell\ntriage("two")',
    "chat": "%%openprogram --chat --session pinned_cell\nWhat is ticket two about?",
    "background": '%%openprogram --background --session pinned_cell\nbg = triage("two")',
}


@pytest.fixture
def shell(bare_shell: Shell) -> Shell:
    bare_shell.run(AGENTS)
    return bare_shell


@pytest.mark.parametrize("mode", list(PINNED))
def test_a_pinned_cell_leaves_the_notebook_on_its_session(
    shell: Shell, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run('%%openprogram\ntriage("one")')
    before = shell.magics.turns.kernel_meta
    assert before is not None and before.provider == "test"
    capsys.readouterr()

    default_db().create_session("pinned_cell")  # a cell pins only a session there is
    shell.run(PINNED[mode])
    if mode == "background":
        assert shell.magics.background is not None
        shell.magics.background.wait(30)
        assert shell.ip.user_ns["bg"] in ("bug", "feature", "question")
    assert shell.magics.turns.kernel_meta == before  # same session, same last turn, provider kept
    assert "this cell runs in session pinned_cell; the notebook stays with" in (
        capsys.readouterr().out
    )
    assert shell.bundles()[-1][MIME_TYPE]["session_id"] == "pinned_cell"
    assert shell.bundles()[-1][MIME_TYPE]["pinned"] is True  # saved outputs skip it
    assert len(turns_of("pinned_cell")) == 1

    shell.run('%%openprogram\ntriage("three")')
    first, third = turns_of(before.session_id)
    assert third.predecessor == first.id == before.last_turn_id
    assert len(turns_of("pinned_cell")) == 1
