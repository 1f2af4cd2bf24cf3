"""``default_db()`` — re-exported from :mod:`openprogram.store.session.db` (the seed's path)."""

from openprogram.store.session.db import default_db

__all__ = ["default_db"]
