"""Anthropic Messages through the official ``anthropic`` SDK.

Mapping from the provider-neutral :class:`LLMRequest`:

* ``system`` messages -> the ``system`` parameter (all of them joined, see
  :attr:`LLMRequest.system`); they never appear in ``messages``.
* other messages -> ``user`` / ``assistant`` turns.  Anthropic requires strict alternation
  starting with a user turn, so consecutive same-role messages are merged (text joined with
  a blank line, content blocks concatenated) and a leading assistant turn gets a short user
  turn ("Continue.") in front of it.  ``tool`` messages (OpenAI style, with
  ``tool_call_id``) become ``tool_result`` blocks in a user turn; assistant messages with
  ``tool_calls`` become ``tool_use`` blocks.
* ``tools`` ({name, description, parameters}) -> Anthropic tools with ``input_schema``;
  ``tool_choice`` ``auto``/``none``/``required``/a name -> ``{"type": "auto"|"none"|"any"}``
  or ``{"type": "tool", "name": ...}``.
* ``response_format`` (a JSON schema) -> an instruction appended to the system prompt asking
  for a bare JSON value matching the schema.  This works with every model and with
  Anthropic-compatible servers (the native ``output_config.format`` structured-output option
  is model-dependent).  If the model still wraps its answer in a single Markdown code fence,
  the fence is removed from ``LLMResponse.text``.
* ``max_tokens`` defaults to 4096 (Anthropic requires it).

The SDK is imported lazily; its retries are disabled (``max_retries=0``) because the Runtime
retries :class:`TransientProviderError` itself.  Error mapping: rate limits, 5xx/529
overloaded, timeouts, connection failures, an ``overloaded``/``api_error`` event inside a
stream and a stream that ends without ``message_stop`` -> :class:`TransientProviderError`;
every other HTTP status and malformed replies -> :class:`ProviderError`.  Messages never
contain the API key and the mapped error has no ``__cause__``/``__context__`` chain back to
the SDK exception (which holds the request and its auth header).
"""

from __future__ import annotations

import json
import re
from typing import Any

from openprogram.providers.base import (
    DeltaCallback,
    LLMRequest,
    LLMResponse,
    Message,
    ProviderError,
    ToolCall,
    TransientProviderError,
    Usage,
)
from openprogram.providers.sdk import SDKProvider, StreamCap

DEFAULT_MODEL = "claude-sonnet-4-6"
DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 4096

