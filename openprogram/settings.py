"""The process's settings as one value: read from the environment in this one place.

Every ``OPENPROGRAM_*`` variable the engine honours is parsed here, once per read, into a
frozen :class:`Settings`.  Code asks :func:`current` for it; an entry point that changes a
setting (``openprogram --home DIR``, ``openprogram run --replay``) does not write
``os.environ`` but passes the changed value down, with :func:`install` for the whole
process (or :func:`using` for one block) and :meth:`Settings.environ` for a child (a
kernel, a spawned runner)::

    settings.install(settings.current().with_changes(home="/data/op"))  # the CLI
    with settings.using(home="/tmp/scratch"):     # one block of one thread
        ...
    start_kernel(env=settings.current().environ(os.environ))  # a child sees the same

API keys are not settings: the official SDKs read their own variables.  Nothing here does
I/O beyond reading the mapping it is given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openprogram.errors import UserError

HOME = "OPENPROGRAM_HOME"
REPLAY = "OPENPROGRAM_REPLAY"  # every call answered from this session's recording
REPLAY_MISSES = "OPENPROGRAM_REPLAY_MISSES"  # a real provider answers what was not recorded
REPLAY_STALE = "OPENPROGRAM_REPLAY_STALE"  # `run --only-stale`: changed prompts go live
REPLAY_SESSION = "OPENPROGRAM_REPLAY_SESSION"  # the session `create_provider("replay")` reads
SESSION = "OPENPROGRAM_SESSION"  # the session bare calls of a script record into
BUDGET_TOKENS = "OPENPROGRAM_BUDGET_TOKENS"
BUDGET_USD = "OPENPROGRAM_BUDGET_USD"
BUDGET_PER = "OPENPROGRAM_BUDGET_PER"
REQUESTS_PER_MINUTE = "OPENPROGRAM_REQUESTS_PER_MINUTE"
MAX_TOKENS = "OPENPROGRAM_MAX_TOKENS"
TRACEBACK = "OPENPROGRAM_TRACEBACK"
MODEL = "OPENPROGRAM_MODEL"  # the model when no layer above the environment names one
ALLOW_MODEL_REQUESTS = "OPENPROGRAM_ALLOW_MODEL_REQUESTS"  # 0: loopback servers only
ARXIV_URL = "OPENPROGRAM_ARXIV_URL"  # the literature tools' arXiv endpoint
SAVED_TIMINGS = "OPENPROGRAM_SAVED_TIMINGS"  # 1: cells save their wall-clock timings
NO_WORKER_TIMEOUT = "OPENPROGRAM_NO_WORKER_TIMEOUT"  # s a map waits for a cluster's worker

_FLAGS_OFF = ("", "0", "false", "no")


@dataclass(frozen=True)
class Replay:
    """``openprogram run --replay``: answer every call from ``session_id``'s recording."""

    session_id: str
    misses: bool = False  # `--record-misses`: the provider asked for answers the rest
    stale: bool = False  # `--only-stale`: calls whose prompt changed go to that provider


