"""A provider's request rate: requests to one provider start at least ``60 / rate`` s apart.

Providers limit requests per minute; a map of 1,000 items or a loop over papers would hit
that limit, get HTTP 429s and spend its retries backing off.  A Runtime with
``requests_per_minute`` set waits its turn before each request instead.  The pacing is per
provider *name* and per process: every Runtime, thread and background run of this process
that talks to ``openai`` shares one schedule (threads of ``openprogram.map`` included).
Worker processes (a process pool, Dask workers) each pace themselves; ``openprogram.map``
hands each of them an equal share of the rate, so the cluster as a whole keeps to it.

The schedule keeps no history: it is the time the next request may start (``nxt``).  A
request reserves the slot at ``max(now, nxt)`` and moves ``nxt`` one interval on, then
sleeps until its slot — so requests waiting in several threads leave in the order they
asked, each an interval after the one before, and a rate lowered later applies from the
next request.  The wait checks every quarter second whether the run was asked to stop.
The time is read from :data:`clock` (the monotonic clock and ``time.sleep``; a test sets
a virtual one to check the spacing without waiting for it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from openprogram.agentic_programming.stopping import check_stop
from openprogram.errors import UserError
from openprogram.settings import current as current_settings


class Clock(NamedTuple):
    """What the pacing reads the time with, and waits with."""

    now: Callable[[], float]
    sleep: Callable[[float], None]


clock = Clock(time.monotonic, time.sleep)  # read at each call: a test may set another
RATE_VARIABLE = "OPENPROGRAM_REQUESTS_PER_MINUTE"
_POLL_S = 0.25
# the slowest rate a user may set: one request an hour (a slower one, e.g. 1e-9, is a typo
# whose next request would wait for years)
MIN_RATE = 1 / 60

_lock = threading.Lock()
_next_start: dict[str, float] = {}  # provider name -> monotonic time the next request may start


def rate_from_env() -> float | None:
    """``OPENPROGRAM_REQUESTS_PER_MINUTE`` as a positive number, or None when unset/0."""
    text = current_settings().requests_per_minute or ""
    if not text:
        return None
    return checked_rate(text, RATE_VARIABLE)


def checked_rate(value: object, what: str = "requests_per_minute") -> float | None:
    """``value`` as requests per minute (None or 0: no limit; else at least :data:`MIN_RATE`);
    a clear error otherwise."""
    if value is None:
        return None
    try:
        rate = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UserError(f"{what} must be a number of requests per minute, not {value!r}") from None
    if rate != rate or rate < 0 or rate == float("inf"):
        raise UserError(f"{what} must be a positive number of requests per minute, not {value!r}")
    if 0 < rate < MIN_RATE:
        raise UserError(
            f"{what} must be at least one request an hour ({MIN_RATE:.4g} per minute), "
            f"not {value!r}"
        )
    return rate or None


def reserve(provider: str, per_minute: float, now: float | None = None) -> float:
    """Reserve the next start for ``provider``; returns the monotonic time it may start."""
    now = clock.now() if now is None else now
    with _lock:
        start = max(now, _next_start.get(provider, now))
        _next_start[provider] = start + 60.0 / per_minute
    return start


def wait_turn(provider: str, per_minute: float | None) -> float:
    """Wait until a request to ``provider`` may start under ``per_minute`` (None: at once);
    returns the seconds waited.  A stop of the run (``RunStopped``) and Ctrl-C end the wait."""
    if not per_minute:
        return 0.0
    asked = clock.now()
    start = reserve(provider, per_minute, asked)
    while (left := start - clock.now()) > 0:
        check_stop()
        clock.sleep(min(left, _POLL_S))
    return start - asked
