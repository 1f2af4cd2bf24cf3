"""The ``openprogram`` console script: ``sessions list | show | log | delete``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openprogram import session_context
from openprogram.agent.session_db import default_db
from openprogram.cli import main
from openprogram.context.nodes import COMPLETED, make_call
from openprogram.view import render_text_tree

ROOT = Path(__file__).resolve().parent.parent


def make_session(sid: str, title: str, turns: int = 1) -> list[str]:
    """``turns`` turns, each: a turn node, a function under it, an llm call under that."""
    ids = []
    for t in range(turns):
        with session_context(sid, title=title, message=f"step {t}") as h:
            w = h.writer
            top = w.append(make_call("turn", f"cell{t}", status=COMPLETED), turn_level=True)
            fn = w.append(make_call("function", "plan", caller=top.id, status=COMPLETED))
            w.append(make_call("llm", "test", caller=fn.id, status=COMPLETED))
            ids.append(top.id)
    return ids


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a child process (same OPENPROGRAM_HOME)."""
    return subprocess.run(
        [sys.executable, "-m", "openprogram.cli", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=60,
    )


def test_list_shows_id_turns_updated_and_title_newest_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    make_session("first_one", "Old analysis", turns=2)
    time.sleep(0.02)
    make_session("second_one", "New analysis", turns=1)
    assert main(["sessions", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "TURNS", "UPDATED", "BELONGS", "TO"]
    assert lines[1].split()[:2] == ["second_one", "1"] and lines[1].endswith("New analysis")
    assert lines[2].split()[:2] == ["first_one", "2"] and lines[2].endswith("Old analysis")
    assert time.strftime("%Y-%m-%d") in lines[1]


def test_list_with_no_sessions_says_so(op_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "list"]) == 0
    assert "no sessions" in capsys.readouterr().out


def test_show_prints_meta_counts_and_the_dag_as_an_indented_tree(
    capsys: pytest.CaptureFixture[str],
) -> None:
    make_session("shown", "Shown", turns=2)
    with session_context("shown", message="broken") as h:  # one failing call
        top = h.writer.append(make_call("turn", "cell2", status="error"), turn_level=True)
        h.writer.append(make_call("function", "crash", caller=top.id, status="error"))
    assert main(["sessions", "show", "shown"]) == 0
    out = capsys.readouterr().out
    assert "session  shown" in out and "title    Shown" in out
    assert "turns    3" in out
    assert "nodes    9: function 3, llm 2, root 1, turn 3 | completed 7, error 2" in out
    assert "problems none" in out
    tree = out.split("\n\n", 1)[1]
    session = default_db().open("shown")  # the same tree the notebook draws
    assert tree.rstrip("\n") == render_text_tree(
        [c.to_dict() for c in session.nodes()], session.head_id, last_turns=50
    )
    # node by node: indented under its caller, kind (turns show only their name), status
    rows = [re.sub(r"^( *)\S+ (.*?)( ← HEAD)?$", r"\1\2", line) for line in tree.splitlines()[1:]]
    assert rows == [
        "root root [completed]",
        "cell0 [completed]",
        "  function plan [completed]",
        "    llm test [completed]",
        "cell1 [completed]",
        "  function plan [completed]",
        "    llm test [completed]",
        "cell2 [error]",
        "  function crash [error]",
    ]


def test_show_lists_problems_naming_the_damaged_file(
    op_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_session("hurt", "Hurt")
    meta = op_home / "sessions" / "hurt" / "meta.json"
    meta.write_text("{not json")
    assert main(["sessions", "show", "hurt"]) == 0
    out = capsys.readouterr().out
    assert "problems (1):" in out and str(meta) in out
    assert "● cell0 [completed]" in out  # the rest is still shown


def test_the_tree_survives_cycles_and_unknown_callers() -> None:
    def node(i: str, caller: str | None) -> dict[str, object]:
        return {"id": i, "name": i, "caller": caller, "metadata": {"kind": "function"}}

    lines = render_text_tree([node("a", "b"), node("b", "a"), node("c", "gone")], None)
    lines = lines.splitlines()
    assert any("function c [completed]" in line and "missing-caller" in line for line in lines)
    assert sum("function a" in line or "function b" in line for line in lines) == 2
    assert any("cycle" in line for line in lines)


def test_log_prints_one_line_per_commit(capsys: pytest.CaptureFixture[str]) -> None:
    make_session("logged", "Logged", turns=3)
    assert main(["sessions", "log", "logged"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert lines[0].endswith("  turn 3: step 2")  # sha, time, who ran it, then the summary
    assert lines[-1].endswith("session logged created")


def test_delete_with_yes_removes_the_session(
    op_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_session("doomed", "Doomed")
    assert main(["sessions", "delete", "doomed", "--yes", "--force"]) == 0  # never pushed
    assert "deleted session doomed" in capsys.readouterr().out
    assert not (op_home / "sessions" / "doomed").exists()


def test_delete_asks_and_keeps_the_session_unless_confirmed(
    op_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_session("kept", "Kept")
    monkeypatch.setattr("builtins.input", lambda _prompt: "n")
    assert main(["sessions", "delete", "kept", "--force"]) == 2
    assert "not deleted" in capsys.readouterr().err
    assert (op_home / "sessions" / "kept" / ".git").is_dir()
    monkeypatch.setattr("builtins.input", lambda _prompt: "y")
    assert main(["sessions", "delete", "kept", "--force"]) == 0
    assert not (op_home / "sessions" / "kept").exists()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["sessions", "show", "../etc"], "invalid session id"),
        (["sessions", "log", "a/b"], "invalid session id"),
        (["sessions", "delete", ".git", "--yes"], "invalid session id"),
        (["sessions", "show", "missing"], "no session 'missing'"),
        (["sessions", "log", "missing"], "no session 'missing'"),
        (["sessions", "delete", "missing", "--yes"], "no session 'missing'"),
        (["sessions", "show", "x", "--page", "9" * 20], "pages count from 1"),
    ],
)
def test_errors_are_one_line_on_stderr_with_exit_status_2(
    op_home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and needle in captured.err
    assert captured.err.startswith("openprogram: ")
    assert not (op_home / "sessions").exists() or os.listdir(op_home / "sessions") == []


def test_show_with_more_turns_than_sqlite_counts_shows_them_all(
    capsys: pytest.CaptureFixture[str],
) -> None:
    make_session("many", "Many", turns=2)
    assert main(["sessions", "show", "many", "--last", "9" * 20]) == 0
    assert main(["sessions", "show", "many"]) == 0
    whole, default = capsys.readouterr().out.split("session  many")[1:]
    assert whole == default


def test_an_error_line_masks_a_credential_it_quotes(
    op_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-abcdefabcdefabcdef0123"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    assert main(["sessions", "show", key]) == 2
    assert main(["sessions", "show", "http://u:hunter2pw@h/x"]) == 2
    err = capsys.readouterr().err
    assert "no session '***'" in err and "'http://u:***@h/x'" in err
    assert key not in err and "hunter2pw" not in err


def test_the_console_script_runs_in_a_fresh_process(op_home: Path) -> None:
    make_session("from_cli", "From the CLI", turns=2)
    listed = run("sessions", "list")
    assert listed.returncode == 0, listed.stderr
    assert "from_cli" in listed.stdout and "From the CLI" in listed.stdout
    bad = run("sessions", "show", "../x")
    assert bad.returncode == 2
    assert bad.stderr.startswith("openprogram: invalid session id") and bad.stdout == ""
    nothing = run()
    assert nothing.returncode == 2 and "sessions" in nothing.stderr


def test_home_option_points_at_another_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_session("here", "Here")
    assert main(["--home", str(tmp_path / "elsewhere"), "sessions", "list"]) == 0
    assert "no sessions" in capsys.readouterr().out


def test_importing_the_cli_does_not_load_git_or_provider_sdks() -> None:
    probe = (
        "import sys, openprogram.cli; "
        "print(sorted(m for m in ('git', 'gitdb', 'openai', 'anthropic') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    ).stdout
    assert out.strip() == "[]"
