"""The research program: the stages as cells of ``notebooks/research.ipynb``, as the CLI
and as a pipeline, over one work folder; seed 000's S2 check — every stage's docstring
reaches the model exactly once, as the system message — from every entry point."""

from __future__ import annotations

import inspect
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from openprogram.agentic_programming import Runtime
from openprogram.agentic_programming.prompt import sent_messages
from openprogram.cli import main
from openprogram.context.nodes import Call
from openprogram.errors import UserError
from openprogram.programs.research import (
    PIPELINE,
    SECTIONS,
    ResearchWork,
    design_experiment,
    find_gaps,
    propose_ideas,
    review_paper,
    run_research,
    schemas,
    survey_topic,
    write_section,
)
from openprogram.providers.test import TestProvider, sample_from_schema
from openprogram.store.session.store import SessionStore

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "research.ipynb"
STAGE_FUNCTIONS = (
    survey_topic, find_gaps, propose_ideas, design_experiment, write_section, review_paper
)  # fmt: skip
DOCS = {f.__name__: inspect.getdoc(f) for f in STAGE_FUNCTIONS}
EXPECTED_CALLS = (
    ["survey_topic", "find_gaps", "propose_ideas", "design_experiment"]
    + ["write_section"] * len(SECTIONS)
    + ["review_paper"]
)
SCHEMAS = {
    "survey": schemas.SURVEY,
    "gaps": schemas.GAPS,
    "ideas": schemas.IDEAS,
    "design": schemas.DESIGN,
    "review": schemas.REVIEW,
}
ARTIFACTS = sorted([f"{s}.{ext}" for s in PIPELINE for ext in ("json", "md")] + ["task.txt"])


def session_nodes(home: Path, sid: str) -> list[Call]:
    store = SessionStore(home)
    try:
        return sorted(store.open(sid).nodes(), key=lambda n: n.seq)
    finally:
        store.close()


def stages_seen(nodes: list[Call]) -> list[str]:
    """For each llm node, the stage whose docstring is its one system message (checked to
    be its caller's docstring, and nowhere else in the request)."""
    by_id = {n.id: n for n in nodes}
    seen = []
    for node in (n for n in nodes if n.kind == "llm"):
        messages = node.metadata["messages"]
        system = [m["content"] for m in messages if m["role"] == "system"]
        stage = by_id[node.caller].name if node.caller else None
        assert stage in DOCS and system == [DOCS[stage]], (stage, system)
        first_line = DOCS[stage].splitlines()[0]
        assert sum(first_line in m["content"] for m in messages) == 1
        seen.append(stage)
    return seen


def run_notebook_entry(tmp_path: Path, home: Path) -> tuple[str, Path]:
    from openprogram_magics.headless import run_notebook

    target = tmp_path / "nb" / "research.ipynb"
    target.parent.mkdir(exist_ok=True)
    shutil.copy(NOTEBOOK, target)
    result = run_notebook(target, timeout=120)
    assert result.error is None and result.session_id
    return result.session_id, target.parent / "research_work"


def run_cli_entry(tmp_path: Path, home: Path) -> tuple[str, Path]:
    work = tmp_path / "cli"
    code = main(["research", "a task", "--work-dir", str(work), "--provider", "test"])
    assert code == 0
    (sid,) = {n.name for n in (home / "sessions").iterdir()}
    return sid, work


def run_background_entry(tmp_path: Path, home: Path) -> tuple[str, Path]:
    from openprogram import background, create_runtime
    from openprogram.programs.research import research_agent

    work = ResearchWork(tmp_path / "bg", task="a task")
    run = background(research_agent, str(work.folder), runtime=create_runtime("test"))
    assert run.wait(60) == list(PIPELINE) and run.session_id
    return run.session_id, work.folder


