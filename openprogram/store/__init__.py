"""Per-turn state and the git-backed session store."""

from openprogram.store.vars import _current_turn_id, _store, get_store, get_turn_id

__all__ = ["_current_turn_id", "_store", "get_store", "get_turn_id"]
