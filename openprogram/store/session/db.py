"""``default_db()``: the process's SessionStore under ``$OPENPROGRAM_HOME``."""

from __future__ import annotations

import threading

from openprogram.settings import current as current_settings
from openprogram.store.session.store import SessionStore

_db: SessionStore | None = None
_db_home: str | None = None
_lock = threading.Lock()


def default_db() -> SessionStore:
    """The shared store; rebuilt if ``OPENPROGRAM_HOME`` changed (tests, notebooks)."""
    global _db, _db_home
    home = str(current_settings().home)
    with _lock:
        if _db is None or _db_home != home:
            if _db is not None:
                _db.close()
            _db = SessionStore(home)
            _db_home = home
        return _db