@dataclass(frozen=True)
class Settings:
    """What the environment (or an entry point) says; see the module's docstring."""

    home: Path
    replay: Replay | None = None
    replay_session: str | None = None
    session: str | None = None
    budget_tokens: str | None = None  # parsed (with a clear error) by usage.budget
    budget_usd: str | None = None
    budget_per: str | None = None
    requests_per_minute: str | None = None  # checked by agentic_programming.ratelimit
    max_tokens: str | None = None  # checked by the OpenAI provider
    traceback: bool = False
    model: str | None = None
    allow_model_requests: bool = True
    arxiv_url: str | None = None
    saved_timings: bool = False
    no_worker_timeout: str | None = None  # checked by openprogram.scale.workers

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        def text(name: str) -> str | None:
            value = environ.get(name, "").strip()
            return value or None

        home = Path(text(HOME) or "~/.openprogram").expanduser()
        forced = text(REPLAY)
        replay = None
        if forced:
            replay = Replay(
                forced,
                misses=_flag(environ.get(REPLAY_MISSES)),
                stale=_flag(environ.get(REPLAY_STALE)),
            )
        return cls(
            home=home,
            replay=replay,
            replay_session=text(REPLAY_SESSION),
            session=text(SESSION),
            budget_tokens=text(BUDGET_TOKENS),
            budget_usd=text(BUDGET_USD),
            budget_per=text(BUDGET_PER),
            requests_per_minute=text(REQUESTS_PER_MINUTE),
            max_tokens=text(MAX_TOKENS),
            traceback=_flag(environ.get(TRACEBACK)),
            model=text(MODEL),
            allow_model_requests=_flag(environ.get(ALLOW_MODEL_REQUESTS, "1")),
            arxiv_url=text(ARXIV_URL),
            saved_timings=environ.get(SAVED_TIMINGS, "").strip() == "1",
            no_worker_timeout=text(NO_WORKER_TIMEOUT),
        )

    def environ(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (e.g. ``os.environ``) with these settings in it: a child's environment."""
        env = {k: v for k, v in (base or {}).items() if k not in _OWN}
        env[HOME] = str(self.home)
        pairs = {
            REPLAY_SESSION: self.replay_session,
            SESSION: self.session,
            BUDGET_TOKENS: self.budget_tokens,
            BUDGET_USD: self.budget_usd,
            BUDGET_PER: self.budget_per,
            REQUESTS_PER_MINUTE: self.requests_per_minute,
            MAX_TOKENS: self.max_tokens,
            MODEL: self.model,
            ARXIV_URL: self.arxiv_url,
            NO_WORKER_TIMEOUT: self.no_worker_timeout,
        }
        env.update({k: v for k, v in pairs.items() if v is not None})
        if self.traceback:
            env[TRACEBACK] = "1"
        if self.saved_timings:
            env[SAVED_TIMINGS] = "1"
        if not self.allow_model_requests:
            env[ALLOW_MODEL_REQUESTS] = "0"
        if self.replay is not None:
            env[REPLAY] = self.replay.session_id
            if self.replay.misses:
                env[REPLAY_MISSES] = "1"
            if self.replay.stale:
                env[REPLAY_STALE] = "1"
        return env

    def with_changes(self, **changes: Any) -> Settings:
        if "home" in changes:
            changes["home"] = Path(changes["home"]).expanduser().resolve()
        try:
            return dataclasses.replace(self, **changes)
        except TypeError as exc:
            raise UserError(f"unknown setting: {exc}") from None


_OWN = (
    HOME,
    REPLAY,
    REPLAY_MISSES,
    REPLAY_STALE,
    REPLAY_SESSION,
    SESSION,
    BUDGET_TOKENS,
    BUDGET_USD,
    BUDGET_PER,
    REQUESTS_PER_MINUTE,
    MAX_TOKENS,
    TRACEBACK,
    MODEL,
    ALLOW_MODEL_REQUESTS,
    ARXIV_URL,
    SAVED_TIMINGS,
    NO_WORKER_TIMEOUT,
)

_installed: ContextVar[Settings | None] = ContextVar("openprogram_settings", default=None)
_process: Settings | None = None  # what an entry point resolved for the whole process


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() not in _FLAGS_OFF


def current() -> Settings:
    """The settings in force: :func:`using`'s in this context, else what the entry point
    :func:`install`-ed for the process, else the environment's."""
    installed = _installed.get()
    if installed is not None:
        return installed
    return _process if _process is not None else Settings.from_environ(os.environ)


def install(settings: Settings | None) -> None:
    """Make ``settings`` the whole process's (every thread's); None: the environment's again.
    For an entry point (the CLI resolves its options once); code in a library uses
    :func:`using`."""
    global _process
    _process = settings


@contextlib.contextmanager
def using(settings: Settings | None = None, **changes: Any) -> Iterator[Settings]:
    """Run the block with ``settings`` (default: the current ones) changed by ``changes``."""
    chosen = (settings or current()).with_changes(**changes) if changes else settings or current()
    token = _installed.set(chosen)
    try:
        yield chosen
    finally:
        _installed.reset(token)
