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
* any other HTTP status (400, 401, 403, 404, ...), a malformed reply -> :class:`ProviderError`
  (tool arguments that are not JSON are not an error of the reply: the call carries the
  problem, ``ToolCall.problem``, and the tool loop asks the model to fix it)

Error messages never contain the API key, and the mapped error is raised *outside* the
``except`` block, so it carries no ``__cause__``/``__context__`` pointing at the SDK
exception (whose request object holds the ``Authorization`` header).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from openprogram.context.outcome import error_text
from openprogram.context.policy import estimate_tokens
from openprogram.errors import OpenProgramError, UnsupportedParameter, UserError
from openprogram.providers import capabilities, usage_counts
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
from openprogram.providers.sdk import SDKProvider, StreamCap
from openprogram.settings import current as current_settings

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_BASE_URL = "https://api.openai.com/v1"

# In-band error types (an ``{"error": ...}`` chunk inside a 200 stream) worth retrying.
_TRANSIENT_ERROR_MARKERS = ("server_error", "overloaded", "rate_limit", "timeout", "unavailable")

# a compatible server's reply that may run longer than this is streamed (see _send): at a
# slow local model's ~5 tokens/s, 256 tokens still arrive within the default timeout
STREAM_ABOVE_TOKENS = 256
DEFAULT_MAX_TOKENS = 1024  # every request carries one; OPENPROGRAM_MAX_TOKENS overrides it
# passed through from runtime.exec(...) options when given
GENERATION_SETTINGS = ("temperature", "top_p", "stop", "seed", "presence_penalty")
_MODE_KEY = "_openprogram_output_mode"  # request.extra: the output mode of this attempt
_CHOICE_KEY = "_openprogram_choice"  # request.extra: the schema is the choices' enum


def default_max_tokens() -> int:
    """The ``max_tokens`` of a request that names none (``OPENPROGRAM_MAX_TOKENS``)."""
    raw = current_settings().max_tokens or ""
    try:
        value = int(raw) if raw.strip() else DEFAULT_MAX_TOKENS
    except ValueError:
        raise UserError(f"OPENPROGRAM_MAX_TOKENS must be a whole number, got {raw!r}") from None
    if value <= 0:
        raise UserError(f"OPENPROGRAM_MAX_TOKENS must be positive, got {value}")
    return value


def reply_cap(request: LLMRequest) -> int:
    """The ``max_tokens`` a request goes out with: the call's, else the default; a budget's
    room (``request.max_tokens``) caps either."""
    wanted = request.extra.get("max_tokens") or default_max_tokens()
    return int(min(request.max_tokens or wanted, wanted))


