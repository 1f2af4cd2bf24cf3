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

import os
import time
from collections.abc import Callable
from pathlib import Path

LOOK_EVERY_S = 0.01


def until(condition: Callable[[], object], timeout: float = 30.0) -> bool:
    """Whether ``condition()`` became true before ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return bool(condition())
        time.sleep(LOOK_EVERY_S)
    return True


def running_in(folder: Path) -> list[int]:
    """The processes running in ``folder`` or below it now (their working directory, read
    from /proc): the store starts git there, and a writer killed leaves its repack running."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in (b"Z", b"X") and (Path(cwd) == folder or folder in Path(cwd).parents):
            found.append(int(entry))
    return found


def open_files(folder: Path | str, *, deleted: bool = False) -> list[str]:
    """The files under ``folder`` this process holds open (``deleted``: only those unlinked
    since, a file kept alive by a descriptor)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # (the listing's own descriptor, closed since)
            continue
        if target.startswith(str(folder)) and (not deleted or target.endswith("(deleted)")):
            found.append(target)
    return found
