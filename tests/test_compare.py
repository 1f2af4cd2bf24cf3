"""Explore alternatives in place (issue 24): ``%%openprogram --from NODE`` branches,
``%openprogram diff`` / ``openprogram sessions diff`` pair two lines call by call and say
why answers moved.  Sessions built in a real IPython shell with the ``function`` provider."""

from __future__ import annotations

from typing import Any

import pytest

from openprogram.agent.session_db import default_db
from openprogram.cli import main as cli_main
from openprogram.compare.render import DIFF_MIME
from openprogram.providers.base import LLMRequest
from tests.test_magics import Shell, turns_of

AGENTS = '''
from openprogram import agentic_function

@agentic_function
def triage(ticket: str, runtime=None) -> str:
    """{doc}"""
    return runtime.exec(ticket)

@agentic_function
def summarize(text: str, runtime=None) -> str:
    """Summarize the day's tickets in one line."""
    return runtime.exec(text)
'''
CELLS = [
    '%%openprogram\ntriage("the app crashes on save")',
    '%%openprogram\ntriage("add a dark mode")',
    '%%openprogram\nsummarize("today")',
]
OLD_DOC = "Classify the support ticket as bug, feature or question."
NEW_DOC = "Sort the support ticket into bug, feature or question."


def reply(request: LLMRequest) -> str:
    """Answers that follow the prompt: the docstring decides triage's label, and the
    summary counts the bugs it was sent in earlier turns (its history)."""
    text = "\n".join(str(m.get("content")) for m in request.messages)
    last = str(request.messages[-1].get("content"))
    if "Summarize" in text:
        return f"{text.count('bug')} bug(s) today"
    if "Sort" in text:
        return "bug"  # the edited docstring makes every ticket a bug
    return "bug" if "crash" in last else "feature"


@pytest.fixture
def shell(bare_shell: Shell) -> Shell:
    bare_shell.magics.history_turns = 20
    return bare_shell


def run_cells(
    shell: Shell, doc: str, cells: list[str], first: str | None = None, agents: str = AGENTS
) -> None:
    shell.run(agents.replace("{doc}", doc))
    for i, cell in enumerate(cells):
        if i == 0 and first is not None:
            cell = cell.replace("%%openprogram", f"%%openprogram --from {first}", 1)
        shell.run(cell)


def session_id(shell: Shell) -> str:
    meta = shell.magics.turns.kernel_meta
    assert meta is not None
    return meta.session_id


