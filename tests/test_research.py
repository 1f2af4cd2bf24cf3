"""The research program: files in the work dir, the session id printed, and seed 000's S2
check — every stage's docstring reaches the model exactly once, as the system message,
from the CLI as from a plain ``session_context``."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from openprogram import session_context
from openprogram.agentic_programming import Runtime
from openprogram.cli import main
from openprogram.programs.research import (
    SECTIONS,
    design_experiments,
    research_agent,
    run_research,
    survey_topic,
    write_section,
)
from openprogram.providers.base import LLMRequest
from openprogram.providers.test import TestProvider
from openprogram.store.session.store import SessionStore

STAGES = {f.__name__: inspect.getdoc(f) for f in (survey_topic, design_experiments, write_section)}
ORCHESTRATOR_DOC = (inspect.getdoc(research_agent) or "").splitlines()[0]
FILES = [
    "ideas.md",
    "literature_review.md",
    "paper/01_abstract.md",
    "paper/02_introduction.md",
    "paper/03_method.md",
    "paper/04_experiments.md",
    "paper/05_conclusion.md",
    "paper/paper.md",
]


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[LLMRequest]:
    """Every request any TestProvider gets (the CLI builds its own)."""
    requests: list[LLMRequest] = []
    original = TestProvider.complete

    def recording(self: TestProvider, request: LLMRequest, on_delta: object = None) -> object:
        requests.append(request)
        return original(self, request, None)

    monkeypatch.setattr(TestProvider, "complete", recording)
    return requests


def research_cli(task: str, work_dir: Path, *extra: str) -> None:
    code = main(["research", task, "--work-dir", str(work_dir), "--provider", "test", *extra])
    assert code == 0


def stage_of(request: LLMRequest) -> str:
    """The stage whose docstring is this request's one system message — and only there."""
    system = [m["content"] for m in request.messages if m["role"] == "system"]
    assert len(system) == 1, system
    stage = next(name for name, doc in STAGES.items() if system[0] == doc)
    elsewhere = [m for m in request.messages[1:] if STAGES[stage].splitlines()[0] in m["content"]]
    assert elsewhere == []
    assert ORCHESTRATOR_DOC not in str(request.messages)  # it execs nothing itself
    return stage


def assert_each_stage_docstring_sent_once(requests: list[LLMRequest]) -> None:
    stages = [stage_of(r) for r in requests]
    assert stages == ["survey_topic", "design_experiments"] + ["write_section"] * len(SECTIONS)


def files_under(work_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(work_dir)) for p in work_dir.rglob("*") if p.is_file())


def test_cli_writes_the_files_prints_the_session_and_sends_each_docstring_once(
    tmp_path: Path, captured: list[LLMRequest], capsys: pytest.CaptureFixture[str]
) -> None:
    research_cli("agent reliability", tmp_path / "out")
    out = capsys.readouterr().out
    match = re.match(r"session: (research_[0-9a-f]{10}) \(--session \1 to continue\)\n", out)
    assert match, out
    assert files_under(tmp_path / "out") == FILES
    paper = (tmp_path / "out" / "paper" / "paper.md").read_text()
    assert paper.count("[test reply]") == len(SECTIONS)
    assert_each_stage_docstring_sent_once(captured)
    assert '"section": "abstract"' in captured[2].messages[-1]["content"]  # data, not orders


def test_a_plain_session_context_sends_each_docstring_once(
    tmp_path: Path, captured: list[LLMRequest]
) -> None:
    from openprogram import create_runtime

    with session_context(runtime=create_runtime("test")):
        names = research_agent("agent reliability", str(tmp_path))
    assert sorted(names) == FILES
    assert_each_stage_docstring_sent_once(captured)


def test_a_second_run_with_session_continues_it(
    tmp_path: Path,
    captured: list[LLMRequest],
    capsys: pytest.CaptureFixture[str],
    op_home: Path,
) -> None:
    research_cli("survey agent reliability", tmp_path / "a")
    session_id = capsys.readouterr().out.split()[1]
    captured.clear()
    research_cli("now turn it into a paper", tmp_path / "b", "--session", session_id)
    assert capsys.readouterr().out.startswith(f"session: {session_id} ")

    survey = captured[0].messages
    assert survey[0]["content"] == STAGES["survey_topic"]
    history = "\n".join(m["content"] for m in survey[1:-1])
    assert "research_agent(task='survey agent reliability'" in history
    assert "now turn it into a paper" in survey[-1]["content"]
    session = SessionStore(op_home).open(session_id)
    turns = [n for n in session.nodes() if n.name == "research_agent"]
    assert len(turns) == 2 and turns[1].predecessor == turns[0].id
    assert session.meta["source"] == "cli" and session.meta["turns"] == 2


def test_run_research_returns_the_session_and_the_files(tmp_path: Path, rt: Runtime) -> None:
    first = run_research("a task", work_dir=tmp_path, runtime=rt)
    again = run_research("more", work_dir=tmp_path, session_id=first.session_id, runtime=rt)
    assert first.session_id.startswith("research_") and again.session_id == first.session_id
    assert [p.relative_to(tmp_path).as_posix() for p in first.files] == [
        "literature_review.md",
        "ideas.md",
        *(f"paper/{i:02d}_{name}.md" for i, name in enumerate(SECTIONS, 1)),
        "paper/paper.md",
    ]
    assert all(p.is_file() for p in first.files)


def test_without_a_provider_the_cli_says_how_to_configure_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], op_home: Path
) -> None:
    assert main(["research", "x", "--work-dir", str(tmp_path)]) == 2
    assert "No LLM provider configured" in capsys.readouterr().err
    assert not (op_home / "sessions").exists()  # nothing written
