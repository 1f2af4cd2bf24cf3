"""Server capability profiles and the structured-output ladder (issue 21): the logic, and
the OpenAI provider against the local wire server (OpenAI's exact wire), where a real small
model cannot show it.  The real server is in ``tests/real_model``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import wire_provider
from wire_server import Reply, WireServer

from openprogram import create_runtime, session_context
from openprogram.agentic_programming.validate import extract_json
from openprogram.errors import UnsupportedParameter
from openprogram.providers import capabilities
from openprogram.providers.base import LLMRequest
from openprogram.providers.capabilities import unsupported_parameter
from openprogram.usage.prices import clear_prices, price_call, set_price

LLAMA_500 = (
    "1 validation error: {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
    "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"
)
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.fixture(autouse=True)
def fresh(wire_server: WireServer) -> Iterator[None]:
    capabilities.forget_profiles(wire_server.openai_base_url)  # this module's server only
    clear_prices()
    yield
    capabilities.forget_profiles(wire_server.openai_base_url)
    clear_prices()


def test_an_error_body_that_refuses_a_parameter_names_it() -> None:
    assert unsupported_parameter(LLAMA_500) == "response_format"
    assert unsupported_parameter("Unrecognized request argument supplied: seed") == "seed"
    assert unsupported_parameter("the server is overloaded") is None
    assert unsupported_parameter("response_format was fine, the model crashed") is None


def test_the_ladder_steps_down_to_prompted_and_stops() -> None:
    assert capabilities.step_down("native") == "json_object"
    assert capabilities.step_down("json_object") == "prompted"
    assert capabilities.step_down("prompted") is None
    with pytest.raises(ValueError, match="choose one of native, json_object, prompted"):
        capabilities.checked_mode("tools")


def test_json_is_parsed_as_real_models_write_it() -> None:
    assert extract_json('{"a": "line one\nline two"}') == {"a": "line one\nline two"}
    assert extract_json('Sure!\n```json\n{"n": 3}\n```\nDone.') == {"n": 3}
    assert extract_json('Here it is: {"n": 4} hope that helps') == {"n": 4}
    with pytest.raises(ValueError):
        extract_json("no json here")


def test_a_refused_json_schema_steps_down_once_without_retries(
    wire_server: WireServer, op_home: Path
) -> None:
    wire_server.reply(
        Reply(status=500, error_message=LLAMA_500),
        Reply(text='{"n": 1}'),
        Reply(text='{"n": 2}'),
    )
    provider = wire_provider("openai", wire_server, model="local")
    with session_context(runtime=create_runtime(provider)):
        first = create_runtime(provider).exec("a number", response_format=SCHEMA)
        second = create_runtime(provider).exec("another", response_format=SCHEMA)
    assert (first, second) == ({"n": 1}, {"n": 2})
    bodies: list[dict[str, Any]] = [r.body for r in wire_server.requests]
    assert [b["response_format"]["type"] for b in bodies] == [
        "json_schema",
        "json_object",  # the 500 was not retried as transient
        "json_object",  # remembered for this server
    ]
    assert bodies[1]["response_format"]["schema"] == SCHEMA
    assert '"n"' in bodies[1]["messages"][0]["content"]  # the schema in the prompt too
    assert all(b["max_tokens"] for b in bodies)


def test_a_server_that_refuses_every_mode_is_not_asked_forever(
    wire_server: WireServer, op_home: Path
) -> None:
    refused = Reply(status=400, error_message="response_format is not supported")
    wire_server.reply(refused, refused)
    provider = wire_provider("openai", wire_server, model="local")
    wire_server.reply(Reply(text='{"n": 5}'))
    reply = provider.complete(
        LLMRequest([{"role": "user", "content": "n"}], response_format=SCHEMA)
    )
    assert reply.metadata["output_mode"] == "prompted"
    assert len(reply.metadata["output_refused"]) == 2
    assert "response_format" not in wire_server.requests[-1].body
    wire_server.reset()
    wire_server.reply(Reply(status=400, error_message="seed is not supported"))
    with pytest.raises(UnsupportedParameter, match="'seed'"):
        provider.complete(LLMRequest([{"role": "user", "content": "n"}], extra={"seed": 1}))


def test_a_custom_base_url_is_unpriced_unless_the_user_prices_it() -> None:
    assert price_call("gpt-4o-mini", "openai", 1000, 100) is not None
    assert price_call("gpt-4o-mini", "openai", 1000, 100, vendor_endpoint=False) is None
    set_price("gpt-4o-mini", 1.0, 1.0)  # the owner of a self-hosted copy priced it
    assert price_call("gpt-4o-mini", "openai", 1000, 0, vendor_endpoint=False) == 0.001


def test_a_refusal_before_a_timeout_is_still_on_the_node_after_the_retry(
    wire_server: WireServer, op_home: Path
) -> None:
    """json_schema refused, the json_object request fails transiently (a slow local model
    timing out) and the retry, which starts in json_object, succeeds: the call's node
    still records the refusal and the retry."""
    wire_server.reset()
    wire_server.reply(
        Reply(status=500, error_message=LLAMA_500),
        Reply(status=503, error_message="the server is overloaded"),
        Reply(text='{"n": 7}'),
    )
    provider = wire_provider("openai", wire_server, model="local")
    runtime = create_runtime(provider)
    runtime.sleep = lambda _s: None  # (the backoff's wait is not what is tested)
    with session_context(runtime=runtime) as handle:
        assert runtime.exec("a number", response_format=SCHEMA) == {"n": 7}
    session = handle.db.open(handle.session_id)
    node = next(n for n in session.nodes() if n.kind == "llm")
    bodies: list[dict[str, Any]] = [r.body for r in wire_server.requests]
    assert [b["response_format"]["type"] for b in bodies] == [
        "json_schema",
        "json_object",
        "json_object",
    ]
    assert node.metadata["output_mode"] == "json_object"
    assert len(node.metadata["output_refused"]) == 1
    assert node.metadata["output_refused"][0].startswith("native: ")  # json_schema refused
    assert len(node.metadata["retries"]) == 1
