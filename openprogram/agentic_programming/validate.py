"""Checking a reply against ``choices`` or a ``response_format`` (pure)."""

from __future__ import annotations

import json
import re
from typing import Any

_DECORATION = "`'\"*_.,!:;()[] \t\n"  # quotes, emphasis and punctuation around a bare word


def pick_choice(reply: str, choices: list[str]) -> str | None:
    """The choice ``reply`` *is*, or None.

    Accepted: the bare choice in any case, with quotes, emphasis or punctuation around it;
    the same on the reply's last non-empty line (a model that reasons first, then answers);
    the JSON a constrained mode returns (``{"choice": "bug"}`` or ``"bug"``).  A reply that
    merely mentions a choice (``"This looks like a feature request to me"``) is not one.
    """
    lowered = {c.lower(): c for c in choices}

    def exact(text: str) -> str | None:
        return lowered.get(text.strip().strip(_DECORATION).strip().lower())

    text = reply.strip()
    if not text:
        return None
    pick = exact(text)
    if pick is None and text[0] in '{"':
        try:
            data = json.loads(text, strict=False)
        except ValueError:
            data = None
        if isinstance(data, dict) and len(data) == 1:
            data = next(iter(data.values()))
        if isinstance(data, str):
            pick = exact(data)
    if pick is None:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) > 1:
            pick = exact(lines[-1])
    return pick


def choice_instruction(choices: list[str]) -> str:
    """What the first request says about the allowed answers."""
    return f"Reply with just the answer, nothing else. Allowed answers: {', '.join(choices)}."


def choice_feedback(reply: str, choices: list[str]) -> str:
    return (
        f"Your answer {reply.strip()[:200]!r} is not one of the allowed choices. "
        f"Reply with exactly one of: {', '.join(choices)}."
    )


def schema_of(response_format: Any) -> dict[str, Any]:
    """A JSON schema from a schema dict or a pydantic model class."""
    if isinstance(response_format, dict):
        return response_format
    to_schema = getattr(response_format, "model_json_schema", None)
    if callable(to_schema):
        schema = to_schema()
        assert isinstance(schema, dict)
        return schema
    raise TypeError("response_format must be a JSON schema dict or a pydantic model class")


def extract_json(reply: str) -> Any:
    """Parse JSON from a reply as real models write it: a fenced ```json block around it,
    raw newlines or tabs inside strings (``strict=False``), prose around one object."""
    text = reply.strip()
    fenced = re.search(r"```(?:json|JSON)?\s*(.*?)```", text, re.S)
    if fenced:
        text = fenced.group(1).strip()
    try:
        return json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        error = exc
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start > 0:  # "Here is the JSON: {...}": the value that starts there
        try:
            return json.JSONDecoder(strict=False).raw_decode(text, start)[0]
        except json.JSONDecodeError:
            pass
    raise error


def parse_structured(reply: str, response_format: Any) -> Any:
    """The reply parsed and validated; raises ValueError saying what is wrong."""
    try:
        data = extract_json(reply)
    except ValueError as exc:
        raise ValueError(f"the reply is not valid JSON ({exc})") from exc
    validate = getattr(response_format, "model_validate", None)
    if callable(validate):
        try:
            return validate(data)
        except Exception as exc:  # pydantic.ValidationError
            raise ValueError(str(exc)) from exc
    import jsonschema

    try:
        jsonschema.validate(data, schema_of(response_format))
    except jsonschema.ValidationError as exc:
        raise ValueError(exc.message) from exc
    return data


def format_feedback(problem: str, schema: dict[str, Any]) -> str:
    return (
        f"Your reply did not match the required JSON format: {problem[:500]}. "
        f"Reply with only a JSON value matching this schema: {json.dumps(schema)}"
    )
