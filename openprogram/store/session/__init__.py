"""The git-backed session store and ``session_context``."""

from openprogram.store.session.context import SessionHandle, SessionNodeWriter, session_context
from openprogram.store.session.files import mint_session_id, validate_session_id
from openprogram.store.session.store import Session, SessionStore

__all__ = [
    "Session",
    "SessionHandle",
    "SessionNodeWriter",
    "SessionStore",
    "mint_session_id",
    "session_context",
    "validate_session_id",
]
