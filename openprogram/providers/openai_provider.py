"""OpenAI Chat Completions through the official ``openai`` SDK.

Works with OpenAI itself and with any OpenAI-compatible server (Ollama, vLLM, LM Studio):
point ``base_url`` (or ``OPENAI_BASE_URL``) at it.  A local server usually needs no key, so
when a base URL is in effect and no key is given a placeholder key is sent.

The SDK is imported lazily, on the first request, so importing this module is cheap and does
not require ``openai`` to be installed.  The SDK's own retries are disabled
(``max_retries=0``): the Runtime retries :class:`TransientProviderError` itself.

Errors
------
* rate limit (429), server errors (5xx), timeouts, connection failures, a stream that ends
  before the model finished -> :class:`TransientProviderError`
* any other HTTP status (400, 401, 403, 404, ...), a malformed reply (tool arguments that
  are not JSON) -> :class:`ProviderError`

Error messages never contain the API key, and the mapped error is raised *outside* the
``except`` block, so it carries no ``__cause__``/``__context__`` pointing at the SDK
exception (whose request object holds the ``Authorization`` header).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

from openprogram.providers.base import (
    DeltaCallback,
    LLMRequest,
    LLMResponse,
    ProviderError,
    ToolCall,
    TransientProviderError,
    Usage,
)
from openprogram.providers.network import check_model_request

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
PLACEHOLDER_API_KEY = "not-needed"

# In-band error types (an ``{"error": ...}`` chunk inside a 200 stream) worth retrying.
_TRANSIENT_ERROR_MARKERS = ("server_error", "overloaded", "rate_limit", "timeout", "unavailable")


class OpenAIProvider:
    """A :class:`~openprogram.providers.base.Provider` for OpenAI-compatible chat APIs."""

    name = "openai"

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 120.0,
        client: Any = None,
    ) -> None:
        self.model = model or os.environ.get("OPENPROGRAM_MODEL") or DEFAULT_MODEL
        self._api_key = api_key
        self._base_url = base_url
        self.timeout = timeout
        self._client = client

    # -- identity (never shows the key) -------------------------------------------------

    @property
    def base_url(self) -> str:
        """The base URL requests go to (explicit, then ``OPENAI_BASE_URL``, then OpenAI)."""
        if self._client is not None:
            return str(self._client.base_url)
        return self._base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.model!r}, base_url={self.base_url!r})"

    __str__ = __repr__

    # -- client ---------------------------------------------------------------------------

    def _get_client(self) -> Any:
        if self._client is None:
            import openai

            api_key = self._api_key
            base_url = self._base_url or os.environ.get("OPENAI_BASE_URL")
            if not api_key and base_url and not os.environ.get("OPENAI_API_KEY"):
                api_key = PLACEHOLDER_API_KEY  # local OpenAI-compatible servers need no key
            try:
                self._client = openai.OpenAI(
                    api_key=api_key,  # None -> the SDK reads OPENAI_API_KEY
                    base_url=base_url,  # None -> the SDK reads OPENAI_BASE_URL
                    timeout=self.timeout,
                    max_retries=0,
                )
            except openai.OpenAIError as exc:  # e.g. no key anywhere
                message = f"openai: cannot create client: {exc}"
                error = ProviderError(self._redact(message))
            else:
                return self._client
            raise error
        return self._client

    def _secret(self) -> str | None:
        key = self._api_key
        if not key and self._client is not None:
            key = getattr(self._client, "api_key", None)
        if not key:
            key = os.environ.get("OPENAI_API_KEY")
        return key if isinstance(key, str) and key else None

    def _redact(self, text: str) -> str:
        secret = self._secret()
        if secret and secret != PLACEHOLDER_API_KEY:
            text = text.replace(secret, "***")
        return text

    # -- request ------------------------------------------------------------------------------

    def _params(self, request: LLMRequest, streaming: bool) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": request.model or self.model,
            "messages": [dict(m) for m in request.messages],
        }
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool["name"],
                        "description": tool.get("description", ""),
                        "parameters": tool.get("parameters")
                        or {"type": "object", "properties": {}},
                    },
                }
                for tool in request.tools
            ]
        if request.response_format is not None:
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": "reply",
                    "schema": request.response_format,
                    "strict": False,
                },
            }
        if request.max_tokens is not None:
            # OpenAI's own API wants max_completion_tokens (reasoning models reject max_tokens);
            # compatible servers (Ollama, vLLM, LM Studio) all understand max_tokens.
            if self.base_url.rstrip("/") == DEFAULT_BASE_URL:
                params["max_completion_tokens"] = request.max_tokens
            else:
                params["max_tokens"] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.timeout is not None:
            params["timeout"] = request.timeout
        if streaming:
            params["stream"] = True
            params["stream_options"] = {"include_usage": True}
        return params

    def complete(self, request: LLMRequest, on_delta: DeltaCallback | None = None) -> LLMResponse:
        """Send ``request``; stream when ``request.stream`` or ``on_delta`` is given."""
        check_model_request(self.base_url, "openai")
        client = self._get_client()
        import openai

        timeouts, transport = _transport_errors()
        caught: tuple[type[BaseException], ...] = (openai.OpenAIError, *timeouts, *transport)

        streaming = bool(request.stream or on_delta is not None)
        params = self._params(request, streaming)
        try:
            if streaming:
                return self._stream(client, params, on_delta)
            return self._parse_completion(client.chat.completions.create(**params))
        except caught as exc:
            error = self._map_error(exc)
        # Raised outside the except block: no __context__ chain back to the SDK exception.
        raise error

    def _map_error(self, exc: BaseException) -> ProviderError:
        import openai

        detail = self._redact(str(exc))
        timeouts, transport = _transport_errors()
        if isinstance(exc, timeouts):  # raw httpx error escaping the SDK mid-stream
            return TransientProviderError(f"openai: request timed out ({self.base_url})")
        if isinstance(exc, transport):
            return TransientProviderError(
                f"openai: connection to {self.base_url} failed: {detail or type(exc).__name__}"
            )
        if isinstance(exc, openai.APITimeoutError):
            return TransientProviderError(f"openai: request timed out ({self.base_url})")
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            why = f": {self._redact(str(cause))}" if cause else ""
            return TransientProviderError(f"openai: connection to {self.base_url} failed{why}")
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            if isinstance(exc, openai.RateLimitError):
                return TransientProviderError(f"openai: rate limited (HTTP {status}): {detail}")
            if isinstance(exc, openai.InternalServerError) or status >= 500:
                return TransientProviderError(f"openai: server error (HTTP {status}): {detail}")
            if isinstance(exc, openai.AuthenticationError):
                return ProviderError(
                    f"openai: authentication failed (HTTP {status}) - check OPENAI_API_KEY: "
                    f"{detail}"
                )
            return ProviderError(f"openai: request failed (HTTP {status}): {detail}")
        if isinstance(exc, openai.APIError):  # an error chunk inside a 200 stream
            body = json.dumps(exc.body) if exc.body is not None else ""
            if any(marker in body for marker in _TRANSIENT_ERROR_MARKERS):
                return TransientProviderError(f"openai: error during stream: {detail}")
            return ProviderError(f"openai: error during stream: {detail}")
        return ProviderError(f"openai: {type(exc).__name__}: {detail}")

    # -- replies ------------------------------------------------------------------------------

    def _parse_completion(self, completion: Any) -> LLMResponse:
        if not completion.choices:
            raise ProviderError("openai: reply has no choices")
        choice = completion.choices[0]
        message = choice.message
        tool_calls = [
            self._tool_call(tc.id or "", tc.function.name, tc.function.arguments)
            for tc in (message.tool_calls or [])
            if getattr(tc, "function", None) is not None
        ]
        return LLMResponse(
            text=message.content or "",
            tool_calls=tool_calls,
            usage=_usage(completion.usage),
            model=completion.model or "",
            finish_reason=choice.finish_reason,
        )

    def _stream(
        self, client: Any, params: dict[str, Any], on_delta: DeltaCallback | None
    ) -> LLMResponse:
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        usage: Usage | None = None
        model = ""
        finish_reason: str | None = None
        stream = client.chat.completions.create(**params)
        try:
            for chunk in stream:
                model = chunk.model or model
                if chunk.usage is not None:
                    usage = _usage(chunk.usage)
                for choice in chunk.choices or []:
                    if choice.index not in (0, None):
                        continue
                    delta = choice.delta
                    if delta is not None and delta.content:
                        text.append(delta.content)
                        if on_delta is not None:
                            on_delta(delta.content)
                    for tc in (delta.tool_calls if delta is not None else None) or []:
                        slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                        if tc.id:
                            slot["id"] = tc.id
                        if tc.function is not None:
                            if tc.function.name:
                                slot["name"] += tc.function.name
                            if tc.function.arguments:
                                slot["arguments"] += tc.function.arguments
                    if choice.finish_reason:
                        finish_reason = choice.finish_reason
        finally:
            stream.close()  # also on KeyboardInterrupt / an exception from on_delta
        if finish_reason is None:
            raise TransientProviderError(
                "openai: the stream ended before the model finished (no finish_reason)"
            )
        tool_calls = [
            self._tool_call(slot["id"], slot["name"], slot["arguments"])
            for _, slot in sorted(calls.items())
        ]
        return LLMResponse(
            text="".join(text),
            tool_calls=tool_calls,
            usage=usage,
            model=model,
            finish_reason=finish_reason,
        )

    def _tool_call(self, call_id: str, name: str, arguments: str | None) -> ToolCall:
        raw = arguments or ""
        if not raw.strip():
            return ToolCall(id=call_id, name=name, arguments={})
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as exc:
            preview = self._redact(raw[:200])
            raise ProviderError(
                f"openai: tool call {name!r} has arguments that are not valid JSON "
                f"({exc.msg}): {preview!r}"
            ) from None
        if not isinstance(parsed, dict):
            raise ProviderError(
                f"openai: tool call {name!r} arguments must be a JSON object, got "
                f"{type(parsed).__name__}"
            )
        return ToolCall(id=call_id, name=name, arguments=parsed)


def _usage(raw: Any) -> Usage | None:
    if raw is None:
        return None
    return Usage(
        input_tokens=int(getattr(raw, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(raw, "completion_tokens", 0) or 0),
    )


def _transport_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """httpx(2) timeout and transport errors, which can escape the SDK while streaming.

    Returns ``(timeout errors, other transport errors)``.  ``httpx`` is only consulted when
    something already imported it (the SDK uses ``httpx2`` and accepts legacy clients).
    """
    timeouts: list[type[BaseException]] = []
    transport: list[type[BaseException]] = []
    for name in ("httpx2", "httpx"):
        module = sys.modules.get(name)
        if module is None and name == "httpx2":
            try:
                module = importlib.import_module(name)
            except ImportError:
                module = None
        if module is not None:
            timeouts.append(module.TimeoutException)
            transport.append(module.TransportError)
    return tuple(timeouts) or (_Never,), tuple(transport) or (_Never,)


class _Never(Exception):
    """Placeholder in an ``except`` tuple when no httpx flavour is installed."""