class _EmptyStream(OpenProgramError):
    """A 200 stream that carried nothing (a server that cannot stream this request)."""


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
        messages = [dict(m) for m in request.messages]
        mode = request.extra.get(_MODE_KEY) or "native"
        schema = request.response_format
        if request.extra.get(_CHOICE_KEY) and mode == "prompted":
            schema = None  # choices asked as plain text: the Runtime's prompt names them
        if schema is not None and mode != "native":  # JSON mode, prompted: say the schema
            messages = capabilities.with_instruction(
                messages, capabilities.schema_instruction(schema)
            )
        params: dict[str, Any] = {"model": request.model or self.model, "messages": messages}
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
            choice = request.tool_choice or "auto"  # some servers read "no tool_choice" as none
            if choice in ("auto", "none", "required"):
                params["tool_choice"] = choice
            elif choice:  # one tool's name: that tool must be called
                params["tool_choice"] = {"type": "function", "function": {"name": choice}}
        if schema is not None:
            response_format = capabilities.response_format_param(mode, schema)
            if response_format is not None:
                params["response_format"] = response_format
        # every request carries a max_tokens (a rambling local model cannot run to the timeout)
        # (the call's, else the default; a budget's room, request.max_tokens, caps either)
        max_tokens = reply_cap(request)
        # OpenAI's own API wants max_completion_tokens (reasoning models reject max_tokens);
        # compatible servers (Ollama, vLLM, LM Studio) all understand max_tokens.
        if self.base_url.rstrip("/") == DEFAULT_BASE_URL:
            params["max_completion_tokens"] = int(max_tokens)
        else:
            params["max_tokens"] = int(max_tokens)
        if request.temperature is not None:
            params["temperature"] = request.temperature
        for key in GENERATION_SETTINGS:  # runtime.exec(..., temperature=0, seed=1)
            if key not in params and request.extra.get(key) is not None:
                params[key] = request.extra[key]
        if request.timeout is not None:
            params["timeout"] = request.timeout
        if streaming:
            params["stream"] = True
            params["stream_options"] = {"include_usage": True}
        return params

    def profile(self) -> capabilities.Profile:
        """What this server was seen to support (shared by every provider at its URL)."""
        return capabilities.profile_for(self.name, self.base_url)

    def served_model(self) -> str | None:
        """The model a compatible server serves, learnt once per server from ``/models``
        (None: the vendor's own API, or a server that lists none — the default name is
        sent).  Several served models: the user must choose, and is told how."""
        if self.vendor_endpoint:
            return None
        profile = self.profile()
        if profile.served_models is None:
            client = self._get_client()
            check_model_request(self.base_url, self.name)
            try:
                listed = client.models.list(timeout=min(self.timeout, 30.0))
                profile.served_models = [str(m.id) for m in listed if getattr(m, "id", None)]
            except Exception:  # no /models here (404, HTML, ...): nothing learnt
                profile.served_models = []
        served = profile.served_models
        if len(served) > 1:
            names = ", ".join(served[:6]) + (", …" if len(served) > 6 else "")
            raise UserError(
                f"openai: {self.shown_base_url} serves {len(served)} models ({names}): choose "
                "one with --model, OPENPROGRAM_MODEL or `%openprogram provider openai --model NAME`"
            )
        return served[0] if served else None

    def complete(self, request: LLMRequest, on_delta: DeltaCallback | None = None) -> LLMResponse:
        """Send ``request``; a ``response_format`` — or the enum of a call's ``choices`` —
        goes out in the output mode the server's profile (or the call's ``output_mode``)
        says, stepping down when the server refuses it
        (:mod:`openprogram.providers.capabilities`)."""
        if not self.model_chosen and request.model in ("", self.model):
            served = self.served_model()  # the node records the model that answered
            if served is not None:
                request = replace(request, model=served)
        choices = request.extra.get("choices")
        if request.response_format is None and choices and not request.tools:
            # choices: constrained to an enum where the server can (native, JSON mode)
            schema = capabilities.choice_schema(choices)
            extra = {**request.extra, _CHOICE_KEY: True}
            request = replace(request, response_format=schema, extra=extra)
        elif request.response_format is None:
            return super().complete(request, on_delta)
        profile = self.profile()
        forced = capabilities.checked_mode(request.extra.get("output_mode"))
        mode: str | None = forced or profile.output_mode
        refused: list[str] = []
        while True:
            assert mode is not None
            sent = replace(request, extra={**request.extra, _MODE_KEY: mode})
            try:
                response = super().complete(sent, on_delta)
            except UnsupportedParameter as exc:
                lower = capabilities.step_down(mode)
                if lower is None or not capabilities.refused_output(exc.parameter):
                    raise
                refused.append(f"{mode}: {error_text(exc, 200)}")
                mode = lower
                if forced is None:  # remembered for this server, for this process
                    profile.output_mode = mode
                continue
            except ProviderError as exc:  # (a timeout after a refusal: the retry is told)
                if refused:
                    exc.output_refused = refused
                raise
            response.metadata["output_mode"] = mode
            if refused:
                response.metadata["output_refused"] = refused
            return response

    def _send(
        self, client: Any, request: LLMRequest, on_delta: DeltaCallback | None
    ) -> LLMResponse:
        # A compatible server's long reply is streamed even with nobody watching: a slow
        # local model is then timed out only when it stops sending, and a request given up
        # on closes its stream, which stops the generation (a retry never queues behind an
        # abandoned answer).  A short one comes whole, with the server's own usage.
        long_reply = not self.vendor_endpoint and reply_cap(request) > STREAM_ABOVE_TOKENS
        streaming = bool(request.stream or on_delta is not None or long_reply)
        profile = self.profile()
        fallback = None
        # OpenAI streams tool calls; a compatible server may not (llama-cpp-python streams a
        # tool choice as plain text, or nothing): with tools, only streamed once known to work
        stream_tools = profile.stream_with_tools
        if streaming and request.tools and not (stream_tools or self.vendor_endpoint):
            streaming, fallback = False, "requests with tools are not streamed to this server"
        if streaming:
            try:
                response = self._stream(client, self._params(request, True), on_delta)
            except _EmptyStream:
                if not request.tools:
                    raise TransientProviderError(
                        "openai: the stream ended before the model finished (no finish_reason)"
                    ) from None
                profile.stream_with_tools = False  # asked again without streaming from now on
                fallback = "the server sent an empty stream for a request with tools"
            else:
                if request.tools:
                    profile.stream_with_tools = True
                if response.usage is None:
                    self._count_usage(request, response)
                return response
        response = self._parse_completion(
            client.chat.completions.create(**self._params(request, False))
        )
        if fallback is not None:
            response.metadata["stream_fallback"] = fallback
            if on_delta is not None and response.text:
                on_delta(response.text)  # the whole reply at once
        return response

    def _count_usage(self, request: LLMRequest, response: LLMResponse) -> None:
        """A streamed reply without usage: count it with the server's tokenizer where it has
        one, else estimate (characters / 3); either way the node says it is an estimate."""
        profile = self.profile()
        prompt = "\n".join(str(m.get("content") or "") for m in request.messages)
        counted = None
        if profile.tokenize is not False and not self.vendor_endpoint:
            counted = usage_counts.server_counts(self.base_url, [prompt, response.text])
            profile.tokenize = counted is not None
        if counted is not None:
            inputs, outputs = counted[0] + 4 * len(request.messages), counted[1]
            how = "server tokenizer"
        else:
            inputs = estimate_tokens(request.messages)
            outputs = -(-len(response.text) // 3)
            how = "characters / 3"
        response.usage = Usage(input_tokens=inputs, output_tokens=outputs)
        response.metadata["usage_estimated"] = how

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
        cut = False
        cap = StreamCap(params.get("max_tokens") or params.get("max_completion_tokens"))
        stream = client.chat.completions.create(**params)
        try:
            for chunk in stream:
                said = _generated(chunk)  # (framing, a tool call's name: no token counted)
                if said and (cut := cap.exceeded()):  # ignoring max_tokens: ended as if kept
                    finish_reason = "length"
                    break
                cap.chars += said
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
            if not text and not calls:
                raise _EmptyStream()
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
            metadata=cap.note() if cut else {},
        )

    def _tool_call(self, call_id: str, name: str, arguments: str | None) -> ToolCall:
        """A tool call; arguments that cannot be read are ``{}`` with the ``problem`` named
        (the tool loop sends it back for the model to fix), not an error of the reply."""
        raw = arguments or ""
        if not raw.strip():
            return ToolCall(id=call_id, name=name, arguments={})
        try:
            parsed = json.loads(raw, strict=False)  # a raw newline inside a string is read
        except json.JSONDecodeError as exc:
            preview = self._redact(raw[:200])
            problem = f"the arguments are not valid JSON ({exc.msg}): {preview!r}"
            return ToolCall(id=call_id, name=name, arguments={}, problem=problem)
        if not isinstance(parsed, dict):
            problem = f"the arguments must be a JSON object, got {type(parsed).__name__}"
            return ToolCall(id=call_id, name=name, arguments={}, problem=problem)
        return ToolCall(id=call_id, name=name, arguments=parsed)


def _usage(raw: Any) -> Usage | None:
    if raw is None:
        return None
    return Usage(
        input_tokens=int(getattr(raw, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(raw, "completion_tokens", 0) or 0),
    )


def _generated(chunk: Any) -> int:
    """Characters of generated text a streamed chunk carries: content and tool arguments."""
    size = 0
    for choice in chunk.choices or []:
        delta = choice.delta
        if delta is not None:
            size += len(delta.content or "")
            for tc in delta.tool_calls or []:
                size += len(tc.function.arguments or "") if tc.function is not None else 0
    return size