ENTRY_POINTS: dict[str, Callable[[Path, Path], tuple[str, Path]]] = {
    "notebook": run_notebook_entry,
    "cli": run_cli_entry,
    "background": run_background_entry,
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_each_stage_docstring_reaches_the_model_once_from_every_entry_point(
    entry: str, tmp_path: Path, op_home: Path
) -> None:
    sid, work = ENTRY_POINTS[entry](tmp_path, op_home)
    assert stages_seen(session_nodes(op_home, sid)) == EXPECTED_CALLS
    assert sorted(p.name for p in work.iterdir()) == ARTIFACTS


@pytest.mark.timeout(180)
def test_the_notebook_runs_offline_and_its_artifacts_are_structured(
    tmp_path: Path, op_home: Path
) -> None:
    sid, folder = run_notebook_entry(tmp_path, op_home)
    work = ResearchWork(folder)
    for stage, schema in SCHEMAS.items():
        jsonschema.validate(work.load(stage), schema)
    paper = work.load("paper")
    assert [s["heading"] for s in paper["sections"]] == ["[test] The section's heading"] * 5
    review_md = (folder / "review.md").read_text()
    assert "## Weaknesses\n\n- [test] A weakness" in review_md and "/10" in review_md
    turns = [n for n in session_nodes(op_home, sid) if n.kind == "turn"]
    assert len(turns) == 6  # one turn per stage cell

    # the CLI continues the notebook's session over the same folder
    assert main(["research", "--work-dir", str(folder), "--session", sid, "--restart"]) == 2
    code = main(
        ["research", "--work-dir", str(folder), "--session", sid, "--provider", "test", "--restart"]
    )
    assert code == 0
    nodes = session_nodes(op_home, sid)
    first_cli_llm = next(n for n in nodes if n.kind == "llm" and n.turn > turns[-1].turn)
    store = SessionStore(op_home)  # the llm node names the turns it saw; rebuild the prompt
    try:
        sent = sent_messages(store.open(sid), first_cli_llm)
    finally:
        store.close()
    history = "\n".join(m["content"] for m in sent[1:-1])
    # the notebook's cells, as plain statements of what was asked and what came back
    assert "- review_paper was called with task=" in history
    assert "%%openprogram" not in history and "(done)" not in history


def test_a_brief_run_bounds_every_reply_and_sends_no_earlier_turns(
    tmp_path: Path, rt: Runtime
) -> None:
    """``brief`` (the notebook's ``BRIEF``, the CLI's ``--brief``) is for a small local model:
    each request's schema caps lists and strings (a grammar-constrained server then cannot
    write past a small ``max_tokens``) and carries no earlier turns; what comes back is valid
    against the full schemas too."""
    provider = rt.provider
    assert isinstance(provider, TestProvider)
    first = run_research("a task", work_dir=tmp_path, runtime=rt)
    provider.requests.clear()
    run_research(None, work_dir=tmp_path, session_id=first.session_id, runtime=rt,
                 resume=False, brief=True)  # fmt: skip
    brief_requests = list(provider.requests)
    provider.requests.clear()
    run_research(None, work_dir=tmp_path, session_id=first.session_id, runtime=rt, resume=False)
    assert len(brief_requests) == len(provider.requests) == len(EXPECTED_CALLS)
    for brief, full in zip(brief_requests, provider.requests, strict=True):
        assert [m["role"] for m in brief.messages] == ["system", "user"]
        assert len(full.messages) > 2  # the earlier runs' turns, as history
        assert brief.messages[-1]["content"] == full.messages[-1]["content"]  # the same inputs
        bounded = json.dumps(brief.response_format)
        assert f'"maxLength": {schemas.BRIEF_CHARS}' in bounded
        assert '"maxLength"' not in json.dumps(full.response_format)
    survey = brief_requests[0].response_format
    works = survey["properties"]["works"]
    assert works["maxItems"] == works["minItems"] == 2  # never below the schema's minimum
    assert survey["properties"]["settled"]["maxItems"] == schemas.BRIEF_ITEMS


def test_brief_schemas_accept_only_what_the_full_schemas_accept() -> None:
    long_scope = {**sample_from_schema(schemas.SURVEY), "scope": "x" * (schemas.BRIEF_CHARS + 1)}
    with pytest.raises(jsonschema.ValidationError, match="is too long"):
        jsonschema.validate(long_scope, schemas.brief(schemas.SURVEY))
    jsonschema.validate(long_scope, schemas.SURVEY)
    for schema in (*SCHEMAS.values(), schemas.SECTION):
        small = sample_from_schema(schemas.brief(schema))
        jsonschema.validate(small, schemas.brief(schema))
        jsonschema.validate(small, schema)
    assert (
        schemas.brief(schemas.REVIEW)["properties"]["decision"]
        == schemas.REVIEW["properties"]["decision"]
    )  # an enum is left alone


def test_a_resumed_run_starts_at_the_first_stage_not_done(
    tmp_path: Path, rt: Runtime, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run_research("a task", work_dir=tmp_path, runtime=rt)
    assert first.stages == list(PIPELINE)
    (tmp_path / "design.json").unlink()
    (tmp_path / "review.json").unlink()
    again = run_research(None, work_dir=tmp_path, session_id=first.session_id, runtime=rt)
    assert again.stages == ["design", "paper", "review"] and again.session_id == first.session_id
    assert run_research(None, work_dir=tmp_path, runtime=rt).stages == []


def test_another_task_for_a_finished_folder_is_refused_unless_every_stage_is_redone(
    tmp_path: Path, rt: Runtime, capsys: pytest.CaptureFixture[str], op_home: Path
) -> None:
    work = tmp_path / "work"
    run_research("task A", work_dir=work, runtime=rt)
    ResearchWork(work).save("papers", {"query": "task A", "papers": []})  # found for task A
    before = {p.name: p.read_bytes() for p in work.iterdir()}
    with pytest.raises(UserError, match="done for another task \\('task A'\\)"):
        run_research("task B", work_dir=work, runtime=rt)
    assert main(["research", "task B", "--work-dir", str(work), "--provider", "test"]) == 2
    said = capsys.readouterr()
    assert "--restart" in said.err and "session:" not in said.out  # refused before one
    assert {p.name: p.read_bytes() for p in work.iterdir()} == before  # nothing lost
    redone = run_research("task B", work_dir=work, runtime=rt, resume=False)
    assert redone.stages == list(PIPELINE) and ResearchWork(work).task == "task B"
    assert not (work / "papers.json").exists()  # task A's papers are not task B's survey's
    assert run_research("task B", work_dir=work, runtime=rt).stages == []  # its own: fine


def test_the_cli_prints_the_session_and_what_it_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], op_home: Path
) -> None:
    assert main(["research", "x", "--work-dir", str(tmp_path), "--provider", "test"]) == 0
    out = capsys.readouterr().out
    assert re.match(r"session: (research_[0-9a-f]{10}) \(--session \1 to continue\)\n", out)
    assert "ran: survey, gaps, ideas, design, paper, review\n" in out
    # progress while it ran (not a terminal: a plain line per event), stage by stage
    progress = [line for line in out.splitlines() if line.startswith("research: ")]
    assert any(line.startswith("research: survey_topic started · 0 calls") for line in progress)
    assert any(re.search(r"review_paper: call \d+ sent", line) for line in progress)
    assert re.search(r"review_paper: call (\d+) completed · \1 calls · [\d,]+ tokens", progress[-1])
    sessions = sorted((op_home / "sessions").iterdir())
    assert main(["research", "--work-dir", str(tmp_path), "--provider", "test"]) == 0
    assert "nothing to run: every stage" in capsys.readouterr().out
    assert sorted((op_home / "sessions").iterdir()) == sessions  # no empty one made for it
    data: dict[str, Any] = json.loads((tmp_path / "ideas.json").read_text())
    jsonschema.validate(data, schemas.IDEAS)


