"""Waiting for something another thread or process makes true, in one place.

A test waits on the event itself where the code under test offers one (a ``threading.Event``
a reply releases, a marker file a provider writes when its call starts, a kernel's idle
message).  Where the event is only a state another process or thread reaches (a file
appearing, a counter of a loopback server moving), :func:`until` looks at it again and again:
the ``timeout`` only bounds a hang (the answer is the condition, never the time taken),
and the short pause between looks is the only sleep of the suite that is not behaviour
under test (``tests/test_suite_hygiene.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

LOOK_EVERY_S = 0.01


def until(condition: Callable[[], object], timeout: float = 30.0) -> bool:
    """Whether ``condition()`` became true before ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return bool(condition())
        time.sleep(LOOK_EVERY_S)
    return True
