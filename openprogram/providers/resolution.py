"""Which provider, model and base URL a runtime uses: one order, as a pure function.

The order, highest first::

    call > function > cell > notebook > %config > environment > default

- ``call``: what the code passes itself (``create_runtime("openai", model=...)``);
  ``runtime.exec(model=...)`` is not in the API, so this slot holds only those arguments.
- ``function``: ``@agentic_function(model=...)`` is not in the API; the slot is kept.
- ``cell``: a ``%%openprogram`` cell option; not in the API; the slot is kept.
- ``notebook``: ``%openprogram provider NAME [--model M]`` and the notebook's metadata.
- ``config``: ``%config OpenProgramMagics.provider`` / ``.model``.
- ``environment``: ``OPENPROGRAM_PROVIDER`` (else ``openai`` when ``OPENAI_API_KEY`` or
  ``OPENAI_BASE_URL`` is set, else ``anthropic`` for ``ANTHROPIC_API_KEY``),
  ``OPENPROGRAM_MODEL``, and the chosen provider's ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``.
- ``default``: the provider's own default model and its vendor's endpoint.

Each setting is taken from the highest layer that names it, independently: a provider chosen
in the notebook keeps the model ``OPENPROGRAM_MODEL`` names (and :attr:`Resolved.notes` says
so).  Nothing here reads the process environment or does I/O: the caller passes the
environment as a mapping; API keys are only tested for presence, never kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LAYERS = ("call", "function", "cell", "notebook", "config", "environment", "default")
LAYER_TEXT = {
    "call": "call",
    "function": "function",
    "cell": "cell",
    "notebook": "this notebook",
    "config": "%config",
    "environment": "environment",
    "default": "default",
}
DEFAULT_MODELS = {
    "test": "test",
    "openai": "gpt-4o-mini",
    "anthropic": "claude-sonnet-4-6",
    "replay": "replay",
}
DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}
BASE_URL_ENVS = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}


@dataclass(frozen=True)
class Layer:
    """What one layer names (None: nothing, the next layer down decides)."""

    name: str  # one of LAYERS
    provider: str | None = None
    model: str | None = None
    base_url: str | None = None

    def __post_init__(self) -> None:
        if self.name not in LAYERS:
            raise ValueError(f"unknown layer {self.name!r}; one of {', '.join(LAYERS)}")


@dataclass(frozen=True)
class Setting:
    """One resolved value and where it came from."""

    value: str | None
    layer: str  # one of LAYERS ("default" also for "none")
    origin: str = ""  # e.g. "OPENPROGRAM_MODEL"

    @property
    def source(self) -> str:
        """``environment OPENPROGRAM_MODEL``, ``this notebook``, ``default``."""
        text = LAYER_TEXT[self.layer]
        return f"{text} {self.origin}" if self.origin else text

    def line(self, label: str) -> str:
        """``model: smollm2 (environment OPENPROGRAM_MODEL)``; a URL without its password."""
        from openprogram.context.secrets import redact_url_passwords

        return f"{label}: {redact_url_passwords(self.value or 'none')} ({self.source})"

    def above(self, other: Setting) -> bool:
        return LAYERS.index(self.layer) < LAYERS.index(other.layer)


@dataclass(frozen=True)
class Resolved:
    provider: Setting
    model: Setting
    base_url: Setting
    notes: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """What ``%openprogram status`` prints: each setting with its layer."""
        return [
            self.provider.line("provider"),
            self.model.line("model"),
            self.base_url.line("base URL"),
        ]


def environment_provider(environ: Mapping[str, str]) -> Setting | None:
    """The provider the environment names, with the variable that named it."""
    if environ.get("OPENPROGRAM_PROVIDER"):
        return Setting(
            environ["OPENPROGRAM_PROVIDER"].strip().lower(), "environment", "OPENPROGRAM_PROVIDER"
        )
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        if environ.get(var):
            return Setting("openai", "environment", f"({var} is set)")
    if environ.get("ANTHROPIC_API_KEY"):
        return Setting("anthropic", "environment", "(ANTHROPIC_API_KEY is set)")
    return None


def _highest(layers: Sequence[Layer], field: str) -> Setting | None:
    for layer in sorted(layers, key=lambda item: LAYERS.index(item.name)):
        value = getattr(layer, field)
        if value:
            return Setting(value, layer.name)
    return None


def resolve(layers: Sequence[Layer], environ: Mapping[str, str]) -> Resolved:
    """Provider, model and base URL from ``layers`` (any of call..config) and ``environ``."""
    if any(layer.name in ("environment", "default") for layer in layers):
        raise ValueError("the environment and default layers come from environ")
    env_provider = environment_provider(environ)
    provider = _highest(layers, "provider") or env_provider or Setting(None, "default")
    name = provider.value
    model = _highest(layers, "model")
    if model is None and environ.get("OPENPROGRAM_MODEL"):
        model = Setting(environ["OPENPROGRAM_MODEL"], "environment", "OPENPROGRAM_MODEL")
    if model is None:
        model = Setting(DEFAULT_MODELS.get(name or ""), "default")
    base_url = _highest(layers, "base_url")
    env_var = BASE_URL_ENVS.get(name or "")
    if base_url is None and env_var and environ.get(env_var):
        base_url = Setting(environ[env_var], "environment", env_var)
    if base_url is None:
        base_url = Setting(DEFAULT_BASE_URLS.get(name or ""), "default")
    notes: list[str] = []
    overridden = _highest(
        [la for la in layers if provider.above(Setting(None, la.name))], "provider"
    )
    if overridden is None and env_provider is not None and provider.above(env_provider):
        overridden = env_provider
    if overridden is not None and overridden.value != name:
        notes.append(
            f"provider {name} ({provider.source}) overrides {overridden.value} "
            f"({overridden.source})"
        )
    if model.layer != "default" and provider.above(model):
        notes.append(
            f"provider {name} ({provider.source}) with model {model.value} ({model.source})"
        )
    custom = base_url.layer != "default" and base_url.value != DEFAULT_BASE_URLS.get(name or "")
    if model.layer == "default" and custom:
        from openprogram.context.secrets import redact_url_passwords

        shown_url = redact_url_passwords(base_url.value or "")
        notes.append(
            f"model {model.value} is {name}'s default, sent to {shown_url}; name the "
            "server's model with --model or OPENPROGRAM_MODEL"
        )
    return Resolved(provider, model, base_url, tuple(notes))
