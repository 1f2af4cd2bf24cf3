"""The cases of an evaluation and the scores of one case, pure.

A case is what the user gave: a value passed to the function as it is, or a mapping with
an ``"input"`` (passed to the function), an optional ``"expected"`` and an optional
``"id"``/``"name"``.  Every case has a **key** that stays the same from one evaluation to
the next, so two evaluations pair case by case: the mapping's key when the cases are a
``{key: case}`` dict, else the case's ``id``/``name``, else a short text of its input
(a hash when the text is long).

A scorer returns a number, a bool (1.0 / 0.0), a numeric string (what an LLM judge
replies), or a dict of such values (several named scores at once).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from openprogram.compare.stale import text_hash
from openprogram.context.nodes import sanitize
from openprogram.errors import UserError

KEY_CHARS: Final = 60  # a case's text longer than this is known by a hash
_NAME_FIELDS: Final = ("id", "name", "key")
_TRUE: Final = frozenset({"yes", "true", "pass", "passed", "correct"})
_FALSE: Final = frozenset({"no", "false", "fail", "failed", "incorrect"})


@dataclass(frozen=True)
class Case:
    """One case: its ``key``, what the function is called with (``input``), what a scorer
    may compare with (``expected``) and the case as the user gave it (``raw``: what a
    scorer receives)."""

    key: str
    input: Any
    expected: Any = None
    raw: Any = None


def cases_of(cases: Iterable[Any] | Mapping[Any, Any]) -> list[Case]:
    """The cases in order, each with its key (UserError when two share a key)."""
    if isinstance(cases, Mapping):
        pairs: list[tuple[str | None, Any]] = [(str(k), v) for k, v in cases.items()]
    elif isinstance(cases, str | bytes):
        raise UserError("evaluate: cases is a list (or a dict) of cases, not one string")
    else:
        pairs = [(None, case) for case in cases]
    out: list[Case] = []
    seen: dict[str, int] = {}
    for index, (key, raw) in enumerate(pairs):
        value, expected = raw, None
        if isinstance(raw, Mapping) and "input" in raw:
            value, expected = raw["input"], raw.get("expected")
        case = Case(key if key is not None else key_of(raw, value), value, expected, raw)
        if case.key in seen:
            raise UserError(
                f"evaluate: cases {seen[case.key]} and {index} have the same key "
                f"{case.key!r}; give each an 'id' (or pass a dict of cases)"
            )
        seen[case.key] = index
        out.append(case)
    if not out:
        raise UserError("evaluate: no cases")
    return out


def key_of(raw: Any, value: Any) -> str:
    """A case's key: its ``id``/``name``/``key`` field, else its input's text."""
    if isinstance(raw, Mapping):
        for name in _NAME_FIELDS:
            if isinstance(raw.get(name), str | int) and not isinstance(raw.get(name), bool):
                return str(raw[name])
    text = value if isinstance(value, str) else json.dumps(sanitize(value), sort_keys=True)
    text = " ".join(text.split())
    if len(text) <= KEY_CHARS:
        return text
    return f"{text[: KEY_CHARS - 10]}… {text_hash(text)[:8]}"


def scorer_name(scorer: Callable[..., Any]) -> str:
    name = getattr(scorer, "__agentic_name__", None) or getattr(scorer, "__name__", None)
    return str(name or type(scorer).__name__)


def score_values(name: str, value: Any) -> dict[str, float]:
    """The scores a scorer's return value gives (``{name: number}``, or one per key of a
    dict); ValueError when it is not a score."""
    if isinstance(value, Mapping):
        out: dict[str, float] = {}
        for key, item in value.items():
            out.update(score_values(str(key), item))
        return out
    return {name: score_number(value)}


def score_number(value: Any) -> float:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        text = value.strip().strip(".").lower()
        if text in _TRUE:
            return 1.0
        if text in _FALSE:
            return 0.0
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"not a score: {value[:80]!r}") from None
    else:
        raise ValueError(f"not a score: a {type(value).__name__}")
    if not math.isfinite(number):
        raise ValueError(f"not a score: {number}")
    return number
