"""What the official-SDK adapters (``openai``, ``anthropic``) share.

:class:`SDKProvider` owns the constructor, the identity (``model``, ``timeout``,
``base_url``, a ``repr`` that never shows the key), the lazily built SDK client (with a
placeholder key for key-less local servers), redaction of the key from messages, the
request skeleton (loopback check, errors raised outside the ``except`` block) and the error
mapping both SDKs have in common.  A subclass sets the class attributes and implements
:meth:`~SDKProvider._make_client` and :meth:`~SDKProvider._send`; the wire mapping is all
that is left in it.

The SDK is imported lazily, on the first request (``sdk_module``), so importing an adapter
does not import its SDK.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any, ClassVar

from openprogram.context.secrets import register_secret, url_passwords
from openprogram.errors import OpenProgramError, UnsupportedParameter, UserError
from openprogram.providers.base import (
    DeltaCallback,
    LLMRequest,
    LLMResponse,
    MissingCredentials,
    ProviderError,
    TransientProviderError,
)
from openprogram.providers.capabilities import unsupported_parameter
from openprogram.providers.network import check_model_request
from openprogram.providers.retry_after import retry_after
from openprogram.settings import current as current_settings

PLACEHOLDER_API_KEY = "not-needed"
DEFAULT_TIMEOUT = 120.0
# A stream is cut (as a reply cut at max_tokens ends) once it clearly exceeds max_tokens: a
# server sends at most one piece per generated token besides a few of framing (the role, the
# finish, the usage), and no tokenizer's tokens average this many characters
STREAM_FRAMING_PIECES = 16
STREAM_CHARS_PER_TOKEN = 64


class StreamCap:
    """Counts a streamed reply's pieces and characters against its ``max_tokens`` (0: none),
    so a server that ignores it is cut rather than read for ever."""

    def __init__(self, max_tokens: object) -> None:
        self.limit = int(max_tokens) if isinstance(max_tokens, int) else 0
        self.pieces = self.chars = 0

    def exceeded(self) -> bool:
        """One more piece arrived: has the reply clearly gone past its limit?"""
        self.pieces += 1
        return self.limit > 0 and (
            self.pieces > self.limit + STREAM_FRAMING_PIECES
            or self.chars > self.limit * STREAM_CHARS_PER_TOKEN
        )

    def note(self) -> dict[str, str]:
        """The metadata a cut reply carries."""
        said = f"the server sent more than max_tokens={self.limit} allows; the stream was cut"
        return {"stream_cut": said}


def request_timeout(environ: Mapping[str, str] | None = None) -> float:
    """The default request timeout: ``OPENPROGRAM_TIMEOUT`` seconds, else 120.

    A streamed reply (the default for compatible servers) times out only when the server
    sends nothing for that long, so a slow local model generating a long answer is not
    mistaken for a dead one."""
    raw = (os.environ if environ is None else environ).get("OPENPROGRAM_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise UserError(f"OPENPROGRAM_TIMEOUT must be a number of seconds above 0, got {raw!r}")
    return value


class SDKProvider:
    """Base of the providers that talk to a vendor API through its official SDK."""

    name: str  # the vendor, also the prefix of every error message
    default_model: ClassVar[str]
    default_base_url: ClassVar[str]
    api_key_env: ClassVar[str]  # e.g. OPENAI_API_KEY
    base_url_env: ClassVar[str]  # e.g. OPENAI_BASE_URL
    token_envs: ClassVar[tuple[str, ...]] = ()  # other credentials the SDK reads from env
    sdk_module: ClassVar[str]  # imported on first use
    sdk_error: ClassVar[str]  # the SDK's base exception class, by name
    client_errors: ClassVar[tuple[type[Exception], ...]] = ()  # besides sdk_error

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        client: Any = None,
    ) -> None:
        chosen = model or current_settings().model
        self.model = chosen or self.default_model
        # not chosen: a compatible server's own model is learnt at the first request
        self.model_chosen = bool(chosen)
        self._api_key = api_key
        register_secret(api_key)  # never written into a session or shown
        for password in url_passwords(base_url or ""):  # a gateway's, in the URL given here
            register_secret(password)
        self._base_url = base_url
        # seconds without a byte from the server (streamed: between chunks)
        self.timeout = timeout if timeout is not None else request_timeout()
        self._client = client

    # -- identity (never shows the key) -------------------------------------------------

    @property
    def base_url(self) -> str:
        """The base URL requests go to (explicit, then ``base_url_env``, then the vendor)."""
        if self._client is not None:
            return str(self._client.base_url)
        return self._base_url or os.environ.get(self.base_url_env) or self.default_base_url

    @property
    def shown_base_url(self) -> str:
        """:attr:`base_url` as printed and recorded: without its password."""
        from openprogram.context.secrets import redact_url_passwords

        return redact_url_passwords(self.base_url)

    @property
    def vendor_endpoint(self) -> bool:
        """Whether requests go to the vendor's own API (only then are its prices used)."""
        return self.base_url.rstrip("/") == self.default_base_url.rstrip("/")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.shown_base_url!r})"

    __str__ = __repr__

    # -- client ---------------------------------------------------------------------------

    def _sdk(self) -> ModuleType:
        return importlib.import_module(self.sdk_module)

    def _make_client(self, api_key: str | None, base_url: str | None) -> Any:
        """The SDK client (``None`` arguments: the SDK reads its own environment variables)."""
        raise NotImplementedError

    def _get_client(self) -> Any:
        if self._client is None:
            sdk = self._sdk()
            api_key = self._api_key
            base_url = self._base_url or os.environ.get(self.base_url_env)
            if (
                not api_key
                and base_url
                and not any(os.environ.get(v) for v in (self.api_key_env, *self.token_envs))
            ):
                api_key = PLACEHOLDER_API_KEY  # local compatible servers need no key
            if (
                not api_key
                and not base_url
                and not any(os.environ.get(v) for v in (self.api_key_env, *self.token_envs))
            ):  # said here, not left to the SDK: an older one takes an empty key and sends
                raise self._client_error(ValueError("no API key"), api_key)
            try:
                self._client = self._make_client(api_key, base_url)
            except (getattr(sdk, self.sdk_error), *self.client_errors) as exc:  # e.g. no key
                error = self._client_error(exc, api_key)
            else:
                return self._client
            raise error
        return self._client

    def _client_error(self, exc: Exception, api_key: str | None) -> ProviderError:
        """Why the client could not be made; a missing key says which variable to set."""
        if not api_key and not any(os.environ.get(v) for v in (self.api_key_env, *self.token_envs)):
            return MissingCredentials(
                f"{self.name} needs an API key: set {self.api_key_env} in the environment "
                f"(a notebook's: the kernel's; or {self.base_url_env} for a local compatible "
                "server), or work offline with the test provider (`openprogram research|chat "
                "--provider test`, `%openprogram provider test` in a notebook)"
            )
        return ProviderError(self._redact(f"{self.name}: cannot create client: {exc}"))

    def _secret(self) -> str | None:
        key = self._api_key
        if not key and self._client is not None:
            key = getattr(self._client, "api_key", None)
        if not key:
            key = os.environ.get(self.api_key_env)
        return key if isinstance(key, str) and key else None

    def _redact(self, text: str) -> str:
        secret = self._secret()
        if secret and secret != PLACEHOLDER_API_KEY:
            text = text.replace(secret, "***")
        for name in self.token_envs:
            token = os.environ.get(name)
            if token:
                text = text.replace(token, "***")
        return text

    # -- request ------------------------------------------------------------------------------

    def _send(
        self, client: Any, request: LLMRequest, on_delta: DeltaCallback | None
    ) -> LLMResponse:
        """Send ``request`` with ``client`` and parse the reply (SDK errors propagate)."""
        raise NotImplementedError

    def complete(self, request: LLMRequest, on_delta: DeltaCallback | None = None) -> LLMResponse:
        """Send ``request``; stream when ``request.stream`` or ``on_delta`` is given."""
        client = self._get_client()  # a missing key is said first (making one sends nothing)
        check_model_request(self.base_url, self.name)
        sdk = self._sdk()
        timeouts, transport = transport_errors()
        caught = (getattr(sdk, self.sdk_error), *timeouts, *transport)
        try:
            response = self._send(client, request, on_delta)
        except caught as exc:
            error = self._map_error(exc)
        else:
            return response
        # Raised outside the except block: no __context__ chain back to the SDK exception.
        raise error

    # -- errors -------------------------------------------------------------------------------

    def _map_vendor_error(self, exc: BaseException, detail: str) -> ProviderError | None:
        """A subclass's own mapping, tried after connection, rate-limit and 5xx errors."""
        return None

    def _map_error(self, exc: BaseException) -> ProviderError:
        sdk = self._sdk()
        name = self.name
        detail = self._redact(str(exc))
        timeouts, transport = transport_errors()
        if isinstance(exc, timeouts):  # raw httpx error escaping the SDK mid-stream
            return TransientProviderError(f"{name}: request timed out ({self.shown_base_url})")
        if isinstance(exc, transport):
            return TransientProviderError(
                f"{name}: connection to {self.shown_base_url} failed: "
                f"{detail or type(exc).__name__}"
            )
        if isinstance(exc, sdk.APITimeoutError):
            return TransientProviderError(f"{name}: request timed out ({self.shown_base_url})")
        if isinstance(exc, sdk.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            why = f": {self._redact(str(cause))}" if cause else ""
            return TransientProviderError(
                f"{name}: connection to {self.shown_base_url} failed{why}"
            )
        status: int | None = exc.status_code if isinstance(exc, sdk.APIStatusError) else None
        refused = unsupported_parameter(detail) if status is not None else None
        if refused is not None:  # permanent, even as a 5xx: asking again gets the same answer
            return UnsupportedParameter(
                f"{name}: the server does not support {refused!r} (HTTP {status}): {detail[:300]}",
                refused,
            )
        if status is not None:
            if isinstance(exc, sdk.RateLimitError):
                return _asked_to_wait(exc, f"{name}: rate limited (HTTP {status}", detail)
            if isinstance(exc, sdk.InternalServerError) or status >= 500:
                return _asked_to_wait(exc, f"{name}: server error (HTTP {status}", detail)
        mapped = self._map_vendor_error(exc, detail)
        if mapped is not None:
            return mapped
        if status is not None:
            if isinstance(exc, sdk.AuthenticationError):
                return ProviderError(
                    f"{name}: authentication failed (HTTP {status}) - check "
                    f"{self.api_key_env}: {detail}"
                )
            return ProviderError(f"{name}: request failed (HTTP {status}): {detail}")
        return ProviderError(f"{name}: {type(exc).__name__}: {detail}")


def _asked_to_wait(exc: BaseException, head: str, detail: str) -> TransientProviderError:
    """A transient HTTP error carrying how long the server asked to wait (its
    ``Retry-After``), which the message says too."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    after = retry_after(headers) if isinstance(headers, Mapping) else None
    said = f", retry after {f'{after:.1f}'.removesuffix('.0')} s" if after is not None else ""
    error = TransientProviderError(f"{head}{said}): {detail}")
    error.retry_after = after
    return error


def transport_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """httpx(2) timeout and transport errors, which can escape the SDK while streaming.

    Returns ``(timeout errors, other transport errors)``.  ``httpx`` is only consulted when
    something already imported it (the SDKs use ``httpx2`` and accept legacy clients).
    """
    timeouts: list[type[BaseException]] = []
    transport: list[type[BaseException]] = []
    for name in ("httpx2", "httpx"):
        if name == "httpx" and name not in sys.modules:
            continue
        try:  # (not sys.modules: a module another thread is importing is only half there;
            module = importlib.import_module(name)  # this waits for that import to end)
        except ImportError:
            continue
        timeouts.append(module.TimeoutException)
        transport.append(module.TransportError)
    return tuple(timeouts) or (_Never,), tuple(transport) or (_Never,)


class _Never(OpenProgramError):
    """Placeholder in an ``except`` tuple when no httpx flavour is installed."""
