"""``run_research``: the research workflow as one turn of a session.

The work dir (artifact files) and the session (the DAG of what was asked and answered)
are two independent kinds of persistence: passing ``session_id`` back continues the
session's history whatever the work dir, and the work dir is plain files either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram.store.session.store import SessionStore


@dataclass
class ResearchResult:
    session_id: str  # pass it back to continue: run_research(..., session_id=...)
    files: list[Path]


def run_research(
    task: str,
    *,
    work_dir: str | Path,
    session_id: str | None = None,
    runtime: Runtime | None = None,
    db: SessionStore | None = None,
) -> ResearchResult:
    """Run ``research_agent`` on ``task`` inside ``session_context`` — which is what makes
    each stage's docstring reach the model from a script or the CLI, as from a notebook."""
    from openprogram.programs.research.stages import research_agent
    from openprogram.store.session.context import session_context

    out = Path(work_dir).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    title = " ".join(task.split())[:60]  # used only when the session is new
    with session_context(
        session_id,
        id_prefix="research",
        source="cli",
        runtime=runtime,
        title=title,
        message=task,
        db=db,
    ) as handle:
        names = research_agent(task, str(out))
    return ResearchResult(handle.session_id, [out / name for name in names])
