"""The research workflow's stages: survey → gaps → ideas → design → paper → review.

Each docstring is the instruction the model gets for that stage (sent once, as the system
message, by the session context); each body only moves data: the inputs go to the model
as JSON, the reply comes back as JSON checked against the stage's schema
(``schemas.py``), a dict.  Changing what a stage does means editing its docstring.
"""

from __future__ import annotations

from typing import Any

from openprogram.agentic_programming import Runtime, agentic_function
from openprogram.context.policy import ContextPolicy
from openprogram.programs.research import schemas

SECTIONS = ("abstract", "introduction", "method", "experiments", "conclusion")
Doc = dict[str, Any]


def ask(runtime: Runtime | None, schema: dict[str, Any], brief: bool, **inputs: Any) -> Doc:
    """One exec of the current stage: ``inputs`` as its content, a reply in ``schema``.

    ``brief`` is for a small local model (a small ``max_tokens``, a small window): the reply
    in the schema's bounded form (``schemas.brief``: short lists and strings) and a prompt
    without earlier turns — the inputs carry all a stage reads, and the notebook's earlier
    cells (the same documents again) would not fit beside them."""
    assert runtime is not None, "session_context installs a runtime"
    if brief:
        schema, context = schemas.brief(schema), ContextPolicy(turns=0)
    else:
        context = None
    reply = runtime.exec(inputs, response_format=schema, context=context)
    assert isinstance(reply, dict)
    return reply


@agentic_function
def survey_topic(
    task: str, papers: list[Doc] | None = None, brief: bool = False, runtime: Runtime | None = None
) -> Doc:
    """Survey the literature a research task builds on.

    You are a careful research assistant. The input is JSON with the research `task` and,
    when a search was run, `papers` found for it (title, authors, year, summary). Write the
    scope of the question, 5 to 10 key works grouped by approach (prefer the given papers;
    cite only works you are confident exist, and write "(to verify)" rather than invent a
    detail), 3 to 5 findings the field agrees on, and 3 to 5 open problems, most promising
    first. Reply with JSON in the required format only.
    """
    return ask(runtime, schemas.SURVEY, brief, task=task, papers=papers or [])


@agentic_function
def find_gaps(task: str, survey: Doc, brief: bool = False, runtime: Runtime | None = None) -> Doc:
    """Find the research gaps a literature survey leaves open.

    You are a critical reviewer of a field. The input is JSON with the `task` and the
    `survey`. Name up to 5 gaps the surveyed works leave open and the task could address,
    most promising first; for each say why it is open and which surveyed works show it.
    Do not cite works the survey does not list. Reply with JSON in the required format only.
    """
    return ask(runtime, schemas.GAPS, brief, task=task, survey=survey)


@agentic_function
def propose_ideas(
    task: str, survey: Doc, gaps: Doc, brief: bool = False, runtime: Runtime | None = None
) -> Doc:
    """Propose research ideas that close the gaps.

    You are a research lead. The input is JSON with the `task`, the `survey` and the
    `gaps`. Propose up to 3 ideas, each with a falsifiable hypothesis, the method in 2-4
    sentences and the gap it addresses; then choose the idea to pursue first and say why.
    Stay consistent with the survey. Reply with JSON in the required format only.
    """
    return ask(runtime, schemas.IDEAS, brief, task=task, survey=survey, gaps=gaps)


@agentic_function
def design_experiment(
    task: str, ideas: Doc, brief: bool = False, runtime: Runtime | None = None
) -> Doc:
    """Design the experiment that tests the chosen idea.

    You are an experimentalist. The input is JSON with the `task` and the `ideas` (the
    `choice` names the idea to test). Give the hypothesis, the setup (datasets or
    environments), baselines including the strongest known one, metrics, the ablations that
    isolate the idea's contribution, the results that would confirm or refute it, and the
    risks with a rough compute/time budget. Reply with JSON in the required format only.
    """
    return ask(runtime, schemas.DESIGN, brief, task=task, ideas=ideas)


@agentic_function
def write_section(
    section: str,
    task: str,
    survey: Doc,
    ideas: Doc,
    design: Doc,
    brief: bool = False,
    runtime: Runtime | None = None,
) -> Doc:
    """Write one section of a short research paper.

    You are writing a workshop paper about the chosen idea. The input is JSON with the
    `section` to write (abstract, introduction, method, experiments or conclusion), the
    `task`, the `survey`, the `ideas` and the experiment `design`. abstract: at most 150
    words. introduction: motivation, the gap, the idea, the contributions; cite as
    (Author, year) from the survey only. method: precise enough to reimplement.
    experiments: the design as a plan, no invented numbers. conclusion: what the paper
    shows if the hypothesis holds, limitations, next steps. Reply with JSON in the
    required format only.
    """
    return ask(
        runtime, schemas.SECTION, brief, section=section, task=task, survey=survey, ideas=ideas,
        design=design,
    )  # fmt: skip


@agentic_function
def write_paper(task: str, survey: Doc, ideas: Doc, design: Doc, brief: bool = False) -> Doc:
    """Draft the paper: one write_section call per section, titled after the chosen idea."""
    sections = [write_section(name, task, survey, ideas, design, brief) for name in SECTIONS]
    return {"title": str(ideas.get("choice") or task), "sections": sections}


@agentic_function
def review_paper(task: str, paper: Doc, brief: bool = False, runtime: Runtime | None = None) -> Doc:
    """Review a draft paper as a workshop reviewer would.

    You are a fair but demanding reviewer. The input is JSON with the `task` and the draft
    `paper`. Summarise its claim, list strengths, weaknesses concrete enough to act on and
    questions for the authors, give a score from 1 to 10 and a decision (revise or
    accept). Reply with JSON in the required format only.
    """
    return ask(runtime, schemas.REVIEW, brief, task=task, paper=paper)
