"""What a long-lived process keeps of a session it writes to (``store/session/queries.py``'s
parsed-node cache): a kernel running thousands of cells holds a bounded number of nodes."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from openprogram import agentic_function, create_runtime, session_context
from openprogram.context.nodes import Call
from openprogram.providers.test import TestProvider
from openprogram.store.session import queries

CACHE = 8


def test_a_process_writing_turn_after_turn_keeps_a_bounded_number_of_nodes(
    op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every turn adds two nodes (the function, its llm call); once committed they are
    cached like any read node, the least recently used dropped past the cache's bound."""
    monkeypatch.setattr(queries, "NODE_CACHE_MAX", CACHE)
    runtime = create_runtime(TestProvider(keep=1))

    @agentic_function
    def ask(question: str) -> str:
        """Answer the question."""
        return runtime.exec(content=[{"type": "text", "text": question}])

    def alive(ids: set[str]) -> int:
        gc.collect()
        return sum(1 for obj in gc.get_objects() if type(obj) is Call and obj.id in ids)

    for turn in range(6 * CACHE):
        with session_context("s_bounded", runtime=runtime) as handle:
            assert ask(f"q{turn}").startswith("[test reply]")
    session = handle.writer.session
    written = {node.id: node.kind for node in session.nodes() if node.kind != "root"}
    assert sorted(written.values()) == sorted(["function", "llm"] * 6 * CACHE)  # all there
    assert alive(set(written)) <= CACHE + 4  # (a few: the last turn's frames, the provider)
