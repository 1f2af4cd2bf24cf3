"""A process-wide switch that blocks requests to real model endpoints.

Tests turn it off (``allow_model_requests(False)``); a provider pointed at a loopback
server (a local wire-level test server, Ollama on localhost) is still allowed, because
nothing leaves the machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse

from openprogram.errors import ModelRequestsBlocked
from openprogram.settings import current as current_settings

_allowed = current_settings().allow_model_requests  # the process's switch, read at import

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def model_requests_allowed() -> bool:
    return _allowed


@contextmanager
def allow_model_requests(allowed: bool) -> Iterator[None]:
    global _allowed
    before, _allowed = _allowed, allowed
    try:
        yield
    finally:
        _allowed = before


def set_model_requests_allowed(allowed: bool) -> None:
    global _allowed
    _allowed = allowed


def check_model_request(base_url: str | None, provider: str) -> None:
    """Raise :class:`ModelRequestsBlocked` unless requests are allowed or the URL is loopback."""
    if _allowed:
        return
    host = (urlparse(base_url).hostname or "") if base_url else ""
    if host in LOOPBACK_HOSTS:
        return
    raise ModelRequestsBlocked(
        f"real {provider} requests are blocked in this process (tests?); use the `test` or "
        "`function` provider, or a loopback base URL"
    )
