"""Offline providers that are public API: ``test`` (deterministic) and ``function``.

``TestProvider`` answers without a network: the first allowed choice when the call has
``choices``, a JSON value built from the schema when it has a ``response_format`` (valid
against it, each string saying what it stands for: ``"[test] <the field's description>"``),
and otherwise ``reply`` (or a short echo of the request).  It is a stand-in that exercises
every path of a program offline, not a model: its content says so.  It records every
request it gets, so a test or a notebook can look at exactly what the model would have seen.

With ``tool_calls=`` it calls tools: on the first ``tool_rounds`` model calls of an exec's
tool loop that offer tools, it replies with those calls (a list of
:class:`~openprogram.providers.base.ToolCall` or ``(name, arguments)`` pairs), or with
``"sample"`` one call of each offered tool (or of the ``tool_choice`` one) whose arguments
are built from its parameter schema; afterwards it answers with the last tool result.
``FunctionProvider``'s callable returns tool calls as an ``LLMResponse(tool_calls=...)``
or a list of ``ToolCall``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from openprogram.providers.base import LLMRequest, LLMResponse, ToolCall, Usage


def sample_from_schema(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """A small value that satisfies ``schema``: the first enum/example, an array of
    ``minItems`` (at least one), numbers at their ``minimum``, and strings that name what
    they stand for (``"[test] <description or title>"``, cut at a ``maxLength``)."""
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
        return (f"[test] {label}" if label else "a")[: schema.get("maxLength")]
    return {"boolean": True, "null": None}.get(kind, "a")


REQUESTS_KEPT = 64  # the newest requests an offline provider keeps (a kernel runs for days)


def _keep(requests: list[LLMRequest], request: LLMRequest, keep: int | None) -> None:
    """Remember ``request``, forgetting the oldest beyond ``keep`` (None: keep them all)."""
    requests.append(request)
    if keep is not None and len(requests) > keep:
        del requests[: len(requests) - keep]


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


class TestProvider:
    """Deterministic offline model.  ``requests`` holds the newest requests received (the
    last :data:`REQUESTS_KEPT`)."""

    __test__ = False  # not a pytest test class
    name = "test"

    def __init__(
        self,
        reply: str | None = None,
        *,
        model: str = "test",
        tool_calls: list[ToolCall | tuple[str, dict[str, Any]]] | str | None = None,
        tool_rounds: int = 1,
        keep: int | None = REQUESTS_KEPT,
    ) -> None:
        self.model = model
        self.keep = keep  # how many of the newest requests ``requests`` holds (None: all)
        self.reply = reply
        if isinstance(tool_calls, str) and tool_calls != "sample":
            raise ValueError(f"tool_calls is a list of calls or 'sample', not {tool_calls!r}")
        self.tool_calls = tool_calls
        self.tool_rounds = tool_rounds
        self.requests: list[LLMRequest] = []

    def _calls(self, request: LLMRequest) -> list[ToolCall]:
        """The tool calls this request gets (none when it offers no tools)."""
        if not request.tools or not self.tool_calls or request.iteration > self.tool_rounds:
            return []
        if request.tool_choice == "none":
            return []
        tag = f"test_{request.iteration}"
        if isinstance(self.tool_calls, str):  # "sample"
            offered = [
                t
                for t in request.tools
                if request.tool_choice in (None, "auto", "required")
                or t["name"] == request.tool_choice
            ]
            return [
                ToolCall(f"{tag}_{i}", t["name"], sample_from_schema(t.get("parameters") or {}))
                for i, t in enumerate(offered)
            ]
        out = []
        for i, call in enumerate(self.tool_calls):
            if isinstance(call, ToolCall):
                out.append(call)
            else:
                name, arguments = call
                out.append(ToolCall(f"{tag}_{i}", name, dict(arguments)))
        return out

    @property
    def last_request(self) -> LLMRequest | None:
        return self.requests[-1] if self.requests else None

    def complete(
        self, request: LLMRequest, on_delta: Callable[[str], None] | None = None
    ) -> LLMResponse:
        _keep(self.requests, request, self.keep)
        calls = self._calls(request)
        if calls:
            prompt = sum(_tokens(str(m.get("content", ""))) for m in request.messages)
            return LLMResponse(
                text="",
                tool_calls=calls,
                usage=Usage(prompt, len(calls)),
                model=self.model,
                finish_reason="tool_calls",
            )
        choices = request.extra.get("choices")
        if choices:
            text = str(choices[0])
        elif request.response_format is not None:
            text = json.dumps(sample_from_schema(request.response_format))
        elif self.reply is not None:
            text = self.reply
        elif request.iteration > 1 and (done := _tool_results(request)):
            text = f"[test reply] {done[-1][:200]}"
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


def _tool_results(request: LLMRequest) -> list[str]:
    """The tool results the request shows (the frame's earlier steps), first lines."""
    return [
        str(m.get("content", "")).splitlines()[0]
        for m in request.messages
        if m.get("role") == "user" and str(m.get("content", "")).startswith("Earlier step: ")
    ]


Replier = Callable[[LLMRequest], "str | LLMResponse | list[ToolCall]"]


class FunctionProvider:
    """A provider whose replies are decided by a Python callable ``fn(request)``: a text,
    an :class:`LLMResponse` (which may carry ``tool_calls``), or a list of ``ToolCall``."""

    name = "function"

    def __init__(
        self, fn: Replier, *, model: str = "function", keep: int | None = REQUESTS_KEPT
    ) -> None:
        self.fn = fn
        self.model = model
        self.keep = keep  # how many of the newest requests ``requests`` holds (None: all)
        self.requests: list[LLMRequest] = []

    def complete(
        self, request: LLMRequest, on_delta: Callable[[str], None] | None = None
    ) -> LLMResponse:
        _keep(self.requests, request, self.keep)
        out = self.fn(request)
        if isinstance(out, list) and all(isinstance(c, ToolCall) for c in out):
            out = LLMResponse("", tool_calls=out, finish_reason="tool_calls")
        response = out if isinstance(out, LLMResponse) else LLMResponse(text=str(out))
        if on_delta is not None and response.text:
            on_delta(response.text)
        response.model = response.model or self.model
        return response
