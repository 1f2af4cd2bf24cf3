"""Errors that speak plainly: a cell's traceback shows the user's code (never the guard
call), the project's own errors are two lines with the full traceback a ``%tb`` away, in an
``InteractiveShell`` and in a real kernel (nbclient)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import nbformat
import pytest

from openprogram.providers.base import LLMRequest, ProviderError
from openprogram_magics import use_runtime
from tests.test_magics import AGENTS, Shell


@pytest.fixture
def shell(bare_shell: Shell) -> Shell:
    """The extension loaded, the test provider, ``triage`` and ``handle`` defined."""
    bare_shell.run(AGENTS)
    return bare_shell


REPO = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;]*m")

HELPER = '''
@agentic_function
def parse_row(row: str, runtime=None) -> int:
    """Read the number in the row."""
    return int(row.split(",")[1])
'''


def printed(capsys: pytest.CaptureFixture[str]) -> list[str]:
    captured = capsys.readouterr()
    return [ln for ln in (captured.out + captured.err).splitlines() if ln.strip()]


def test_a_cell_traceback_quotes_the_magic_line_not_the_guard(
    shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    shell.run("%%openprogram\ntotal = 1\n1 / 0", error=ZeroDivisionError)
    text = "\n".join(printed(capsys))
    assert "_cell_guard" not in text
    assert "%%openprogram" in text and "----> 3 1 / 0" in text


def test_a_users_bug_inside_an_agentic_function_shows_the_users_frames_only(
    shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run(HELPER)
    capsys.readouterr()
    shell.run('%%openprogram\nparse_row("a")', error=IndexError)
    text = "\n".join(printed(capsys))
    assert 'return int(row.split(",")[1])' in text
    assert "sync_wrapper" not in text and "function.py" not in text


def test_auto_turns_keep_the_cells_line_numbers(
    shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.line("auto on")
    capsys.readouterr()
    shell.run("a = 1\nb = {}\nb['missing']", error=KeyError)
    text = "\n".join(printed(capsys))
    assert "----> 3 b['missing']" in text and "_cell_guard" not in text
    assert shell.magics.turns.kernel_meta is not None  # the cell was a turn


@pytest.mark.parametrize(
    ("setup", "cell", "says"),
    [
        ("no provider", 'triage("x")', "NoProviderConfigured: No LLM provider configured"),
        ("no key", 'triage("x")', "MissingCredentials: openai needs an API key: set OPENAI_"),
        ("provider fails", 'triage("x")', "ProviderError: the model is overloaded"),
    ],
)
def test_the_projects_errors_are_two_lines_and_tb_has_the_rest(
    shell: Shell, capsys: pytest.CaptureFixture[str], setup: str, cell: str, says: str
) -> None:
    if setup == "no provider":
        from openprogram.agentic_programming.runtime import Runtime

        use_runtime(Runtime(), shell.ip)
    elif setup == "no key":
        shell.line("provider openai")
    else:

        def fails(request: LLMRequest) -> Any:
            raise ProviderError("the model is overloaded")

        shell.use_provider(fails)
    capsys.readouterr()
    result = shell.ip.run_cell(f"%%openprogram\n{cell}", store_history=True)
    assert result.error_in_exec is not None
    ours = ("openprogram", "session DAG", "●", "■", "▲")  # the turn's notes and its DAG
    shown = [ln for ln in printed(capsys) if not ln.lstrip().startswith(ours)]
    assert shown[0].startswith(says) and shown[1] == "(`%tb` shows the full traceback)"
    assert len(shown) == 2
    shell.run("%tb")
    full = "\n".join(printed(capsys))
    assert "Traceback" in full and "runtime.exec" in full


def test_log_right_after_new_is_one_line_and_an_unknown_session_one_usage_error(
    shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    from IPython.core.error import UsageError

    sid = shell.line("new")
    capsys.readouterr()
    assert shell.line("log") == []
    assert printed(capsys) == [
        f"openprogram: session {sid} has no turns yet (it is stored at the first turn)"
    ]
    with pytest.raises(UsageError, match="no session 'nb_nothere'"):
        shell.line("log nb_nothere")


@pytest.mark.kernel
@pytest.mark.timeout(180)
def test_in_a_kernel_tracebacks_have_no_guard_and_a_missing_key_is_two_lines(
    tmp_path: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from openprogram_magics.kernels import QuietClient

    monkeypatch.setenv("PYTHONPATH", str(REPO))
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext openprogram_magics\n%openprogram provider test"),
        nbformat.v4.new_code_cell("from openprogram import agentic_function\n" + HELPER),
        nbformat.v4.new_code_cell('%%openprogram\nx = 1\nparse_row("a")'),
        nbformat.v4.new_code_cell(
            "@agentic_function\ndef ask(q: str, runtime=None) -> str:\n"
            '    """Answer."""\n    return runtime.exec(q)'
        ),
        nbformat.v4.new_code_cell("%openprogram provider openai\n%env OPENAI_API_KEY=\n"),
        nbformat.v4.new_code_cell('%%openprogram\nask("hello")'),
    ]
    QuietClient(nb, timeout=120, allow_errors=True, kernel_name="python3").execute()
    (bug,) = [o for o in nb.cells[2].outputs if o.output_type == "error"]
    frames = ANSI.sub("", "\n".join(bug.traceback))
    assert bug.ename == "IndexError" and "_cell_guard" not in frames
    assert "%%openprogram" in frames and "function.py" not in frames
    (missing,) = [o for o in nb.cells[5].outputs if o.output_type == "error"]
    assert missing.ename == "MissingCredentials"
    assert len(missing.traceback) == 2 and "OPENAI_API_KEY" in missing.traceback[0]


def test_a_misspelt_cell_option_names_the_one_meant(shell: Shell) -> None:
    from IPython.core.error import UsageError

    result = shell.run("%%openprogram --backgroud\n1 + 1", error=UsageError)
    said = str(result.error_in_exec or result.error_before_exec)
    assert "unrecognized arguments: --backgroud" in said
    assert said.endswith("(did you mean --background?)")
    result = shell.run("%%openprogram --sess abc --backgroud\n1 + 1", error=UsageError)
    assert str(result.error_in_exec).endswith("(did you mean --background?)")  # not --session
    result = shell.run("%%openprogram --zzz\n1 + 1", error=UsageError)
    assert "did you mean" not in str(result.error_in_exec)  # nothing close: no guess