_TRANSIENT_ERROR_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)
_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n(.*?)\n?```\s*$", re.DOTALL)


def response_format_instruction(schema: dict[str, Any]) -> str:
    """The system-prompt text that asks for JSON matching ``schema``."""
    return (
        "Respond with only a JSON value that conforms to the following JSON Schema - no "
        "prose, no Markdown code fences:\n" + json.dumps(schema, indent=2, sort_keys=True)
    )


class AnthropicProvider(SDKProvider):
    """A :class:`~openprogram.providers.base.Provider` for the Anthropic Messages API."""

    name = "anthropic"
    default_model = DEFAULT_MODEL
    default_base_url = DEFAULT_BASE_URL
    api_key_env = "ANTHROPIC_API_KEY"
    base_url_env = "ANTHROPIC_BASE_URL"
    token_envs = ("ANTHROPIC_AUTH_TOKEN",)
    sdk_module = "anthropic"
    sdk_error = "AnthropicError"
    client_errors = (ValueError, TypeError)

    def _make_client(self, api_key: str | None, base_url: str | None) -> Any:
        import anthropic

        return anthropic.Anthropic(
            api_key=api_key,  # None -> the SDK resolves ANTHROPIC_API_KEY etc.
            base_url=base_url,  # None -> the SDK reads ANTHROPIC_BASE_URL
            timeout=self.timeout,
            max_retries=0,
        )

    # -- request ------------------------------------------------------------------------------

    def _params(self, request: LLMRequest) -> dict[str, Any]:
        system = request.system
        if request.response_format is not None:
            instruction = response_format_instruction(request.response_format)
            system = f"{system}\n\n{instruction}" if system else instruction
        params: dict[str, Any] = {
            "model": request.model or self.model,
            "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": to_anthropic_messages(request.messages),
        }
        if system:
            params["system"] = system
        if request.tools:
            params["tools"] = [
                {
                    "name": tool["name"],
                    "description": tool.get("description", ""),
                    "input_schema": tool.get("parameters") or {"type": "object", "properties": {}},
                }
                for tool in request.tools
            ]
            choice = request.tool_choice
            if choice:  # auto / none / required (any tool) / one tool's name
                kinds = {"auto": "auto", "none": "none", "required": "any"}
                kind = kinds.get(choice)
                params["tool_choice"] = {"type": kind} if kind else {"type": "tool", "name": choice}
        if request.temperature is not None:
            # anthropic 2.x dropped `temperature` from the typed signature; the API accepts it.
            params["extra_body"] = {"temperature": request.temperature}
        if request.timeout is not None:
            params["timeout"] = request.timeout
        return params

    def _send(
        self, client: Any, request: LLMRequest, on_delta: DeltaCallback | None
    ) -> LLMResponse:
        params = self._params(request)
        if request.stream or on_delta is not None:
            response = self._stream(client, params, on_delta)
        else:
            response = self._parse_message(client.messages.create(**params))
        if request.response_format is not None:
            response.text = strip_code_fence(response.text)
        return response

    def _map_vendor_error(self, exc: BaseException, detail: str) -> ProviderError | None:
        import anthropic

        if isinstance(exc, anthropic.APIStatusError) and exc.status_code < 400:
            # an `event: error` inside a 200 stream
            if _error_type(exc.body) in _TRANSIENT_ERROR_TYPES:
                return TransientProviderError(f"anthropic: error during stream: {detail}")
            return ProviderError(f"anthropic: error during stream: {detail}")
        return None

    # -- replies ------------------------------------------------------------------------------

    def _parse_message(self, message: Any) -> LLMResponse:
        text: list[str] = []
        tool_calls: list[ToolCall] = []
        for block in message.content or []:
            kind = getattr(block, "type", None)
            if kind == "text":
                text.append(block.text or "")
            elif kind == "tool_use":
                arguments = block.input if block.input is not None else {}
                problem = None
                if not isinstance(arguments, dict):
                    problem = f"the input must be a JSON object, got {type(arguments).__name__}"
                    arguments = {}
                tool_calls.append(ToolCall(block.id, block.name, arguments, problem))
        usage = message.usage
        return LLMResponse(
            text="".join(text),
            tool_calls=tool_calls,
            usage=Usage(
                input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
                output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
            )
            if usage is not None
            else None,
            model=message.model or "",
            finish_reason=message.stop_reason,
        )

    def _stream(
        self, client: Any, params: dict[str, Any], on_delta: DeltaCallback | None
    ) -> LLMResponse:
        text: list[str] = []
        blocks: dict[int, dict[str, Any]] = {}
        usage = Usage()
        saw_usage = False
        model = ""
        stop_reason: str | None = None
        finished = cut = False
        cap = StreamCap(params.get("max_tokens"))  # counting the content's pieces only
        stream = client.messages.create(stream=True, **params)
        try:
            for event in stream:
                kind = getattr(event, "type", None)
                if kind == "content_block_delta" and (cut := cap.exceeded()):
                    stop_reason, finished = "max_tokens", True  # as if it had kept to it
                    saw_usage = False  # (message_start's count is not the reply's: estimated)
                    break
                if kind == "message_start":
                    model = event.message.model or model
                    if event.message.usage is not None:
                        saw_usage = True
                        usage.input_tokens = int(event.message.usage.input_tokens or 0)
                        usage.output_tokens = int(event.message.usage.output_tokens or 0)
                elif kind == "content_block_start":
                    block = event.content_block
                    if getattr(block, "type", None) == "tool_use":
                        blocks[event.index] = {"id": block.id, "name": block.name, "json": ""}
                elif kind == "content_block_delta":
                    delta = event.delta
                    delta_type = getattr(delta, "type", None)
                    if delta_type == "text_delta" and delta.text:
                        cap.chars += len(delta.text)
                        text.append(delta.text)
                        if on_delta is not None:
                            on_delta(delta.text)
                    elif delta_type == "input_json_delta" and event.index in blocks:
                        blocks[event.index]["json"] += delta.partial_json or ""
                        cap.chars += len(delta.partial_json or "")
                elif kind == "message_delta":
                    stop_reason = getattr(event.delta, "stop_reason", None) or stop_reason
                    if event.usage is not None:
                        saw_usage = True
                        if getattr(event.usage, "input_tokens", None):
                            usage.input_tokens = int(event.usage.input_tokens)
                        if event.usage.output_tokens is not None:
                            usage.output_tokens = int(event.usage.output_tokens)
                elif kind == "message_stop":
                    finished = True
        finally:
            stream.close()  # also on KeyboardInterrupt / an exception from on_delta
        if not finished:
            raise TransientProviderError(
                "anthropic: the stream ended before the model finished (no message_stop)"
            )
        tool_calls = [self._tool_call(b) for _, b in sorted(blocks.items())]
        return LLMResponse(
            text="".join(text),
            tool_calls=tool_calls,
            usage=usage if saw_usage else None,
            model=model,
            finish_reason=stop_reason,
            metadata=cap.note() if cut else {},
        )

    def _tool_call(self, block: dict[str, Any]) -> ToolCall:
        """A streamed tool_use; input that cannot be read is ``{}`` with the ``problem``
        named (the tool loop sends it back for the model to fix)."""
        raw, name = block["json"], block["name"]
        if not raw.strip():
            return ToolCall(id=block["id"], name=name, arguments={})
        try:
            parsed = json.loads(raw, strict=False)
        except json.JSONDecodeError as exc:
            problem = f"the input is not valid JSON ({exc.msg}): {self._redact(raw[:200])!r}"
            return ToolCall(id=block["id"], name=name, arguments={}, problem=problem)
        if not isinstance(parsed, dict):
            problem = f"the input must be a JSON object, got {type(parsed).__name__}"
            return ToolCall(id=block["id"], name=name, arguments={}, problem=problem)
        return ToolCall(id=block["id"], name=name, arguments=parsed)


# -- message mapping ------------------------------------------------------------------------


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return [
            dict(b) if isinstance(b, dict) else {"type": "text", "text": str(b)} for b in content
        ]
    text = "" if content is None else str(content)
    return [{"type": "text", "text": text}] if text else []


def _tool_use_blocks(tool_calls: list[Any]) -> list[dict[str, Any]]:
    blocks = []
    for call in tool_calls:
        if isinstance(call, ToolCall):
            call_id, name, arguments = call.id, call.name, call.arguments
        else:
            function = call.get("function") or {}
            call_id = call.get("id", "")
            name = call.get("name") or function.get("name", "")
            arguments = call.get("arguments", function.get("arguments", {}))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError:
                arguments = {"_raw": arguments}
        blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": arguments})
    return blocks


def to_anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Map role/content messages to alternating Anthropic turns (system messages dropped)."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role == "system":
            continue
        if role == "tool":
            role = "user"
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.get("tool_call_id", ""),
                "content": content if isinstance(content, list) else str(content or ""),
            }
            content = [result]
        elif role != "assistant":
            role = "user"
        if role == "assistant" and message.get("tool_calls"):
            content = _blocks(content) + _tool_use_blocks(message["tool_calls"])
        if turns and turns[-1]["role"] == role:
            previous = turns[-1]["content"]
            if isinstance(previous, str) and isinstance(content, str):
                turns[-1]["content"] = f"{previous}\n\n{content}" if previous else content
            else:
                turns[-1]["content"] = _blocks(previous) + _blocks(content)
            continue
        if isinstance(content, list):
            turns.append({"role": role, "content": _blocks(content)})
        else:
            turns.append({"role": role, "content": "" if content is None else str(content)})
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": "Continue."})
    return turns


def strip_code_fence(text: str) -> str:
    """Remove one Markdown code fence wrapped around the whole reply, if any."""
    match = _FENCE.match(text)
    return match.group(1).strip() if match else text


def _error_type(body: object) -> str | None:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            kind = error.get("type")
            return kind if isinstance(kind, str) else None
    return None
