"""Offline providers that are public API: ``test`` (deterministic) and ``function``.

``TestProvider`` answers without a network: the first allowed choice when the call has
``choices``, a JSON value built from the schema when it has a ``response_format`` (valid
against it, each string saying what it stands for: ``"[test] <the field's description>"``),
and otherwise ``reply`` (or a short echo of the request).  It is a stand-in that exercises
every path of a program offline, not a model: its content says so.  It records every
request it gets, so a test or a notebook can look at exactly what the model would have seen.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from openprogram.providers.base import LLMRequest, LLMResponse, Usage


def sample_from_schema(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """A small value that satisfies ``schema``: the first enum/example, an array of
    ``minItems`` (at least one), numbers at their ``minimum``, and strings that name what
    they stand for (``"[test] <description or title>"``)."""
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        return sample_from_schema(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), defs)
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    if schema.get("examples"):
        return schema["examples"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return sample_from_schema(schema[key][0], defs)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: sample_from_schema(sub, defs) for name, sub in props.items()}
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1)))
        return [sample_from_schema(schema.get("items", {}), defs) for _ in range(count)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", 0)
        return int(low) if kind == "integer" else float(low)
    if kind == "string":
        label = schema.get("description") or schema.get("title")
        return f"[test] {label}" if label else "a"
    return {"boolean": True, "null": None}.get(kind, "a")


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


class TestProvider:
    """Deterministic offline model.  ``requests`` holds every request received."""

    __test__ = False  # not a pytest test class
    name = "test"

    def __init__(self, reply: str | None = None, *, model: str = "test") -> None:
        self.model = model
        self.reply = reply
        self.requests: list[LLMRequest] = []

    @property
    def last_request(self) -> LLMRequest | None:
        return self.requests[-1] if self.requests else None

    def complete(
        self, request: LLMRequest, on_delta: Callable[[str], None] | None = None
    ) -> LLMResponse:
        self.requests.append(request)
        choices = request.extra.get("choices")
        if choices:
            text = str(choices[0])
        elif request.response_format is not None:
            text = json.dumps(sample_from_schema(request.response_format))
        elif self.reply is not None:
            text = self.reply
        else:
            last = str(request.messages[-1].get("content", "")) if request.messages else ""
            text = f"[test reply] {last.strip().splitlines()[0][:80] if last.strip() else ''}"
        finish = "stop"
        if request.max_tokens is not None and _tokens(text) > request.max_tokens:
            text, finish = " ".join(text.split()[: request.max_tokens]), "length"
        if on_delta is not None:
            for word in text.split(" "):
                on_delta(word + " ")
        prompt = sum(_tokens(str(m.get("content", ""))) for m in request.messages)
        return LLMResponse(
            text=text,
            usage=Usage(prompt, _tokens(text)),
            model=self.model,
            finish_reason=finish,
        )


Replier = Callable[[LLMRequest], "str | LLMResponse"]


class FunctionProvider:
    """A provider whose replies are decided by a Python callable ``fn(request)``."""

    name = "function"

    def __init__(self, fn: Replier, *, model: str = "function") -> None:
        self.fn = fn
        self.model = model
        self.requests: list[LLMRequest] = []

    def complete(
        self, request: LLMRequest, on_delta: Callable[[str], None] | None = None
    ) -> LLMResponse:
        self.requests.append(request)
        out = self.fn(request)
        response = out if isinstance(out, LLMResponse) else LLMResponse(text=str(out))
        if on_delta is not None and response.text:
            on_delta(response.text)
        response.model = response.model or self.model
        return response
