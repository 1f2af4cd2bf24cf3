"""The ``%openprogram`` line commands (``openprogram_magics/commands/``, a module per
subcommand) in a real IPython ``InteractiveShell`` with the extension loaded and the offline
test provider: what each prints and returns, and what it leaves in the session store.
``test_commands_plain.py`` runs the same commands as plain functions, without a shell."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from openprogram.agent.session_db import default_db
from tests.test_magics import AGENTS, Shell, turns_of


@pytest.fixture
def shell(bare_shell: Shell) -> Shell:
    bare_shell.run(AGENTS)
    return bare_shell


def current_session(shell: Shell) -> str:
    meta = shell.magics.turns.kernel_meta
    assert meta is not None
    return meta.session_id


def test_line_commands(shell: Shell, capsys: pytest.CaptureFixture[str]) -> None:
    info = shell.line("status")
    assert info["session_id"] is None and info["provider"] == "test"
    shell.line("help")
    assert "use ID" in capsys.readouterr().out
    shell.run('%%openprogram\ntriage("one")')
    sid = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    info = shell.line("status")
    assert info["session_id"] == sid and info["turns"] == 1
    assert info["path"] == str(default_db().root / sid)
    assert info["head"] == shell.magics.turns.kernel_meta.last_turn_id  # type: ignore[union-attr]
    assert "session_id" in capsys.readouterr().out
    assert [m["id"] for m in shell.line("list")] == [sid]

    new = shell.line("new")
    assert new != sid and shell.line("status")["session_id"] == new
    shell.run('%%openprogram\ntriage("two")')
    assert len(turns_of(new)) == 1 and len(turns_of(sid)) == 1
    assert shell.line("use " + sid) == sid
    shell.run('%%openprogram\ntriage("three")')
    assert len(turns_of(sid)) == 2
    assert len(shell.line(f"log {new}")) == 2

    shell.line("provider test --model tiny")
    chosen = shell.magics.resolution()  # the notebook's layer, not %config's traitlets
    assert (chosen.provider.value, chosen.model.value) == ("test", "tiny")
    assert chosen.model.layer == "notebook" and shell.magics.model == ""
    assert shell.line("status")["model"] == "tiny"


@pytest.mark.parametrize(
    "line",
    [
        "frobnicate",
        "use",
        "use a b",
        "use ../x",
        "provider",  # valid: shows the provider (checked below), not an error
        "provider nope",
        "provider test --bogus x",
        "auto maybe",
        "dag --last x",
        'use "unterminated',
    ],
)
def test_bad_usage_is_a_usage_error(shell: Shell, line: str) -> None:
    if line == "provider":
        shell.line(line)
        return
    with pytest.raises(UsageError):
        shell.line(line)


def test_log_without_a_session_is_a_usage_error(shell: Shell) -> None:
    with pytest.raises(UsageError, match="no session yet"):
        shell.line("log")


def test_auto_makes_plain_cells_turns(shell: Shell) -> None:
    shell.line("auto on")
    shell.run('r1 = triage("auto one")')
    shell.run("r2 = 2")
    shell.run("%openprogram status")  # magics are not turns
    shell.line("auto off")
    shell.run("r3 = 3")
    sid = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    assert [t.status for t in turns_of(sid)] == ["completed", "completed"]


def test_line_command_values_are_printed_once(
    shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    result = shell.run("%openprogram status")
    assert result.result["provider"] == "test"  # x = %openprogram status still works
    assert capsys.readouterr().out.count("provider: test") == 1  # not shown again as Out


def test_a_title_set_by_hand_is_shown_and_listed(shell: Shell) -> None:
    shell.run('%%openprogram\ntriage("one")')
    sid = current_session(shell)
    assert shell.line("title Ticket triage") == "Ticket triage"
    assert shell.line("title") == "Ticket triage"
    assert [(m["id"], m.get("title")) for m in shell.line("list")] == [(sid, "Ticket triage")]


def test_an_exported_session_imports_under_another_id_and_continues_there(
    shell: Shell, tmp_path: Path
) -> None:
    shell.run('%%openprogram\ntriage("one")')
    shell.run('%%openprogram\ntriage("two")')
    sid = current_session(shell)
    bundle = shell.line(f"export {tmp_path / 'session.bundle'}")
    assert shell.line(f"import {bundle} --as nb_copy") == "nb_copy"
    assert len(turns_of("nb_copy")) == 2
    shell.line("use nb_copy")
    shell.run('%%openprogram\ntriage("three")')
    assert (len(turns_of("nb_copy")), len(turns_of(sid))) == (3, 2)
    with pytest.raises(UsageError, match="import FILE"):
        shell.line("import")


def test_push_sends_the_session_to_a_git_remote_and_pull_finds_nothing_new(
    shell: Shell, tmp_path: Path
) -> None:
    remote = tmp_path / "team.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    shell.run('%%openprogram\ntriage("one")')
    sid = current_session(shell)
    shell.line(f"push {remote}")
    refs = subprocess.run(
        ["git", "--git-dir", str(remote), "for-each-ref", "--format=%(refname)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert f"refs/openprogram/sessions/{sid}" in refs
    shell.line(f"pull {remote}")
    assert len(turns_of(sid)) == 1


def test_stop_without_a_background_run_and_compact_of_one_turn_say_so(
    shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UsageError, match="no background run"):
        shell.line("stop")
    shell.run('%%openprogram\ntriage("one")')
    capsys.readouterr()
    assert shell.line("compact") is None
    assert "nothing to compact" in capsys.readouterr().out
    assert default_db().exists(current_session(shell))
