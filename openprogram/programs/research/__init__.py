"""The research workflow: survey → ideas → paper, one stage function per step."""

from openprogram.programs.research.harness import ResearchResult, run_research
from openprogram.programs.research.stages import (
    SECTIONS,
    design_experiments,
    research_agent,
    survey_topic,
    write_section,
)

__all__ = [
    "SECTIONS",
    "ResearchResult",
    "design_experiments",
    "research_agent",
    "run_research",
    "survey_topic",
    "write_section",
]
