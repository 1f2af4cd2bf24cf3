"""Retrying a provider call that failed transiently (``tenacity``).

One setting counts the retries: the Runtime's ``max_retries`` (the official SDKs' own
retries stay off, ``max_retries=0`` in the adapters, so a request is never retried twice
over and every attempt shows in the DAG).  Between attempts the wait is exponential from
``backoff`` seconds (capped at :data:`MAX_BACKOFF_S`) with jitter: half of it fixed, half
drawn at random, so clients that failed together do not come back together.  A server that
said how long to wait (``Retry-After``, carried as
:attr:`~openprogram.errors.TransientProviderError.retry_after`) is waited for at least
that long; one asking for more than :data:`MAX_RETRY_AFTER_S` is not retried at all (the
error says how long it asked).  The wait ends early when the run is stopped or killed.

``tenacity`` is imported at the first call, not with the package.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from openprogram.agentic_programming.stopping import check_stop
from openprogram.errors import TransientProviderError

T = TypeVar("T")

MAX_BACKOFF_S = 30.0  # the exponential wait grows no further
MAX_RETRY_AFTER_S = 60.0  # a server asking for a longer wait is not retried
_STOP_POLL_S = 0.05  # how soon a stop or a kill ends a wait


def wait_seconds(
    error: BaseException | None,
    attempt: int,
    backoff: float,
    rand: Callable[[], float] = random.random,
) -> float:
    """The wait after failed attempt number ``attempt`` (1 first): the server's
    ``Retry-After`` plus up to half the backoff when it gave one, else the backoff
    (``backoff * 2**(attempt-1)``, capped) with its upper half drawn at random."""
    step = min(MAX_BACKOFF_S, backoff * 2 ** (attempt - 1))
    spread = rand() * step / 2
    after = getattr(error, "retry_after", None)
    if after is not None:
        return float(after) + spread
    return step / 2 + spread


def worth_retrying(error: BaseException | None) -> bool:
    """A transient provider error whose server did not ask for a wait too long to make."""
    if not isinstance(error, TransientProviderError):
        return False
    return error.retry_after is None or error.retry_after <= MAX_RETRY_AFTER_S


def pause(seconds: float) -> None:
    """Wait ``seconds``; :class:`~openprogram.errors.RunStopped` or
    :class:`~openprogram.errors.RunKilled` as soon as the run is stopped or killed."""
    deadline = time.monotonic() + seconds
    while True:
        check_stop()
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, _STOP_POLL_S))


def with_retries(
    call: Callable[[], T],
    retries: int,
    backoff: float,
    *,
    on_retry: Callable[[BaseException, float], None],
    sleep: Callable[[float], None] = pause,
    rand: Callable[[], float] = random.random,
) -> T:
    """``call()``, again after a transient error, at most ``retries`` more times.

    ``on_retry(error, wait)`` is told of each failed attempt that is retried, before the
    wait; ``sleep`` waits (tests give their own: no clock is read here).  The last error,
    or any other one, is raised as it was."""
    import tenacity

    def wait(state: Any) -> float:
        return wait_seconds(state.outcome.exception(), state.attempt_number, backoff, rand)

    def told(state: Any) -> None:
        on_retry(state.outcome.exception(), state.upcoming_sleep)

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(max(0, retries) + 1),
        wait=wait,
        retry=tenacity.retry_if_exception(worth_retrying),
        before_sleep=told,
        sleep=sleep,
        reraise=True,
    )
    return retrying(call)
