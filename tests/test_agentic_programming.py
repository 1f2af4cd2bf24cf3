"""The package's surface (``openprogram.agentic_programming``): what an agentic function
writes with it — ``llm()`` on the ambient runtime, ``current_node()``, ``ask_user`` answered
by the handler in force, and the context-keeping thread pool — lands in the session."""

from __future__ import annotations

from pathlib import Path

from openprogram import create_runtime, session_context
from openprogram.agentic_programming import (
    ContextThreadPoolExecutor,
    agentic_function,
    ask_user,
    current_node,
    get_current_runtime,
    llm,
    using_ask_user_handler,
)
from openprogram.providers.test import TestProvider
from openprogram.store.session.store import SessionStore


@agentic_function
def triage(ticket: str) -> dict[str, object]:
    """Triage a ticket."""
    node = current_node()
    area = ask_user(f"Which area is {ticket!r} in?", choices=["ui", "store"])
    with ContextThreadPoolExecutor(max_workers=2) as pool:
        labels = list(pool.map(llm, [f"label {ticket}", f"rank {ticket}"]))
    return {"node": node.name if node else None, "area": area, "labels": labels}


def test_an_agentic_function_written_with_the_package_records_its_calls(tmp_path: Path) -> None:
    provider = TestProvider()
    runtime = create_runtime(provider)
    store = SessionStore(tmp_path / "home")
    try:
        with (
            session_context("nb_surface", db=store, runtime=runtime),
            using_ask_user_handler(lambda question, choices: "store"),
        ):
            assert get_current_runtime() is runtime
            got = triage("the app crashes on save")
        nodes = store.open("nb_surface").nodes()
    finally:
        store.close()
    assert got["node"] == "triage" and got["area"] == "store"
    assert got["labels"] == [
        "[test reply] label the app crashes on save",
        "[test reply] rank the app crashes on save",
    ]
    (frame,) = [n for n in nodes if n.name == "triage"]
    llm_calls = [n for n in nodes if n.kind == "llm"]
    assert len(llm_calls) == 2 and {n.caller for n in llm_calls} == {frame.id}
    assert get_current_runtime() is None  # the turn is over
