"""What a call costs, in US dollars.

Prices come from the ``genai-prices`` package (a maintained table of providers' prices,
read from the installed package — it is never asked to fetch updates), unless the user set
one for the model: :func:`set_price` in code, or ``$OPENPROGRAM_HOME/prices.json``
(``{"model": {"input": USD per million input tokens, "output": ...}}``) for self-hosted
or negotiated prices.  A model neither knows is *unpriced*: its cost is ``None``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openprogram.errors import UserError
from openprogram.settings import current as current_settings

PRICED_PROVIDERS = {"openai", "anthropic"}  # provider names genai-prices knows by that id


@dataclass(frozen=True)
class Price:
    input: float  # USD per million input tokens
    output: float  # USD per million output tokens
    source: str = "user"

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


_user: dict[str, Price] = {}
_lock = threading.Lock()
_file_cache: tuple[Path, float, dict[str, Price]] | None = None


def set_price(model: str, input: float, output: float) -> None:
    """Price ``model`` at ``input``/``output`` USD per million tokens (overrides the table).

    The price counts from the next call on: a call already recorded keeps the cost (or the
    "unpriced") it was recorded with — its node, the methods appendix and the budget's
    count say what was known when it ran, and a later price never rewrites them.  The
    ``usage`` table says so under its total while unpriced calls remain."""
    if input < 0 or output < 0:
        raise ValueError("prices must be >= 0")
    with _lock:
        _user[model] = Price(float(input), float(output), "user")


def user_prices() -> dict[str, Price]:
    """The prices :func:`set_price` set in this process (a map sends them to its workers)."""
    with _lock:
        return dict(_user)


def use_prices(prices: dict[str, Price]) -> None:
    """Make the prices set in this process exactly ``prices`` (a map's worker: the kernel's)."""
    with _lock:
        _user.clear()
        _user.update(prices)


def clear_prices() -> None:
    """Forget the prices set with :func:`set_price` (the file's stay)."""
    with _lock:
        _user.clear()


def prices_file() -> Path:
    return current_settings().home / "prices.json"


def _file_prices() -> dict[str, Price]:
    """``prices.json`` under the home, re-read when it changes; a bad file is an error."""
    global _file_cache
    path = prices_file()
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return {}
    if _file_cache is not None and _file_cache[:2] == (path, mtime):
        return _file_cache[2]

    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        table = {
            str(model): Price(float(p["input"]), float(p["output"]), f"file {path}")
            for model, p in raw.items()
        }
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise UserError(
            f'{path}: expected {{"model": {{"input": USD/Mtok, "output": USD/Mtok}}}} '
            f"({type(exc).__name__}: {exc})"
        ) from None
    _file_cache = (path, mtime, table)
    return table


def _package_price(model: str, provider: str | None) -> Price | None:
    try:
        from genai_prices import Usage, calc_price
    except ImportError:  # the package is optional for the engine: unpriced then
        return None
    million = 1_000_000
    try:
        kwargs: dict[str, Any] = {"provider_id": provider} if provider in PRICED_PROVIDERS else {}
        calc_in = calc_price(Usage(input_tokens=million), model_ref=model, **kwargs)
        calc_out = calc_price(Usage(output_tokens=million), model_ref=model, **kwargs)
    except Exception:  # LookupError: a model the table does not list
        return None
    return Price(float(calc_in.total_price), float(calc_out.total_price), "genai-prices")


_package_cache: dict[tuple[str, str | None], Price | None] = {}


def price_of(
    model: str, provider: str | None = None, *, vendor_endpoint: bool = True
) -> Price | None:
    """The user's price for ``model`` if set, else the package's, else None.

    ``vendor_endpoint=False`` (a custom base URL: a local or third-party server that answers
    any model name): only a price the user set; the vendor's table is never used there."""
    if not model:
        return None
    with _lock:
        user = _user.get(model)
    if user is not None:
        return user
    found = _file_prices().get(model)
    if found is not None:
        return found
    if not vendor_endpoint:
        return None
    key = (model, provider)
    if key not in _package_cache:
        _package_cache[key] = _package_price(model, provider)
    return _package_cache[key]


def price_call(
    model: str,
    provider: str | None,
    input_tokens: int,
    output_tokens: int,
    *,
    vendor_endpoint: bool = True,
) -> float | None:
    """The cost of one call in USD, or None when the model is unpriced (see :func:`price_of`)."""
    price = price_of(model, provider, vendor_endpoint=vendor_endpoint)
    return None if price is None else round(price.cost(input_tokens, output_tokens), 10)
