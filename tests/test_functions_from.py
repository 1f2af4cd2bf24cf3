"""Where a session's agentic functions are defined (``programs/functions_from.py``): a
module name, a ``.py`` file, or a notebook whose definitions alone are run — its calls,
magics and output-making lines are left out, so loading it makes no LLM call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openprogram.errors import UserError
from openprogram.programs.functions_from import load_functions

CELLS = [
    "%load_ext openprogram_magics",
    "import json\nBRIEF = True\nLIMIT = len('abc')\n",
    '%%openprogram\ndef label(text):\n    """Label it."""\n    return text.upper()\n'
    'raise SystemExit("the cell\'s work must not run")\n',
    "label('hello')\nprint('side effect')\n",
    "!ls\nclass Ticket:\n    title = 'crash'\n",
    "def half_written(:\n",
]


def notebook(path: Path, cells: list[str]) -> Path:
    code = [{"cell_type": "code", "source": text, "metadata": {}} for text in cells]
    markdown = {"cell_type": "markdown", "source": "def not_code(): ...", "metadata": {}}
    path.write_text(json.dumps({"cells": [*code, markdown], "metadata": {}, "nbformat": 4}))
    return path


def test_a_notebook_gives_its_definitions_and_runs_none_of_its_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load_functions(str(notebook(tmp_path / "labels.ipynb", CELLS)))
    assert module.label("bug") == "BUG" and module.label.__doc__ == "Label it."
    assert module.BRIEF is True and module.Ticket.title == "crash" and module.json is json
    assert not hasattr(module, "LIMIT")  # not a literal: it could do work
    assert not hasattr(module, "not_code")
    assert capsys.readouterr().out == ""


def test_a_py_file_is_found_next_to_the_test_that_names_it(tmp_path: Path) -> None:
    (tmp_path / "agents.py").write_text("def triage(t):\n    return 'bug'\n")
    test_file = tmp_path / "tests" / "test_exported.py"
    test_file.parent.mkdir()
    test_file.write_text("")
    module = load_functions("../agents.py", test_file)
    assert module.triage("x") == "bug"
    with pytest.raises(UserError, match="the functions' file is not there"):
        load_functions("../missing.py", test_file)


def test_a_module_name_is_imported() -> None:
    assert load_functions("json").dumps([1]) == "[1]"
