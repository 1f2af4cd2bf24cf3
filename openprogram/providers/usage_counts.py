"""Token counts from a model server's own tokenizer, for replies that came without usage.

llama-cpp-python's server answers ``POST /extras/tokenize/count`` (``{"input": text}`` ->
``{"count": n}``); llama.cpp's own server answers ``POST /tokenize`` (``{"content": text}``
-> ``{"tokens": [...]}``).  Both live at the server's root, beside ``/v1``.  A server with
neither gives ``None`` and the caller estimates instead.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

TIMEOUT = 5.0


def server_root(base_url: str) -> str:
    """``http://host:port`` of an OpenAI-compatible base URL (``.../v1`` dropped)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _post(url: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
    data = json.dumps(body).encode("utf-8")
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json", **headers}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT) as reply:
        return json.loads(reply.read().decode("utf-8"))


def _count(root: str, text: str, headers: dict[str, str]) -> int | None:
    try:
        found = _post(f"{root}/extras/tokenize/count", {"input": text}, headers)
        if isinstance(found, dict) and isinstance(found.get("count"), int):
            return int(found["count"])
    except (OSError, ValueError, urllib.error.URLError):
        pass
    try:
        found = _post(f"{root}/tokenize", {"content": text}, headers)
        if isinstance(found, dict) and isinstance(found.get("tokens"), list):
            return len(found["tokens"])
    except (OSError, ValueError, urllib.error.URLError):
        pass
    return None


def server_counts(
    base_url: str, texts: list[str], headers: dict[str, str] | None = None
) -> list[int] | None:
    """The token count of each of ``texts`` by the server's tokenizer, or None."""
    root = server_root(base_url)
    counts: list[int] = []
    for text in texts:
        if not text:
            counts.append(0)
            continue
        counted = _count(root, text, headers or {})
        if counted is None:
            return None
        counts.append(counted)
    return counts
