"""Whether a map's cluster still has a worker, and for how long it has had none.

A Dask scheduler keeps a task that no worker can run queued until one arrives — by default
forever — so a map on a cluster whose workers all died (killed, out of memory, the machine
gone) would wait on its results until Ctrl-C.  :class:`Workers` follows the cluster's
workers from the scheduler's ``add-worker`` / ``remove-worker`` events (no round trip:
the map asks it at every turn of its loop) and says, once the cluster has had no worker
for the :func:`no_worker_timeout` (the setting ``OPENPROGRAM_NO_WORKER_TIMEOUT``, seconds,
:data:`DEFAULT_NO_WORKER_S` when unset, 0: wait forever), why the map gives up — in one
line.  An adaptive cluster that starts workers on demand needs the setting above the time
its workers take to start.

The time is read from :data:`clock` at each call (the monotonic clock; a test sets a
virtual one and moves it past the limit instead of waiting).  Nothing here does I/O.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from openprogram.errors import UserError
from openprogram.settings import NO_WORKER_TIMEOUT
from openprogram.settings import current as current_settings

clock: Callable[[], float] = time.monotonic  # read at each call: a test may set another
DEFAULT_NO_WORKER_S = 120.0


def no_worker_timeout() -> float | None:
    """Seconds a map waits while its cluster has no worker (None: forever)."""
    text = current_settings().no_worker_timeout
    if text is None:
        return DEFAULT_NO_WORKER_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise UserError(
            f"{NO_WORKER_TIMEOUT} must be a number of seconds (0: wait forever), not {text!r}"
        )
    return seconds or None


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 600 else f"{s / 60:.0f} min"


class Workers:
    """The workers a cluster has now (from its events), and since when it has none."""

    def __init__(self, cluster: str, addresses: Iterable[str]) -> None:
        self.cluster = cluster
        self._mu = threading.Lock()
        self._present = set(addresses)
        self._empty_since: float | None = None if self._present else clock()
        self._last: tuple[str, int] | None = None  # the last worker to go, its items then

    def added(self, address: str) -> None:
        with self._mu:
            self._present.add(address)
            self._empty_since = None

    def removed(self, address: str, running: int) -> None:
        """``address`` left the cluster holding ``running`` items of this map (running, or
        their results)."""
        with self._mu:
            self._present.discard(address)
            self._last = (address, running)
            if not self._present and self._empty_since is None:
                self._empty_since = clock()

    @property
    def none_left(self) -> bool:
        with self._mu:
            return self._empty_since is not None

    def gone_for(self, limit: float | None) -> tuple[float, str] | None:
        """``(seconds, why)`` once the cluster has had no worker for ``limit`` seconds."""
        with self._mu:
            since, last = self._empty_since, self._last
        if since is None or limit is None:
            return None
        waited = clock() - since
        if waited < limit:
            return None
        if last is None:
            how = "it had none when the map started"
        else:
            address, running = last
            how = f"the last one, {address}, left holding {running} items of this map"
        why = f"the Dask cluster at {self.cluster} has had no worker for {_seconds(waited)} ({how})"
        return waited, why
