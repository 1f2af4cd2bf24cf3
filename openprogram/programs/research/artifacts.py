"""The work folder of a research run: each stage's result as JSON and as Markdown.

``<stage>.json`` is what the stage returned (what later stages read, and what a resumed
run finds); ``<stage>.md`` is the same for people.  The renderers are pure functions of
the JSON.  A stage's files are written only after it finished, so "the JSON exists" means
"the stage is done".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openprogram.errors import UserError

Doc = dict[str, Any]


def _bullets(values: list[Any]) -> str:
    return "\n".join(f"- {v}" for v in values)


def survey_md(s: Doc) -> str:
    works = "\n".join(
        f"- **{w['authors']} ({w['year']}). {w['title']}.** — {w['contribution']} {w['relevance']}"
        for w in s["works"]
    )
    return (
        f"# Literature review\n\n## Scope\n\n{s['scope']}\n\n## Key works\n\n{works}\n\n"
        f"## What is settled\n\n{_bullets(s['settled'])}\n\n"
        f"## Open problems\n\n{_bullets(s['open_problems'])}"
    )


def gaps_md(g: Doc) -> str:
    parts = [
        f"## {i}. {gap['name']}\n\n{gap['why_open']}\n\n*Evidence:* {gap['evidence']}"
        for i, gap in enumerate(g["gaps"], 1)
    ]
    return "# Research gaps\n\n" + "\n\n".join(parts)


def ideas_md(d: Doc) -> str:
    parts = [
        f"## Idea {i}: {idea['name']}\n\n- **Hypothesis** — {idea['hypothesis']}\n"
        f"- **Method** — {idea['method']}\n- **Addresses** — {idea['gap']}"
        for i, idea in enumerate(d["ideas"], 1)
    ]
    return "# Ideas\n\n" + "\n\n".join(parts) + f"\n\n## Choice: {d['choice']}\n\n{d['why']}"


def design_md(d: Doc) -> str:
    return (
        f"# Experiment design\n\n**Hypothesis.** {d['hypothesis']}\n\n"
        f"**Setup.** {d['setup']}\n\n## Baselines\n\n{_bullets(d['baselines'])}\n\n"
        f"## Metrics\n\n{_bullets(d['metrics'])}\n\n## Ablations\n\n{_bullets(d['ablations'])}"
        f"\n\n**Confirms:** {d['confirms']}\n\n**Refutes:** {d['refutes']}\n\n"
        f"**Risks and cost:** {d['risks']}"
    )


def paper_md(p: Doc) -> str:
    sections = [f"## {s['heading']}\n\n" + "\n\n".join(s["paragraphs"]) for s in p["sections"]]
    return f"# {p['title']}\n\n" + "\n\n".join(sections)


def review_md(r: Doc) -> str:
    return (
        f"# Review\n\n{r['summary']}\n\n## Strengths\n\n{_bullets(r['strengths'])}\n\n"
        f"## Weaknesses\n\n{_bullets(r['weaknesses'])}\n\n"
        f"## Questions\n\n{_bullets(r['questions'])}\n\n"
        f"**Score:** {r['score']}/10 — **{r['decision']}**"
    )


def papers_md(d: Doc) -> str:
    rows = [
        f"- **{', '.join(p['authors'][:3])}{' et al.' if len(p['authors']) > 3 else ''}"
        f" ({p['year']}). {p['title']}.** arXiv:{p['id']}"
        for p in d["papers"]
    ]
    return f"# Papers found for: {d['query']}\n\n" + ("\n".join(rows) or "(none)")


RENDERERS: dict[str, Callable[[Doc], str]] = {
    "papers": papers_md,
    "survey": survey_md,
    "gaps": gaps_md,
    "ideas": ideas_md,
    "design": design_md,
    "paper": paper_md,
    "review": review_md,
}


class ResearchWork:
    """A research run's folder: ``save(stage, doc)``, ``load(stage)``, ``done(stage)``."""

    def __init__(self, folder: str | Path, task: str | None = None, *, redo: bool = False) -> None:
        """``task``: the folder's task (written to ``task.txt``); None continues the one
        there.  A different task for a folder holding stages done for the old one is
        refused (they would pass for this task's) unless ``redo``: every stage runs again."""
        self.folder = Path(folder).expanduser().resolve()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file there, a read-only or pseudo file system (/proc)
            why = "a file, not a folder" if self.folder.is_file() else exc.strerror or exc
            raise UserError(f"cannot use {self.folder} as the work folder: {why}") from None
        task_file = self.folder / "task.txt"
        if task is not None:
            old = task_file.read_text(encoding="utf-8").strip() if task_file.is_file() else ""
            done = [s for s in RENDERERS if self.done(s)]
            changed = task_file.is_file() and old != task.strip()
            if changed and done and not redo:
                raise UserError(
                    f"{self.folder} holds {', '.join(done)} done for another task "
                    f"({' '.join(old.split())[:60]!r}): continue it without a task, redo every "
                    "stage for this one (`--restart`; in Python `ResearchWork(..., redo=True)`), "
                    "or use another folder"
                )
            if changed:  # the papers found for the old task are not this one's: the
                for name in ("papers.json", "papers.md"):  # survey would read them
                    (self.folder / name).unlink(missing_ok=True)
            task_file.write_text(task.strip() + "\n", encoding="utf-8")
        elif not task_file.exists():
            raise FileNotFoundError(f"{task_file} does not exist: pass task= to start a run")
        self.task = task_file.read_text(encoding="utf-8").strip()

    def __repr__(self) -> str:
        return f"ResearchWork({str(self.folder)!r})"

    def done(self, stage: str) -> bool:
        return (self.folder / f"{stage}.json").is_file()

    def load(self, stage: str) -> Doc:
        data = json.loads((self.folder / f"{stage}.json").read_text(encoding="utf-8"))
        assert isinstance(data, dict)
        return data

    def save(self, stage: str, doc: Doc) -> list[Path]:
        """Write ``<stage>.md`` then ``<stage>.json`` (the JSON last: it marks it done)."""
        md = self.folder / f"{stage}.md"
        md.write_text(RENDERERS[stage](doc).rstrip() + "\n", encoding="utf-8")
        out = self.folder / f"{stage}.json"
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(out)
        return [md, out]

    def files(self) -> list[Path]:
        return sorted(p for p in self.folder.iterdir() if p.is_file())
