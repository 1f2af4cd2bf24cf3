"""``%%openprogram --eval FN [SCORER …]`` in a real IPython shell: the body's last
expression is the cases, the cell is one turn holding the evaluation, its value the result
(the table), and a second run of the cell reuses every call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from IPython.core.error import UsageError

from openprogram.agent.session_db import default_db
from openprogram.scale.evals import EvalResult

DEFINITIONS = '''
from openprogram import agentic_function

@agentic_function
def triage(ticket: str, runtime=None) -> str:
    """Classify the support ticket as bug or feature."""
    return runtime.exec(ticket, choices=["bug", "feature"])

def exact(case, output):
    return output == case["expected"]
'''

CELL = """%%openprogram --eval triage exact
cases = [{"input": t, "expected": e} for t, e in PAIRS]
cases
"""


def test_an_eval_cell_is_one_turn_whose_value_is_the_evaluation(
    bare_shell: Any, op_home: Path
) -> None:
    sh = bare_shell
    sh.run(DEFINITIONS)
    sh.ip.user_ns["PAIRS"] = [("the app crashes", "bug"), ("add dark mode", "feature")]
    first = sh.run(CELL).result
    assert isinstance(first, EvalResult)
    assert first.mean() == {"exact": 0.5}  # the test provider picks the first choice
    assert [c.key for c in first.cases] == ["the app crashes", "add dark mode"]
    assert sh.ip.user_ns["cases"][0]["expected"] == "bug"  # the body ran in the namespace
    session = default_db().open(first.session_id)
    evaluation = session.get(first.node_id)
    turn = session.get(evaluation.caller)
    assert turn.kind == "turn" and turn.input["text"].startswith("%%openprogram --eval")
    second = sh.run(CELL).result
    assert second.reused == 2 and second.sent == 0
    assert second.comparison is not None and second.comparison.same == 2


def test_an_eval_cell_names_what_is_missing_in_one_line(bare_shell: Any, op_home: Path) -> None:
    sh = bare_shell
    sh.run(DEFINITIONS)
    result = sh.run("%%openprogram --eval nothere\n[1]\n", error=UsageError)
    assert "no 'nothere' in the notebook's namespace" in str(result.error_in_exec)
    result = sh.run("%%openprogram --eval triage\nx = [1]\n", error=UsageError)
    assert "end the cell with the cases" in str(result.error_in_exec)
    result = sh.run("%%openprogram --eval triage --chat\n[1]\n", error=UsageError)
    assert "--eval goes with neither" in str(result.error_in_exec)
