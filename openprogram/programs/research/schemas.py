"""The JSON schemas each research stage's reply must satisfy (pure data).

Every string field has a ``description``: a real model reads it as part of the format, and
the offline ``test`` provider fills the field with it (``"[test] <description>"``), so an
offline run produces artifacts with the right shape that say plainly what they are.
"""

from __future__ import annotations

import copy
from typing import Any

BRIEF_ITEMS = 2  # a list in a brief reply: at most this many items (or its minimum, if more)
BRIEF_CHARS = 100  # a string in a brief reply: at most this many characters


def text(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def items(schema: dict[str, Any], lo: int, hi: int) -> dict[str, Any]:
    return {"type": "array", "items": schema, "minItems": lo, "maxItems": hi}


def obj(**properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


WORK = obj(
    authors=text("Authors, e.g. 'Vaswani et al.'"),
    year=text("Year of publication, or '(to verify)'"),
    title=text("Title of the work"),
    contribution=text("The work's contribution in one sentence"),
    relevance=text("How the work bears on the task, in one sentence"),
)

SURVEY = obj(
    scope=text("The question the task asks, in your own words, and what is in and out of scope"),
    works=items(WORK, 2, 10),
    settled=items(text("A finding the field agrees on"), 1, 5),
    open_problems=items(text("A problem the field has not solved"), 1, 5),
)

GAP = obj(
    name=text("A short name for the gap"),
    why_open=text("Why the surveyed works leave it open"),
    evidence=text("Which surveyed works show it, cited as (Author, year)"),
)
GAPS = obj(gaps=items(GAP, 1, 5))

IDEA = obj(
    name=text("A short name for the idea"),
    hypothesis=text("One falsifiable sentence"),
    method=text("What is built or changed, in 2-4 sentences"),
    gap=text("The name of the gap it addresses"),
)
IDEAS = obj(
    ideas=items(IDEA, 1, 3),
    choice=text("The name of the idea to pursue first"),
    why=text("Why that idea first, in 2-3 sentences"),
)

DESIGN = obj(
    hypothesis=text("The chosen idea's hypothesis, falsifiable"),
    setup=text("Datasets or environments and how they are used"),
    baselines=items(text("A baseline, including the strongest from the survey"), 1, 5),
    metrics=items(text("A metric and what it measures"), 1, 5),
    ablations=items(text("An ablation and what it isolates"), 1, 5),
    confirms=text("The result that would confirm the hypothesis"),
    refutes=text("The result that would refute it"),
    risks=text("What could fail, and a rough compute/time budget"),
)

SECTION = obj(
    heading=text("The section's heading"),
    paragraphs=items(text("One paragraph of plain academic prose"), 1, 8),
)

REVIEW = obj(
    summary=text("What the paper claims and how it would show it, in 2-3 sentences"),
    strengths=items(text("A strength"), 1, 5),
    weaknesses=items(text("A weakness, concrete enough to act on"), 1, 5),
    questions=items(text("A question for the authors"), 1, 5),
    # the ten values rather than a minimum and a maximum: a grammar-constrained server (llama.cpp)
    # enforces an enum, not an integer's bounds (SmolLM2 wrote 59, then 0)
    score={"type": "integer", "enum": list(range(1, 11)), "description": "Overall, 1-10"},
    decision={"type": "string", "enum": ["revise", "accept"], "description": "The verdict"},
)


def brief(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` for a small model: every list at most ``BRIEF_ITEMS`` long (never below its
    ``minItems``), every free string at most ``BRIEF_CHARS`` characters.  A server that
    constrains JSON to the schema (llama.cpp's grammars read ``maxItems``/``maxLength``)
    then cannot write a reply longer than a small ``max_tokens``: the whole reply fits
    where an unbounded one is cut mid-string and fails.  A reply valid here is valid
    against ``schema``."""
    out = copy.deepcopy(schema)
    pending = [out]
    while pending:
        node = pending.pop()
        if node.get("type") == "array":
            node["maxItems"] = max(
                node.get("minItems", 0), min(node.get("maxItems", BRIEF_ITEMS), BRIEF_ITEMS)
            )
        elif node.get("type") == "string" and "enum" not in node:
            node["maxLength"] = min(node.get("maxLength", BRIEF_CHARS), BRIEF_CHARS)
        pending.extend(v for v in node.get("properties", {}).values())
        if isinstance(node.get("items"), dict):
            pending.append(node["items"])
    return out
