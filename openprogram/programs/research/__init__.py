"""The research workflow: survey → gaps → ideas → design → paper → review.

Each stage is an ``@agentic_function`` (``stages.py``) whose docstring is its instruction;
the notebook (``notebooks/research.ipynb``), the CLI (``openprogram research``) and a
background run call the same functions and keep their results in one work folder.
"""

from openprogram.errors import LiteratureError
from openprogram.programs.research.artifacts import ResearchWork
from openprogram.programs.research.harness import (
    PIPELINE,
    ResearchResult,
    research_agent,
    run_research,
    run_stage,
)
from openprogram.programs.research.literature import (
    fetch_page,
    read_pdf,
    search_arxiv,
)
from openprogram.programs.research.stages import (
    SECTIONS,
    design_experiment,
    find_gaps,
    propose_ideas,
    review_paper,
    survey_topic,
    write_paper,
    write_section,
)

__all__ = [
    "PIPELINE",
    "SECTIONS",
    "LiteratureError",
    "ResearchResult",
    "ResearchWork",
    "design_experiment",
    "fetch_page",
    "find_gaps",
    "propose_ideas",
    "read_pdf",
    "research_agent",
    "review_paper",
    "run_research",
    "run_stage",
    "search_arxiv",
    "survey_topic",
    "write_paper",
    "write_section",
]
