"""Providers and ``create_runtime()``.

Resolution order (:mod:`openprogram.providers.resolution`, one pure function): call
(``create_runtime``'s arguments) > function > cell > notebook > ``%config`` > environment
(``OPENPROGRAM_PROVIDER`` / ``OPENPROGRAM_MODEL``, else ``OPENAI_API_KEY`` or
``OPENAI_BASE_URL`` → openai; ``ANTHROPIC_API_KEY`` → anthropic) > default, each of provider,
model and base URL taken from the highest layer that names it.  SDK modules are imported
only when their provider is built.  ``OPENPROGRAM_REQUESTS_PER_MINUTE`` paces the requests
of every Runtime built here that does not set ``requests_per_minute`` itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from openprogram.agentic_programming.ratelimit import rate_from_env
from openprogram.agentic_programming.runtime import Runtime
from openprogram.errors import NoProviderConfigured, UserError
from openprogram.providers.anthropic_provider import AnthropicProvider
from openprogram.providers.base import (
    LLMRequest,
    LLMResponse,
    Provider,
    ProviderError,
    ToolCall,
    TransientProviderError,
    Usage,
)
from openprogram.providers.openai_provider import OpenAIProvider
from openprogram.providers.replay import ReplayProvider
from openprogram.providers.resolution import Layer, Resolved, resolve
from openprogram.providers.test import TestProvider
from openprogram.settings import Replay
from openprogram.settings import current as current_settings
from openprogram.usage.budget import budget_from

PROVIDER_NAMES = ("test", "openai", "anthropic", "replay")

__all__ = [
    "PROVIDER_NAMES",
    "LLMRequest",
    "LLMResponse",
    "Provider",
    "ProviderError",
    "ToolCall",
    "TransientProviderError",
    "Usage",
    "create_provider",
    "create_runtime",
    "environment_runtime",
    "resolve_settings",
]


def create_provider(name: str, model: str | None = None, **options: Any) -> Provider:
    """Build the provider called ``name`` (``test``, ``openai``, ``anthropic``, ``replay``)."""
    name = name.strip().lower()
    if name == "test":
        return TestProvider(model=model or "test", **options)
    if name == "openai":
        return OpenAIProvider(model, **options)
    if name == "anthropic":
        return AnthropicProvider(model, **options)
    if name == "replay":
        session = options.pop("session_id", None) or current_settings().replay_session
        if not session:
            raise UserError("the replay provider needs a session id (OPENPROGRAM_REPLAY_SESSION)")
        return ReplayProvider(session, **options)
    raise UserError(f"unknown provider {name!r}; choose one of {', '.join(PROVIDER_NAMES)}")


def resolve_settings(
    provider: str | Provider | None = None,
    model: str | None = None,
    layers: Sequence[Layer] = (),
    environ: Mapping[str, str] | None = None,
) -> Resolved:
    """Provider, model and base URL ``create_runtime`` would use, each with its layer:
    ``provider``/``model`` are the call layer (an instance brings its own model and base
    URL), ``layers`` the others above the environment (``environ``: ``os.environ``)."""
    if isinstance(provider, str) or provider is None:
        call = Layer("call", provider, model)
    else:
        base_url = getattr(provider, "base_url", None)
        call = Layer("call", provider.name, model or provider.model or None, base_url)
    return resolve([call, *layers], os.environ if environ is None else environ)


def _forced_replay(replay: Replay, asked: str | Provider | None, model: str | None) -> Provider:
    """The replay provider the settings force (``openprogram run --replay``); with
    ``misses`` the provider that was asked for (a real one) answers what was not recorded."""
    fallback = None
    if replay.misses and asked not in (None, "replay"):
        fallback = create_provider(asked, model) if isinstance(asked, str) else asked
    return ReplayProvider(replay.session_id, fallback=fallback, live_stale=replay.stale)


def create_runtime(
    provider: str | Provider | None = None,
    model: str | None = None,
    *,
    required: bool = True,
    layers: Sequence[Layer] = (),
    **options: Any,
) -> Runtime:
    """A Runtime for ``provider`` (a name or an instance), else what ``layers`` (the
    notebook's, ``%config``'s) and the environment say (:func:`resolve_settings`).

    With nothing configured: raises :class:`NoProviderConfigured` when ``required``, else
    returns an unconfigured Runtime whose ``exec`` raises that error (the store, the DAG and
    docstrings keep working).
    """
    settings = resolve_settings(provider, model, layers)
    model = settings.model.value if settings.model.layer != "default" else None
    if provider is None or isinstance(provider, str):
        provider = settings.provider.value
    forced = current_settings().replay
    if forced:  # `openprogram run --replay`: every call is answered from the recording
        return Runtime(_forced_replay(forced, provider, model), model="replay", **options)
    if provider is None:
        if required:
            raise NoProviderConfigured()
        return Runtime(None)
    if isinstance(provider, str):
        extra: dict[str, Any] = {}
        if settings.base_url.layer not in ("environment", "default"):
            extra["base_url"] = settings.base_url.value  # the SDK reads its env itself
        instance = create_provider(provider, model, **extra)
    else:
        instance = provider
    if "budget" not in options:
        options["budget"] = budget_from()
    if options.get("requests_per_minute") is None:
        options["requests_per_minute"] = rate_from_env()
    return Runtime(instance, model=model or instance.model, **options)


def environment_runtime() -> Runtime:
    """The Runtime the environment configures (unconfigured when it names no provider):
    what a turn entered without a runtime uses (``openprogram/__init__.py`` wires it)."""
    return create_runtime(required=False)
