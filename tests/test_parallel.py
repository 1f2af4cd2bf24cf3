"""``ContextThreadPoolExecutor`` (``agentic_programming/parallel.py``): agentic calls made on
its threads land in the current turn, under the function that submitted them, with the
ambient runtime — where a plain ``ThreadPoolExecutor``'s would know none of it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from openprogram import agentic_function, create_runtime, session_context
from openprogram.agentic_programming.parallel import ContextThreadPoolExecutor
from openprogram.agentic_programming.runtime import Runtime
from openprogram.errors import NoProviderConfigured
from openprogram.providers.test import TestProvider
from openprogram.store.session.store import SessionStore


@agentic_function
def label(text: str, runtime: Runtime | None = None) -> str:
    """Label the text."""
    assert runtime is not None
    return runtime.exec(text)


@agentic_function
def label_all(texts: list[str], pool: type[ThreadPoolExecutor]) -> list[str]:
    """Label every text on threads."""
    with pool(max_workers=3) as executor:
        return list(executor.map(label, texts))


def test_calls_on_its_threads_land_under_the_submitting_function(tmp_path: Path) -> None:
    provider = TestProvider()
    store = SessionStore(tmp_path / "home")
    try:
        with session_context("nb_parallel", db=store, runtime=create_runtime(provider)):
            assert len(label_all(["a", "b", "c"], ContextThreadPoolExecutor)) == 3
        nodes = store.open("nb_parallel").nodes()
    finally:
        store.close()
    (parent,) = [n for n in nodes if n.name == "label_all"]
    children = [n for n in nodes if n.name == "label"]
    assert len(children) == 3 and {n.caller for n in children} == {parent.id}
    assert len(provider.requests) == 3


def test_a_plain_thread_pool_loses_the_runtime(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "home")
    try:
        with (
            session_context("nb_plain", db=store, runtime=create_runtime(TestProvider())),
            pytest.raises(NoProviderConfigured),  # the thread knows no runtime
        ):
            label_all(["a"], ThreadPoolExecutor)
    finally:
        store.close()
