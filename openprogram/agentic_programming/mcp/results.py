"""MCP tool listings and results as the tool loop sees them (pure: plain dicts in and out).

A listed tool becomes the spec providers get with its JSON schema as the server wrote it
(``inputSchema``, passed on as is).  A call's result becomes a Python value: the
``structuredContent`` when the server gives one, else the text of its content blocks (one
string; other blocks are named, not inlined: an image is ``[image image/png]``).  A result
marked ``isError`` is the tool's error, its text the message the model gets back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def spec_of_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """``{"name", "description", "parameters"}`` from a listed tool (``inputSchema`` as is)."""
    schema = tool.get("inputSchema") or tool.get("input_schema") or EMPTY_SCHEMA
    name = str(tool.get("name"))
    description = str(tool.get("description") or tool.get("title") or name)
    return {"name": name, "description": description, "parameters": dict(schema)}


def content_text(content: Any) -> str:
    """The text of a result's content blocks, one per line (non-text blocks named)."""
    parts: list[str] = []
    for block in content or ():
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "resource":
            resource = block.get("resource") or {}
            parts.append(str(resource.get("text") or f"[resource {resource.get('uri', '')}]"))
        else:
            parts.append(f"[{kind} {block.get('mimeType') or block.get('uri') or ''}]".strip())
    return "\n".join(parts)


def value_of(result: Mapping[str, Any]) -> tuple[Any, str | None]:
    """``(value, None)`` for a result, ``(None, message)`` for an error result."""
    text = content_text(result.get("content"))
    if result.get("isError"):
        return None, text or "the tool reported an error and said nothing more"
    structured = result.get("structuredContent")
    if structured is not None:
        return structured, None
    return text, None
