"""Building a view of a long session: ~10 small containers per node, and no cycle.

While 100,000 nodes' dicts and lists are made, Python's cyclic collector runs again and
again over every live object and finds nothing to free: a third of the time of
``openprogram sessions show`` / ``%openprogram dag`` of a 20,000-turn session.
:func:`paused_gc` holds it off for the build; it catches up afterwards.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside the block (reference counting still frees)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
