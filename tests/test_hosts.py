"""Hosts (``openprogram/hosts.py``): what runs the engine claims the calls made outside any
turn.  A registered host's scope makes such a call a turn of the host's session; a host
that returns None passes the call on; the runtime a host names reaches turns entered
without one; an unregistered host, or the object of a bound method that is gone, is not
asked."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

from openprogram import agentic_function, create_runtime, session_context
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.runtime import Runtime
from openprogram.hosts import (
    adhoc_turn,
    register_bare_call_host,
    register_default_runtime,
    unregister_bare_call_host,
    unregister_default_runtime,
)
from openprogram.providers.base import LLMResponse
from openprogram.providers.test import FunctionProvider


@agentic_function
def triage(ticket: str, runtime: Runtime | None = None) -> str:
    """Classify the ticket."""
    assert runtime is not None
    return str(runtime.exec(ticket))


def answering(reply: str) -> Runtime:
    return create_runtime(FunctionProvider(lambda request: LLMResponse(reply)), backoff=0.0)


class Notebook:
    """A host: the calls made while a cell "runs" are turns of the notebook's session."""

    def __init__(self, session_id: str, runtime: Runtime) -> None:
        self.session_id, self.runtime = session_id, runtime
        self.running = False
        self.asked: list[str] = []

    def claim(self, label: str) -> AbstractContextManager[Any] | None:
        self.asked.append(label)
        return self.turn(label) if self.running else None

    @contextmanager
    def turn(self, label: str) -> Iterator[None]:
        with session_context(self.session_id, runtime=self.runtime, message=label):
            yield


@pytest.fixture
def notebook() -> Iterator[Notebook]:
    nb = Notebook("nb_hosted", answering("bug"))
    register_bare_call_host(nb.claim)
    try:
        yield nb
    finally:
        unregister_bare_call_host(nb.claim)


def test_a_call_outside_any_turn_is_a_turn_of_the_host_that_claims_it(notebook: Notebook) -> None:
    notebook.running = True
    assert triage("crash on save") == "bug"
    assert notebook.asked == ["triage"]
    nodes = default_db().open("nb_hosted").nodes()
    (frame,) = [n for n in nodes if n.name == "triage"]
    assert [n.caller for n in nodes if n.kind == "llm"] == [frame.id]


def test_a_host_that_passes_leaves_the_call_to_the_ad_hoc_session(notebook: Notebook) -> None:
    notebook.running = False
    source = lambda: answering("feature")  # noqa: E731
    register_default_runtime(source)
    try:
        assert triage("add dark mode") == "feature"  # the host's runtime reached the turn
    finally:
        unregister_default_runtime(source)
    assert notebook.asked == ["triage"] and not default_db().exists("nb_hosted")
    with adhoc_turn("by hand", answering("question")) as handle:
        assert triage("how do I export?") == "question"
    assert handle.session_id != "nb_hosted"


def test_an_unregistered_host_and_a_gone_one_are_not_asked() -> None:
    nb = Notebook("nb_gone", answering("bug"))
    nb.running = True
    register_bare_call_host(nb.claim)
    unregister_bare_call_host(nb.claim)
    other = Notebook("nb_weak", answering("bug"))
    other.running = True
    register_bare_call_host(other.claim)  # a bound method: held weakly
    del other
    gc.collect()
    source = lambda: answering("bug")  # noqa: E731
    register_default_runtime(source)
    try:
        assert triage("crash") == "bug"  # outside any turn: the ad-hoc session's
    finally:
        unregister_default_runtime(source)
    assert nb.asked == []
    assert not default_db().exists("nb_gone") and not default_db().exists("nb_weak")
