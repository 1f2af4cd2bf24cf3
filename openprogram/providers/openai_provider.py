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

import json
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
from openprogram.providers.sdk import SDKProvider

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_BASE_URL = "https://api.openai.com/v1"

# In-band error types (an ``{"error": ...}`` chunk inside a 200 stream) worth retrying.
_TRANSIENT_ERROR_MARKERS = ("server_error", "overloaded", "rate_limit", "timeout", "unavailable")


class OpenAIProvider(SDKProvider):
    """A :class:`~openprogram.providers.base.Provider` for OpenAI-compatible chat APIs."""

    name = "openai"
    default_model = DEFAULT_MODEL
    default_base_url = DEFAULT_BASE_URL
    api_key_env = "OPENAI_API_KEY"
    base_url_env = "OPENAI_BASE_URL"
    sdk_module = "openai"
    sdk_error = "OpenAIError"

    def _make_client(self, api_key: str | None, base_url: str | None) -> Any:
        import openai

        return openai.OpenAI(
            api_key=api_key,  # None -> the SDK reads OPENAI_API_KEY
            base_url=base_url,  # None -> the SDK reads OPENAI_BASE_URL
            timeout=self.timeout,
            max_retries=0,
        )

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
            choice = request.tool_choice
            if choice in ("auto", "none", "required"):
                params["tool_choice"] = choice
            elif choice:  # one tool's name: that tool must be called
                params["tool_choice"] = {"type": "function", "function": {"name": choice}}
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

    def _send(
        self, client: Any, request: LLMRequest, on_delta: DeltaCallback | None
    ) -> LLMResponse:
        streaming = bool(request.stream or on_delta is not None)
        params = self._params(request, streaming)
        if streaming:
            return self._stream(client, params, on_delta)
        return self._parse_completion(client.chat.completions.create(**params))

    def _map_vendor_error(self, exc: BaseException, detail: str) -> ProviderError | None:
        import openai

        if isinstance(exc, openai.APIError) and not isinstance(exc, openai.APIStatusError):
            # an error chunk inside a 200 stream
            body = json.dumps(exc.body) if exc.body is not None else ""
            if any(marker in body for marker in _TRANSIENT_ERROR_MARKERS):
                return TransientProviderError(f"openai: error during stream: {detail}")
            return ProviderError(f"openai: error during stream: {detail}")
        return None

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
