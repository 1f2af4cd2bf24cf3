"""Stale turns (issue 24): the one rule (``openprogram.compare.stale``) that
``openprogram run --only-stale`` and ``%openprogram stale`` / the DAG's ``stale`` badge
follow.  Sessions built in a real IPython shell with the ``function`` provider."""

from __future__ import annotations

from pathlib import Path

import nbformat

from openprogram.agent.session_db import default_db
from openprogram.compare.stale import Now, RecordedCell, stale_reasons, stale_turns
from openprogram.providers.base import LLMRequest
from openprogram.providers.replay import ReplayProvider
from openprogram.providers.test import FunctionProvider
from tests.test_compare import run_cells as compare_cells
from tests.test_compare import session_id as session_id
from tests.test_magics import Shell, turns_of

# `handle`'s docstring is not in the prompt `triage` sends: an edit of it changes no prompt
AGENTS = '''
from openprogram import agentic_function

@agentic_function
def triage(ticket: str, runtime=None) -> str:
    """Classify the support ticket as bug, feature or question."""
    return runtime.exec(ticket)

@agentic_function
def handle(ticket: str, runtime=None) -> str:
    """{doc}"""
    return triage(ticket) + ": queued"
'''
OLD = "Handle a ticket: classify it, then queue it."
NEW = "Handle a ticket: classify it, then queue it for the right team."
CELLS = ['%%openprogram\nhandle("the app crashes on save")', '%%openprogram\ntriage("dark mode")']


def reply(request: LLMRequest) -> str:
    return "bug" if "crash" in str(request.messages[-1].get("content")) else "feature"


def run_cells(shell: Shell, doc: str, *, first: str | None = None) -> None:
    compare_cells(shell, doc, CELLS, first, agents=AGENTS)


def test_the_rule_docstring_code_and_provider() -> None:
    recorded = RecordedCell(functions={"triage": {("d1", "s1")}}, models={("openai", "gpt-x")})
    assert stale_reasons(recorded, [("triage", "d1", "s1")], ("openai", "gpt-x")) == []
    assert stale_reasons(recorded, [("triage", "d2", "s2")], ("openai", "gpt-x")) == [
        "the docstring of `triage` changed"
    ]
    code = stale_reasons(recorded, [("triage", "d1", "s2")], None)
    assert code == ["the code of `triage` changed"]
    assert stale_reasons(recorded, [("triage", "d1", "s1")], ("anthropic", "claude")) == [
        "recorded with openai/gpt-x, now anthropic/claude"
    ]
    # a function the cell never ran, or no model known, is no reason; an unknown cell is
    assert stale_reasons(recorded, [("other", "x", "y")], None) == []
    assert stale_reasons(None, [], None)[0].startswith("its cell's code changed")


def test_stale_lists_the_cell_whose_function_docstring_changed(
    bare_shell: Shell, tmp_path: Path
) -> None:
    shell = bare_shell
    shell.use_provider(reply)
    run_cells(shell, OLD)
    sid = session_id(shell)
    first, second = turns_of(sid)
    assert shell.line("stale").report.stale == []  # nothing changed yet

    shell.run(AGENTS.replace("{doc}", NEW))  # the docstring of handle edited, cells not
    report = shell.line("stale").report
    assert [s.turn.id for s in report.stale] == [first.id]
    assert report.stale[0].reasons == ["the docstring of `handle` changed"]
    assert not report.cells_known
    assert "cell code not checked" in repr(shell.line("stale"))

    # the same, read from the nodes: the rule is pure
    nodes = default_db().open(sid).nodes()
    hashes = {"handle": shell.ip.user_ns["handle"].__agentic_hashes__}
    assert list(stale_turns(nodes, Now(functions=hashes)).by_turn()) == [first.id]

    # another provider: every recorded cell is stale
    other = Now(model=("openai", "gpt-x"))
    assert [s.turn.id for s in stale_turns(nodes, other).stale] == [first.id, second.id]

    # a notebook whose second cell was edited: that cell's turn is stale too (gone)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in (AGENTS, CELLS[0], CELLS[1] + "  # v2")]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    with_cells = shell.line(f"stale --notebook {path}").report
    assert [s.turn.id for s in with_cells.stale] == [first.id, second.id]
    assert with_cells.stale[1].gone and with_cells.unrecorded == 1

    # the DAG marks the stale turn (static drawing and text; the widget's summary)
    saved = shell.line("dag")
    marked = [s for s in saved.widget.summary if s.get("stale")]
    assert [s["id"] for s in marked] == [first.id]
    assert marked[0]["stale"] == "the docstring of `handle` changed"
    data, _ = saved._repr_mimebundle_()
    assert data["text/html"].count("⟳ stale") == 1
    assert "stale</b> the docstring of `handle` changed" in data["text/html"]
    marked_lines = [ln for ln in data["text/plain"].splitlines() if "⟳ stale" in ln]
    assert len(marked_lines) == 1 and marked_lines[0].startswith("●")


def test_only_stale_differs_from_record_misses(bare_shell: Shell) -> None:
    """The cell's text is the same and so is every prompt it sends; only a docstring that
    is not in any prompt changed.  ``--record-misses`` replays the cell (its prompts were
    recorded); ``--only-stale`` runs it live, and only it (provider requests counted)."""
    shell = bare_shell
    recorder = shell.use_provider(reply)
    run_cells(shell, OLD)
    sid = session_id(shell)
    assert len(recorder.requests) == 2

    # --replay --record-misses after the edit: nothing missed, nothing sent
    misses = FunctionProvider(reply)
    shell.use_runtime(ReplayProvider(sid, fallback=misses))
    run_cells(shell, NEW, first="root")
    assert len(misses.requests) == 0
    replayed = turns_of(sid)[2:]
    assert len(replayed) == 2

    # --only-stale with nothing edited: nothing sent (a `--from` line is no edit)
    idle = FunctionProvider(reply)
    shell.use_runtime(ReplayProvider(sid, fallback=idle, live_stale=True))
    run_cells(shell, OLD, first="root")
    assert len(idle.requests) == 0

    # --only-stale: the handle cell (its docstring changed) live, the triage cell replayed
    live = FunctionProvider(reply)
    shell.use_runtime(ReplayProvider(sid, fallback=live, live_stale=True))
    run_cells(shell, NEW, first="root")
    assert len(live.requests) == 1
    assert live.requests[0].messages[-1]["content"] == "the app crashes on save"
    nodes = default_db().open(sid).nodes()
    last = turns_of(sid)[6:]
    by_id = {n.id: n for n in nodes}

    def turn_of(node_id: str | None) -> str | None:
        while node_id is not None and by_id[node_id].kind not in ("turn", "root"):
            node_id = by_id[node_id].caller
        return node_id

    llms = [n for n in nodes if n.kind == "llm" and turn_of(n.caller) in {t.id for t in last}]
    assert [n.metadata.get("model") for n in llms] == ["function", "replay"]


def test_a_replayed_run_is_no_recording_of_the_new_docstring(bare_shell: Shell) -> None:
    """After a replay that answered from the old recording, the edited docstring is still
    stale: the replay ran it, but no answer was recorded for it."""
    shell = bare_shell
    shell.use_provider(reply)
    run_cells(shell, OLD)
    sid = session_id(shell)
    shell.use_runtime(ReplayProvider(sid, fallback=FunctionProvider(reply)))
    run_cells(shell, NEW, first="root")
    shell.use_provider(reply)
    report = shell.line("stale").report
    assert [s.reasons for s in report.stale] == [["the docstring of `handle` changed"]]