def test_docstring_edit_on_a_branch_pairs_every_call_and_says_why(
    shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.use_provider(reply)
    run_cells(shell, OLD_DOC, CELLS)
    sid = session_id(shell)
    first_tip = turns_of(sid)[-1].id
    # the same notebook again after a docstring edit, as a branch from the session's root
    run_cells(shell, NEW_DOC, CELLS, first="root")
    turns = turns_of(sid)
    assert len(turns) == 6
    root = next(n for n in default_db().open(sid).nodes() if n.kind == "root")
    assert turns[3].predecessor == root.id  # --from root: the branch starts there
    assert turns[4].predecessor == turns[3].id and turns[5].predecessor == turns[4].id
    second_tip = turns[5].id
    capsys.readouterr()

    view = shell.line(f"diff {first_tip} {second_tip} --lines")
    report = view.report
    assert report.count("added") == report.count("removed") == 0  # every call paired
    assert report.count("paired") == 3 + 3 + 3  # 3 turns, 3 functions, 3 llm calls
    by_path = {r.path: r for r in report.rows}
    first, second, third = (f"turn {t.turn}" for t in turns[3:])
    # the docstring and prompt diffs are shown for the edited function only
    with_doc = [r.path for r in report.rows if r.doc_diff]
    with_prompt = [r.path for r in report.rows if r.prompt_diff]
    assert with_doc == [f"{first} › triage", f"{second} › triage"]
    assert with_prompt == [f"{first} › triage › llm 1", f"{second} › triage › llm 1"]
    assert f"-{OLD_DOC}" in by_path[f"{first} › triage"].doc_diff
    assert f"+{NEW_DOC}" in by_path[f"{first} › triage"].doc_diff
    # the first ticket stayed a bug, the second became one; the summary depends on it
    assert not by_path[f"{first} › triage › llm 1"].changed
    moved = by_path[f"{second} › triage › llm 1"]
    assert moved.changed and moved.cause == "docstring"
    assert moved.note == "the docstring of `triage` changed, and this answer changed with it"
    summary = by_path[f"{third} › summarize › llm 1"]
    assert summary.changed and summary.cause == "history" and not summary.prompt_diff
    findings = "\n".join(report.findings)
    assert "the docstring of `triage` changed, and 1 answer changed with it" in findings
    assert "not deterministic" not in findings

    bundle = view.bundle()  # what the notebook keeps: static HTML, text, the data
    assert "the docstring of `triage` changed" in bundle["text/html"]
    assert "<script" not in bundle["text/html"]
    assert bundle[DIFF_MIME]["counts"] == {"paired": 9, "added": 0, "removed": 0}

    # the terminal says the same
    assert cli_main(["sessions", "diff", sid, first_tip, second_tip, "--lines"]) == 0
    out = capsys.readouterr().out
    assert "the docstring of `triage` changed, and 1 answer changed with it" in out
    assert f"-{OLD_DOC}" in out and f"+{NEW_DOC}" in out


def test_an_added_call_is_reported_as_added(shell: Shell) -> None:
    shell.use_provider(reply)
    run_cells(shell, OLD_DOC, CELLS[:2])
    sid = session_id(shell)
    tip = turns_of(sid)[-1].id
    grown = [CELLS[0], '%%openprogram\ntriage("add a dark mode")\ntriage("export to csv")']
    run_cells(shell, OLD_DOC, grown, first="root")
    report = shell.line(f"diff {tip} head --lines").report
    added = [r.path for r in report.rows if r.state == "added"]
    assert len(added) == 2 and added[0].endswith("› triage") and added[1].endswith("› llm 1")
    assert report.count("removed") == 0
    assert any("1 call added (only in B)" in f for f in report.findings)


def test_same_prompts_different_answers_is_non_determinism(shell: Shell) -> None:
    answers = iter(["bug", "feature", "question", "bug"])
    shell.use_provider(lambda request: next(answers))
    shell.magics.history_turns = 0  # each call sees only its own prompt
    run_cells(shell, OLD_DOC, CELLS[:2])
    sid = session_id(shell)
    tip = turns_of(sid)[-1].id
    run_cells(shell, OLD_DOC, CELLS[:2], first="root")
    report = shell.line(f"diff {tip} head --lines").report
    loose = [r for r in report.rows if r.cause == "nondeterministic"]
    assert len(loose) == 2 and all(not r.prompt_diff for r in loose)
    assert any(
        "same prompt, different answer: the model is not deterministic" in f
        for f in report.findings
    )


def test_from_a_node_that_is_not_there_is_one_line(shell: Shell) -> None:
    from IPython.core.error import UsageError

    run_cells(shell, OLD_DOC, CELLS[:1])
    result = shell.run('%%openprogram --from n_nothere00\ntriage("two")', error=UsageError)
    assert "no node 'n_nothere00' in this session" in str(result.error_in_exec)
    assert len(turns_of(session_id(shell))) == 1  # nothing written


def test_diff_of_turns_and_bad_input(shell: Shell, capsys: pytest.CaptureFixture[str]) -> None:
    from IPython.core.error import UsageError

    shell.use_provider(reply)
    run_cells(shell, OLD_DOC, CELLS[:2])
    report = shell.line("diff 1 2").report
    assert report.count("paired") == 3 and len(report.changed) >= 1
    with pytest.raises(UsageError, match="no turn 9"):
        shell.line("diff 1 9")
    with pytest.raises(UsageError, match="`--runs` needs two"):
        shell.line("diff --runs")
    assert cli_main(["sessions", "diff", session_id(shell), "1", "n_nothere00"]) == 2
    assert "no node 'n_nothere00'" in capsys.readouterr().err


def test_the_saved_diff_survives_a_reopen_and_nbconvert(shell: Shell, tmp_path: Any) -> None:
    """The diff's static form is in the saved output: read back with no kernel, and
    nbconvert's HTML shows it (checked without a browser)."""
    import nbformat
    from nbconvert import HTMLExporter

    shell.use_provider(reply)
    run_cells(shell, OLD_DOC, CELLS[:2])
    tip = turns_of(session_id(shell))[-1].id
    run_cells(shell, NEW_DOC, CELLS[:2], first="root")
    bundle = shell.line(f"diff {tip} head --lines").bundle()
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(f"%openprogram diff {tip} head --lines")
    cell.outputs = [nbformat.v4.new_output("display_data", data=bundle)]
    nb.cells = [cell]
    path = tmp_path / "diff.ipynb"
    nbformat.write(nb, path)
    reopened = nbformat.read(path, as_version=4)  # no kernel
    data = reopened.cells[0].outputs[0]["data"]
    assert data[DIFF_MIME]["counts"]["paired"] == 6
    html, _ = HTMLExporter().from_notebook_node(reopened)
    assert "the docstring of `triage` changed, and 1 answer changed with it" in html
    assert f"A: the line ending at {tip}" in html
