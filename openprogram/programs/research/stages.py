"""The research workflow's stages.

Each docstring is the instruction the model gets for that stage (sent once, as the system
message, by the session context); each body only moves data: inputs in, Markdown out,
files written.  Changing what a stage does means editing its docstring.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from openprogram.agentic_programming import Runtime, agentic_function

SECTIONS = ("abstract", "introduction", "method", "experiments", "conclusion")


def ask(runtime: Runtime | None, **inputs: Any) -> str:
    """One exec of the current stage with ``inputs`` as its content (JSON)."""
    assert runtime is not None, "session_context installs a runtime"
    return str(runtime.exec(inputs))


def save(work_dir: Path, name: str, text: str) -> str:
    path = work_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip() + "\n", encoding="utf-8")
    return name


@agentic_function
def survey_topic(task: str, runtime: Runtime | None = None) -> str:
    """Survey the literature a research task builds on; write the review in Markdown.

    You are a careful research assistant. The input is JSON with the research `task`.
    Write a literature review with exactly these parts:

    # Literature review
    ## Scope — one paragraph: the question the task asks, in your own words, and what
       is in and out of scope.
    ## Key works — 5 to 10 entries, grouped by approach, each formatted as
       "**Authors (year). Title.** — the contribution in one sentence; how it bears on the
       task". Cite only works you are confident exist; when unsure of a detail, write
       "(to verify)" rather than inventing authors, years or venues.
    ## What is settled — 3 to 5 bullets of findings the field agrees on.
    ## Open problems — 3 to 5 bullets, each a gap the task could address, most promising
       first.

    Output only the Markdown document, no preamble.
    """
    return ask(runtime, task=task)


@agentic_function
def design_experiments(task: str, literature_review: str, runtime: Runtime | None = None) -> str:
    """Turn a literature review into concrete research ideas with experiment designs.

    You are a research lead. The input is JSON with the `task` and the
    `literature_review` (Markdown). Propose exactly 3 ideas that address the review's open
    problems. For each idea write, in Markdown:

    ## Idea N: <a short name>
    - **Hypothesis** — one falsifiable sentence.
    - **Method** — what is built or changed, in 2-4 sentences.
    - **Experiments** — datasets or environments, baselines (including the strongest one
      from the review), metrics, and the ablation that isolates the idea's contribution.
    - **Expected outcome** — what result would confirm and what would refute the hypothesis.
    - **Risks and cost** — what could fail, and a rough compute/time budget.

    End with "## Choice": the idea to pursue first and why, in 2-3 sentences. Stay
    consistent with the review; do not cite works it does not mention. Output only Markdown.
    """
    return ask(runtime, task=task, literature_review=literature_review)


@agentic_function
def write_section(
    section: str, task: str, literature_review: str, ideas: str, runtime: Runtime | None = None
) -> str:
    """Write one section of a short research paper from the review and the chosen idea.

    You are writing a workshop paper. The input is JSON with the `section` to write
    (abstract, introduction, method, experiments or conclusion), the `task`, the
    `literature_review` and the `ideas` (whose "Choice" names the idea the paper is about).

    Start with "## <Section name>" and write only that section:
    - abstract: at most 150 words — problem, idea, how it is evaluated, expected finding.
    - introduction: motivation, the gap (from the review's open problems), the idea, and
      a bulleted list of contributions; cite works as (Author, year) from the review only.
    - method: the chosen idea precisely enough to reimplement; notation defined on first use.
    - experiments: setup, baselines, metrics and ablations from the chosen idea's design,
      as a plan (no invented numbers: results are to be run).
    - conclusion: what the paper shows if the hypothesis holds, limitations, next steps.

    Plain academic prose, no filler, no text outside the section.
    """
    return ask(
        runtime, section=section, task=task, literature_review=literature_review, ideas=ideas
    )


@agentic_function
def research_agent(task: str, work_dir: str) -> list[str]:
    """Carry a research task from a literature survey to a draft paper.

    survey_topic writes literature_review.md; design_experiments reads it and writes
    ideas.md; write_section drafts each section into paper/NN_<section>.md, and
    paper/paper.md joins them.  Returns the files written, relative to ``work_dir``.
    """
    out = Path(work_dir)
    review = survey_topic(task)
    ideas = design_experiments(task, review)
    drafts = {name: write_section(name, task, review, ideas) for name in SECTIONS}
    return [
        save(out, "literature_review.md", review),
        save(out, "ideas.md", ideas),
        *(
            save(out, f"paper/{i:02d}_{name}.md", text)
            for i, (name, text) in enumerate(drafts.items(), 1)
        ),
        save(out, "paper/paper.md", "\n\n".join(drafts.values())),
    ]
