"""``default_db()`` — re-exported from :mod:`openprogram.store.session.store` (the seed's path)."""

from openprogram.store.session.store import default_db

__all__ = ["default_db"]
