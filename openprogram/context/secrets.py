"""What counts as a credential, in one place: mapping keys (``api_key``, ``Authorization``,
``x-api-key``…) whose values ``sanitize`` masks, and environment variables (``*_API_KEY``,
``*_TOKEN``…) whose values never reach a node, even inside an error message or traceback."""

from __future__ import annotations

import os
import re
from typing import Final

# a key is secret when one of its ``_``/``-``/``.`` separated words is one of these, or it
# ends with ``api_key`` / ``apikey``; counts such as ``max_tokens`` are not credentials
SECRET_WORDS: Final = frozenset(
    {
        "apikey",
        "authorization",
        "auth",
        "bearer",
        "cookie",
        "credential",
        "credentials",
        "passwd",
        "password",
        "secret",
        "token",
        "access_token",
        "private_key",
    }
)
_SPLIT = re.compile(r"[_\-.\s]+")
_cache: dict[str, bool] = {}


def is_secret_key(key: str) -> bool:
    """Whether a mapping key or variable name looks like it holds a credential (cached)."""
    hit = _cache.get(key)
    if hit is None:
        norm = key.lower()
        words = [w for w in _SPLIT.split(norm) if w]
        joined = "_".join(words)
        hit = (
            any(w in SECRET_WORDS for w in words)
            or joined.endswith(("api_key", "apikey", "private_key", "access_key", "secret_key"))
            or "secret" in norm
            or "password" in norm
        )
        if len(_cache) < 4096:
            _cache[key] = hit
    return hit


def redact_secrets(text: str) -> str:
    """``text`` with the values of credential-like environment variables replaced by ``***``
    (an exception message or traceback may quote a key some code put there)."""
    for name, value in os.environ.items():
        if len(value) >= 8 and value in text and is_secret_key(name):
            text = text.replace(value, "***")
    return text
