"""Checking a model's reply against ``choices`` or a ``response_format``
(``agentic_programming/validate.py``): replies as real models write them are accepted, and
what is refused is said back to the model in words it can act on."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from openprogram.agentic_programming.validate import (
    choice_feedback,
    extract_json,
    parse_structured,
    pick_choice,
)

CHOICES = ["bug", "feature", "question"]


@pytest.mark.parametrize(
    ("reply", "picked"),
    [
        ("bug", "bug"),
        ("  **Bug.**  ", "bug"),
        ("`feature`", "feature"),
        ('{"choice": "question"}', "question"),
        ('"bug"', "bug"),
        ("The crash happens on save, so:\n\nbug\n", "bug"),
        ("This looks like a feature request to me", None),
        ("", None),
        ("bugs", None),
    ],
)
def test_a_reply_is_a_choice_only_when_it_is_the_choice(reply: str, picked: str | None) -> None:
    assert pick_choice(reply, CHOICES) == picked


def test_a_refused_choice_is_quoted_back_with_the_allowed_ones() -> None:
    said = choice_feedback("maybe a bug?", CHOICES)
    assert "'maybe a bug?'" in said and "bug, feature, question" in said


@pytest.mark.parametrize(
    "reply",
    [
        '{"n": 1}',
        'Here it is:\n```json\n{"n": 1}\n```\nanything else?',
        'Sure! The JSON: {"n": 1} — hope that helps',
    ],
)
def test_json_is_read_out_of_fences_and_prose(reply: str) -> None:
    assert extract_json(reply) == {"n": 1}


class Ticket(BaseModel):
    title: str
    priority: int


def test_a_structured_reply_is_validated_by_a_pydantic_model_or_a_schema() -> None:
    parsed = parse_structured('{"title": "crash", "priority": "2"}', Ticket)
    assert parsed == Ticket(title="crash", priority=2)
    schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    assert parse_structured('{"n": 3}', schema) == {"n": 3}
    with pytest.raises(ValueError, match="'n' is a required property"):
        parse_structured("{}", schema)
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_structured("no json here", schema)
    with pytest.raises(ValueError, match="priority"):
        parse_structured('{"title": "crash", "priority": "high"}', Ticket)