def test_without_a_provider_or_a_task_the_cli_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], op_home: Path
) -> None:
    assert main(["research", "x", "--work-dir", str(tmp_path)]) == 2
    said = capsys.readouterr().err
    assert "No LLM provider configured" in said and "research|chat --provider test`" in said
    assert main(["research", "--work-dir", str(tmp_path / "new"), "--provider", "test"]) == 2
    assert "no task given" in capsys.readouterr().err
    assert not (op_home / "sessions").exists()  # nothing written


def test_a_work_dir_that_cannot_be_a_folder_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("x")
    for where, why in ((tmp_path / "a-file", "a file, not a folder"), ("/proc/1/x", "/proc/1/x")):
        assert main(["research", "x", "--work-dir", str(where), "--provider", "test"]) == 2
        said = capsys.readouterr().err
        assert said.startswith("openprogram: cannot use ") and said.count("\n") == 1
        assert why in said and "as the work folder" in said


@pytest.mark.timeout(60)
def test_the_cli_says_what_failed_in_two_lines_and_the_traceback_is_one_flag_away(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    op_home: Path,
    wire: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reply that never fits the stage's schema, then a refused key, through the real
    ``openai`` SDK: the CLI prints what failed (the format problem itself, not the reply)
    and how to see more; ``--traceback`` raises the error instead."""
    from wire_server import Reply

    from openprogram.errors import ResponseFormatError
    from openprogram.providers.network import allow_model_requests

    monkeypatch.setenv("OPENAI_BASE_URL", wire.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wire-cli")
    monkeypatch.delenv("OPENPROGRAM_TRACEBACK", raising=False)
    research = ["research", "why?", "--work-dir", str(tmp_path / "w"), "--provider", "openai"]
    wire.reply(*[Reply(text="Here you go: no JSON today.")] * 3)
    with allow_model_requests(True):
        assert main(research) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err
    assert err[0].startswith("openprogram: ResponseFormatError: ")
    assert "last problem: the reply is not valid JSON" in err[0]
    assert "no JSON today" not in err[0]  # the problem, not the reply
    assert err[1] == "  (openprogram --traceback ... shows the traceback)"

    wire.reset()
    wire.reply(Reply(status=401, error_message="Incorrect API key provided"))
    with allow_model_requests(True):
        assert main(research) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "ProviderError" in err[0] and "401" in err[0], err
    assert "Traceback" not in "\n".join(err)

    wire.reset()
    wire.reply(*[Reply(text="still not JSON")] * 3)
    with allow_model_requests(True), pytest.raises(ResponseFormatError):
        main(["--traceback", *research])
