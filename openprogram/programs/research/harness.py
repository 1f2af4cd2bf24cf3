"""The research pipeline: the stages in order over a work folder, resumable.

The work folder (artifact files) and the session (the DAG of what was asked and answered)
are two independent kinds of persistence: passing ``session_id`` back continues the
session's history whatever the folder, and a stage whose ``<stage>.json`` is in the folder
is done — a resumed run (the CLI again, a notebook cell, a background run after a kernel
restart) starts at the first stage that is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openprogram.agentic_programming import agentic_function
from openprogram.programs.research import literature, stages
from openprogram.programs.research.artifacts import ResearchWork
from openprogram.store.session.context import session_context

if TYPE_CHECKING:
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram.store.session.store import SessionStore

PIPELINE = ("survey", "gaps", "ideas", "design", "paper", "review")


def run_stage(work: ResearchWork, stage: str, brief: bool = False) -> dict[str, Any]:
    """Run ``stage`` on what earlier stages left in ``work`` and save its result
    (``brief``: in the stages' bounded form, for a small model)."""
    task, load = work.task, work.load
    if stage == "survey":
        papers = load("papers")["papers"] if work.done("papers") else None
        doc = stages.survey_topic(task, papers, brief)
    elif stage == "gaps":
        doc = stages.find_gaps(task, load("survey"), brief)
    elif stage == "ideas":
        doc = stages.propose_ideas(task, load("survey"), load("gaps"), brief)
    elif stage == "design":
        doc = stages.design_experiment(task, load("ideas"), brief)
    elif stage == "paper":
        doc = stages.write_paper(task, load("survey"), load("ideas"), load("design"), brief)
    elif stage == "review":
        doc = stages.review_paper(task, load("paper"), brief)
    else:
        raise ValueError(f"unknown stage {stage!r}; the stages are {', '.join(PIPELINE)}")
    work.save(stage, doc)
    return doc


@agentic_function
def research_agent(
    work_dir: str, resume: bool = True, search_arxiv: int = 0, brief: bool = False
) -> list[str]:
    """Carry the research task in work_dir from a literature survey to a reviewed draft.

    With search_arxiv > 0, first searches arXiv for that many papers (papers.json; the
    survey reads them). Runs survey, gaps, ideas, design, paper and review in order, each
    saving <stage>.json and <stage>.md; with resume, it starts at the first stage not done
    (the later ones depend on it, so they run again); with brief, every stage replies in
    short lists and strings. Returns the stages run.
    """
    work = ResearchWork(work_dir)
    if search_arxiv > 0 and not (resume and work.done("papers")):
        found = literature.search_arxiv(work.task, max_results=search_arxiv)
        work.save("papers", {"query": work.task, "papers": found})
    todo = stages_to_run(work, resume)
    for stage in todo:
        run_stage(work, stage, brief)
    return todo


def stages_to_run(work: ResearchWork, resume: bool = True) -> list[str]:
    """Every stage, or (``resume``) those from the first one not done in ``work`` on."""
    todo = list(PIPELINE)
    if resume:
        todo = todo[next((i for i, s in enumerate(todo) if not work.done(s)), len(todo)) :]
    return todo


@dataclass
class ResearchResult:
    session_id: str  # pass it back to continue: run_research(..., session_id=...)
    files: list[Path]
    stages: list[str]  # the stages this run ran (the others were done already)


def run_research(
    task: str | None,
    *,
    work_dir: str | Path,
    session_id: str | None = None,
    runtime: Runtime | None = None,
    db: SessionStore | None = None,
    resume: bool = True,
    search_arxiv: int = 0,
    brief: bool = False,
) -> ResearchResult:
    """Run ``research_agent`` inside ``session_context`` — which is what makes each stage's
    docstring reach the model from a script or the CLI, as from a notebook.  ``task=None``
    continues the task already in ``work_dir``."""
    work = ResearchWork(work_dir, task, redo=not resume)
    title = " ".join(work.task.split())[:60]  # used only when the session is new
    with session_context(
        session_id,
        id_prefix="research",
        source="cli",
        runtime=runtime,
        title=title,
        message=work.task,
        db=db,
    ) as handle:
        ran = research_agent(str(work.folder), resume, search_arxiv, brief)
    return ResearchResult(handle.session_id, work.files(), ran)
