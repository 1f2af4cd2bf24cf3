"""The kinds of ``%%openprogram`` cell and how a cell reaches them
(``openprogram_magics/cells/``): the transformer that turns the magic line into one guard
call, the cell's options, the guard that hands the body to its kind, and a plain cell run
from code.  The background, chat and ``--eval`` kinds have their own files
(``test_background.py``, ``test_chat_cell*.py``, ``test_evaluate_cell.py``)."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from openprogram_magics.cells.guard import NOT_LOADED, _cell_guard
from openprogram_magics.cells.options import parse_cell_options
from openprogram_magics.cells.transform import transform_cell
from tests.test_magics import AGENTS, Shell, turns_of


@pytest.fixture
def shell(bare_shell: Shell) -> Shell:
    bare_shell.run(AGENTS)
    return bare_shell


def test_the_magic_line_becomes_one_guard_call_and_the_body_keeps_its_lines() -> None:
    body = ["x = 1\n", "triage(x)\n"]
    first, *rest = transform_cell(["%%openprogram --session nb_a\n", *body])
    assert "_cell_guard('--session nb_a')" in first and first.endswith("\n")
    assert rest == body  # line numbers stay the user's


@pytest.mark.parametrize("flag", ["--background", "-b", "--chat", "--eval triage"])
def test_a_cell_whose_body_is_not_run_in_place_is_one_call_holding_the_body(flag: str) -> None:
    (only,) = transform_cell([f"%%openprogram {flag}\n", "hello\n", "there\n"])
    assert "_body_guard(" in only and repr("hello\nthere\n") in only


def test_other_cells_are_left_alone_and_the_own_load_ext_is_blanked() -> None:
    for cell in (["%%openprogramx\n", "1\n"], ["%%openprogram?\n"], ["y = 2\n"], []):
        assert transform_cell(cell) == cell
    lines = ["%load_ext openprogram_magics\n", "z = 3\n"]
    assert transform_cell(lines) == ["\n", "z = 3\n"]
    reloading = [*lines, "%reload_ext openprogram_magics\n"]
    assert transform_cell(reloading) == reloading


def test_the_options_parse_once_and_a_typo_names_the_option_meant() -> None:
    opts = parse_cell_options("-s nb_a --from n1 --no-dag")
    assert (opts.session, opts.start, opts.no_dag, opts.background) == ("nb_a", "n1", True, False)
    assert parse_cell_options("--eval triage exact --executor dask").eval == ["triage", "exact"]
    with pytest.raises(UsageError, match=r"did you mean --background\?"):
        parse_cell_options("--backgroud")


def test_the_guard_without_the_extension_says_how_to_load_it() -> None:
    InteractiveShell.clear_instance()
    plain_shell = InteractiveShell.instance()
    try:
        assert plain_shell.magics_manager.registry.get("OpenProgramMagics") is None
        with pytest.raises(UsageError) as caught:
            _cell_guard("")
        assert str(caught.value) == NOT_LOADED
    finally:
        InteractiveShell.clear_instance()


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("-b --chat", "--background and --chat do not go together"),
        ("--eval triage --chat", "--eval goes with neither -b nor --chat"),
        ("--chat --from n1", "--from goes with a plain cell"),
    ],
)
def test_options_that_do_not_go_together_stop_the_cell_with_one_line(
    shell: Shell, line: str, says: str
) -> None:
    result = shell.run(f"%%openprogram {line}\nhello\n", error=UsageError)
    assert says in str(result.error_in_exec)
    assert shell.magics.turns.kernel_meta is None  # no turn was begun


def test_a_plain_cell_run_from_code_is_one_turn_of_the_session(shell: Shell) -> None:
    shell.ip.run_cell_magic("openprogram", "", 'r = triage("from code")\n')
    meta = shell.magics.turns.kernel_meta
    assert meta is not None and shell.ip.user_ns["r"]
    (turn,) = turns_of(meta.session_id)
    assert turn.status == "completed"
    assert turn.input["text"] == '%%openprogram \nr = triage("from code")\n'  # the cell as typed
