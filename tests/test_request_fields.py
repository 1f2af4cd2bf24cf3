"""What a request asks for besides its messages, as the ``llm`` node records it
(``agentic_programming/request_fields.py``): the settings the calling code passed, and
never the transport, the streaming or a credential."""

from __future__ import annotations

from pathlib import Path

from openprogram import create_runtime, session_context
from openprogram.agentic_programming.provider import LLMRequest
from openprogram.agentic_programming.request_fields import request_settings
from openprogram.providers.test import TestProvider
from openprogram.store.session.store import SessionStore


def test_only_what_the_code_asked_for_is_kept() -> None:
    request = LLMRequest(
        messages=[{"role": "user", "content": "hi"}],
        model="m",
        temperature=0.0,
        stream=True,
        timeout=30.0,
        tool_choice="auto",
        extra={"seed": 1, "base_url": "http://x", "api_key": "sk-secret"},
    )
    assert request_settings(request) == {"tool_choice": "auto", "temperature": 0.0, "seed": 1}
    assert request_settings(LLMRequest(messages=[])) == {}


def test_the_llm_node_records_the_settings_of_the_call(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "home")
    runtime = create_runtime(TestProvider())
    try:
        with session_context("nb_fields", db=store, runtime=runtime):
            runtime.exec("label this", choices=["bug", "feature"], temperature=0, seed=7)
        (node,) = [n for n in store.open("nb_fields").nodes() if n.kind == "llm"]
    finally:
        store.close()
    recorded = node.metadata["request"]
    assert recorded["temperature"] == 0 and recorded["seed"] == 7
    assert recorded["choices"] == ["bug", "feature"]
