"""Session ids: minting new ones and validating ids that come from notebooks and users.

An id reaches the filesystem as a folder name, and ids arrive from notebooks other people
wrote, so only a short safe charset is accepted: letters, digits, ``_`` and ``-``, starting
with a letter or digit, at most 64 characters.  No separators, no dots, nothing hidden.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from openprogram.errors import InvalidSessionId

MAX_ID_LENGTH = 64
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def validate_session_id(value: Any) -> str:
    """Return ``value`` if it is a safe session id, else raise :class:`InvalidSessionId`."""
    if not isinstance(value, str):
        raise InvalidSessionId(
            f"a session id must be a string, got {type(value).__name__}; "
            "start a fresh session with `%openprogram new` or session_context()"
        )
    if _ID_RE.fullmatch(value) is None:
        shown = value if len(value) <= 40 else value[:40] + f"… ({len(value)} chars)"
        raise InvalidSessionId(
            f"invalid session id {shown!r}: use 1-{MAX_ID_LENGTH} letters, digits, '_' or '-' "
            "(no '/', '.', spaces); start a fresh session with `%openprogram new` or "
            "session_context()"
        )
    return value


def mint_session_id(prefix: str = "session") -> str:
    """A new id like ``session_3f9c2a71d0``."""
    prefix = re.sub(r"[^A-Za-z0-9_-]", "", prefix)[:40] or "session"
    return validate_session_id(f"{prefix}_{secrets.token_hex(5)}")
