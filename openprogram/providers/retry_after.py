"""How long a server asked a client to wait before it tries again.

Pure: no I/O.  ``retry-after-ms`` (OpenAI's, milliseconds) is read first, then the standard
``Retry-After``: a number of seconds or an HTTP date (RFC 9110 §10.2.3), measured from
``now``.  Whatever cannot be read says nothing (``None``): the caller's own backoff
applies.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any


def retry_after(headers: Mapping[str, Any] | None, now: float | None = None) -> float | None:
    """Seconds to wait that ``headers`` ask for (0 or more), or None when they ask nothing
    readable.  ``now``: the current time (``time.time()``), for an HTTP date."""
    if not headers:
        return None
    found = _header(headers, "retry-after-ms")
    millis = _number(found)
    if millis is not None:
        return millis / 1000
    found = _header(headers, "retry-after")
    if found is None:
        return None
    seconds = _number(found)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(found)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is always GMT
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _header(headers: Mapping[str, Any], name: str) -> str | None:
    """``name``'s value, whatever the case the server or the client wrote it in."""
    value = headers.get(name)
    if value is None:
        for key, item in headers.items():
            if isinstance(key, str) and key.lower() == name:
                value = item
                break
    return value.strip() if isinstance(value, str) else None


def _number(text: str | None) -> float | None:
    """A finite number of 0 or more written in ``text``; None otherwise."""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None
