"""The prompt of an exec and the prompt an ``llm`` node sent
(``agentic_programming/prompt.py``): a later turn's call sees the earlier turns, the node
stores only its own messages, and the whole prompt is rebuilt from the session exactly as
the provider received it."""

from __future__ import annotations

from pathlib import Path

from openprogram import create_runtime, session_context
from openprogram.agentic_programming.prompt import build_prompt, sent_messages
from openprogram.context.policy import ContextPolicy
from openprogram.providers.test import TestProvider
from openprogram.store.session.store import SessionStore


def test_the_prompt_an_llm_node_sent_is_rebuilt_as_the_provider_received_it(
    tmp_path: Path,
) -> None:
    provider = TestProvider()
    runtime = create_runtime(provider)
    store = SessionStore(tmp_path / "home")
    try:
        for question in ("What is a bug?", "And a feature?"):
            with session_context("nb_prompt", db=store, runtime=runtime):
                runtime.exec(question)
        session = store.open("nb_prompt")
        first, second = [n for n in session.nodes() if n.kind == "llm"]
        assert sent_messages(session, first) == provider.requests[0].messages
        assert sent_messages(session, second) == provider.requests[1].messages
        seen = str(provider.requests[1].messages)
        assert "What is a bug?" in seen and "And a feature?" in seen
        assert "What is a bug?" not in str(second.metadata["messages"])  # named, not copied

        with_history = build_prompt(session, None, "One more?")
        without = build_prompt(session, None, "One more?", ContextPolicy(turns=0))
    finally:
        store.close()
    assert "And a feature?" in str(with_history.messages)
    assert "And a feature?" not in str(without.messages)
    assert without.messages[-1]["content"] == "One more?"
