"""Small things a team trips on (issue 19 item 9): a cell pinned to a session id this
machine does not have is refused (a typo never starts a session), the first cell of a
reopened notebook does not print IPython's "extension is already loaded", and
``sessions list`` names the notebook where the session is used now."""

from __future__ import annotations

import io
import os
import shutil
from contextlib import redirect_stdout
from pathlib import Path

import nbformat
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

import openprogram_magics.bridge as bridge
from openprogram.agent.session_db import default_db
from openprogram.cli import main
from openprogram_magics.headless import run_notebook, state_payload
from tests.test_magics import AGENTS, Shell, turns_of

REPO = Path(__file__).resolve().parents[1]
LOADED = "already loaded"


def listed(capsys: pytest.CaptureFixture[str], sid: str) -> str:
    capsys.readouterr()
    assert main(["sessions", "list"]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith(sid)]
    return row


def test_a_cell_pinned_to_an_unknown_session_is_refused(bare_shell: Shell) -> None:
    shell = bare_shell
    shell.run(AGENTS)
    shell.run('%%openprogram\ntriage("one")')
    mine = shell.magics.current_session_id()
    assert mine is not None
    result = shell.run("%%openprogram --session nb_typo\n_ran = True", error=UsageError)
    message = str(result.error_before_exec or result.error_in_exec)
    assert len(message.splitlines()) == 1
    assert "no session 'nb_typo' on this machine" in message
    assert "%openprogram new --id nb_typo" in message and "%openprogram import" in message
    assert "_ran" not in shell.ip.user_ns  # the body did not run
    assert not default_db().exists("nb_typo")  # and nothing was created
    assert shell.magics.current_session_id() == mine
    # a near id is named; the same refusal for --chat and --background cells
    for flags in ("--chat", "--background"):
        result = shell.run(f"%%openprogram {flags} --session {mine}x\nhello", error=UsageError)
        assert f"nearest: {mine}" in str(result.error_before_exec or result.error_in_exec)
    # made on purpose, it is there for the next pinned cell
    shell.line("new --id nb_wanted")
    shell.run('%%openprogram --session nb_wanted\ntriage("two")')
    shell.line(f"use {mine}")
    shell.run('%%openprogram --session nb_wanted\ntriage("three")')
    assert len(turns_of("nb_wanted")) == 2 and len(turns_of(mine)) == 1


@pytest.fixture
def plain_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> InteractiveShell:
    monkeypatch.setattr(bridge, "_state", None)
    InteractiveShell.clear_instance()
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.InteractiveShell.ipython_dir = str(tmp_path / "ipython")
    return InteractiveShell.instance(config=config)


def run_printing(ip: InteractiveShell, code: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        result = ip.run_cell(code, store_history=True)
    assert result.success, result.error_in_exec or result.error_before_exec
    return out.getvalue()


def test_load_ext_is_quiet_when_the_frontend_loaded_it(plain_shell: InteractiveShell) -> None:
    ip = plain_shell
    try:
        # a reopened notebook: the frontend's request loads the extension first
        bridge.receive_frontend_state(state_payload({"session_id": "nb_reopened"}, "a.ipynb"))
        assert "openprogram_magics" in ip.extension_manager.loaded
        assert LOADED not in run_printing(ip, "%load_ext openprogram_magics")
        assert LOADED in run_printing(ip, "%load_ext autoreload\n%load_ext autoreload")  # others
        # unloading restores IPython's own %load_ext; loading again works and is counted once
        run_printing(ip, "%unload_ext openprogram_magics")
        assert "openprogram_magics" not in ip.extension_manager.loaded
        run_printing(ip, "%load_ext openprogram_magics")
        assert (
            ip.events.callbacks["pre_run_cell"].count(
                ip.magics_manager.registry["OpenProgramMagics"].pre_run_cell  # type: ignore[union-attr]
            )
            == 1
        )
    finally:
        InteractiveShell.clear_instance()


def test_load_ext_in_a_fresh_shell_loads_it(plain_shell: InteractiveShell) -> None:
    ip = plain_shell
    try:
        assert "openprogram_magics" not in ip.extension_manager.loaded
        run_printing(ip, "%load_ext openprogram_magics\n%openprogram provider test")
        assert "openprogram_magics" in ip.extension_manager.loaded
        run_printing(ip, "%%openprogram\nx = 1")
        magics = ip.magics_manager.registry["OpenProgramMagics"]
        assert len(turns_of(magics.current_session_id())) == 1  # type: ignore[attr-defined]
    finally:
        InteractiveShell.clear_instance()


def test_sessions_list_names_the_notebook_where_it_is_now(
    bare_shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell = bare_shell
    bridge.receive_frontend_state(state_payload(None, "drafts/first.ipynb"))
    shell.run("%%openprogram\nx = 1")
    sid = shell.magics.current_session_id()
    assert sid is not None
    assert listed(capsys, sid).endswith("notebook drafts/first.ipynb")
    # the notebook is moved and reopened: the frontend sends its new path
    bridge.receive_frontend_state(state_payload({"session_id": sid}, "reports/final.ipynb"))
    shell.run("%%openprogram\nx = 2")
    assert listed(capsys, sid).endswith("notebook reports/final.ipynb")
    capsys.readouterr()
    shell.line("list")
    assert "notebook reports/final.ipynb" in capsys.readouterr().out
    # what is committed (and shared) keeps the first title; where is this machine's own
    assert default_db().open(sid).meta["title"] == "notebook drafts/first.ipynb"


@pytest.mark.kernel
@pytest.mark.timeout(300)
def test_a_reopened_notebook_in_a_real_kernel(
    tmp_path: Path,
    op_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A fresh kernel: ``%load_ext`` loads the extension.  The notebook moved and run again
    (the runner hands over its metadata, which loads the extension first): the first cell
    prints nothing about it, and ``sessions list`` names the new place."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    first = tmp_path / "first" / "nb.ipynb"
    first.parent.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext openprogram_magics\n%openprogram provider test"),
        nbformat.v4.new_code_cell(AGENTS),
        nbformat.v4.new_code_cell('%%openprogram\ntriage("one")'),
    ]
    nbformat.write(nb, first)
    result = run_notebook(first)
    assert result.error is None and result.session_id
    sid = result.session_id
    assert listed(capsys, sid).endswith("/first/nb.ipynb")  # the path is clipped in the middle

    moved = tmp_path / "moved" / "renamed.ipynb"
    moved.parent.mkdir()
    shutil.move(first, moved)
    result = run_notebook(moved)
    assert result.error is None and result.session_id == sid
    cells = nbformat.read(moved, as_version=4).cells
    shown = "".join(
        str(out.get("text", "")) + str(out.get("data", {}).get("text/plain", ""))
        for out in cells[0].outputs
    )
    assert LOADED not in shown, shown
    assert len(turns_of(sid)) == 2
    assert listed(capsys, sid).endswith("/moved/renamed.ipynb")
