"""Shared fixtures: every test gets its own OPENPROGRAM_HOME and no real model requests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openprogram.providers import network


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Drop the exit handlers of the IPython shells the tests made: each one's reset runs a
    full ``gc.collect()`` of the test process at exit, and a hundred of them kept a finished
    run alive for minutes (nothing they save matters: history and files are ``tmp_path``)."""
    import atexit
    import gc
    import sys

    shell_module = sys.modules.get("IPython.core.interactiveshell")
    if shell_module is None:
        return
    shell_class = shell_module.InteractiveShell
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance reads obj.__class__, which a lazy proxy (the
        # openai SDK's numpy proxy, before 1.60) answers by importing what may be missing
        if issubclass(type(obj), shell_class):
            atexit.unregister(obj.atexit_operations)


def pytest_configure(config: pytest.Config) -> None:
    """The suite presses Ctrl-C (a real SIGINT, ``_thread.interrupt_main``), so it needs
    Python's own handler, which Python does not install when it starts with SIGINT ignored:
    as a shell without job control starts a background job (``pytest &`` in a script,
    ``nohup``).  Every Ctrl-C test then failed "DID NOT RAISE KeyboardInterrupt"."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def ctrl_c_still_works() -> Iterator[None]:
    """Every test leaves Ctrl-C's handler as it found it: one left replaced (a map's "first
    Ctrl-C only stops me" handler, a deferral's) makes every later Ctrl-C of the process do
    nothing - in a kernel, the user's interrupt button.  The test that left it fails here
    (not the next test that presses Ctrl-C), and the handler is put back."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"the test left Ctrl-C's handler replaced: {after!r} (was {before!r})")


@pytest.fixture(autouse=True)
def hosts_end_with_their_test() -> Iterator[None]:
    """A host a test set up (a notebook shell with the extension loaded) is gone after it,
    as a kernel's is when it exits: the shell fixtures clear IPython's instance without
    unloading, and until a collection the extension's magics stayed registered as a host -
    a later test's turn entered without a runtime got the last shell's chosen provider."""
    from openprogram.agentic_programming.function import _hosts
    from openprogram.store.vars import _runtime_sources

    saved = [(registry, list(registry._items)) for registry in (_hosts, _runtime_sources)]
    yield
    for registry, items in saved:
        with registry._lock:
            registry._items = items


@pytest.fixture(autouse=True)
def op_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private ``$OPENPROGRAM_HOME`` (sessions land in ``tmp_path/home/sessions``)."""
    home = tmp_path / "home"
    monkeypatch.setenv("OPENPROGRAM_HOME", str(home))
    for var in (
        "OPENPROGRAM_PROVIDER",
        "OPENPROGRAM_MODEL",
        "OPENPROGRAM_SESSION",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
    ):
        monkeypatch.delenv(var, raising=False)
    with network.allow_model_requests(False):
        yield home
    from openprogram.store.session import store as session_db

    if session_db._db is not None:  # flush what the test left open (no new store created)
        session_db._db.close()


@pytest.fixture(scope="module")
def wire_server() -> Iterator[Any]:
    """One local OpenAI/Anthropic wire server per test module (see ``wire_server.py``)."""
    from wire_server import WireServer

    with WireServer() as srv:
        yield srv


@pytest.fixture
def wire(wire_server: Any) -> Iterator[Any]:
    """The module's wire server with no scripted replies or recorded requests (before and
    after the test), and nothing learnt of it by an earlier test (its capabilities profile)."""
    from openprogram.providers import capabilities

    wire_server.reset()
    capabilities.forget_profiles(wire_server.openai_base_url)
    yield wire_server
    wire_server.reset()
    capabilities.forget_profiles(wire_server.openai_base_url)


@pytest.fixture
def db(op_home: Path):  # type: ignore[no-untyped-def]
    from openprogram.agent.session_db import default_db

    return default_db()


@pytest.fixture
def test_provider():  # type: ignore[no-untyped-def]
    from openprogram.providers.test import TestProvider

    return TestProvider()


@pytest.fixture
def rt(test_provider):  # type: ignore[no-untyped-def]
    from openprogram import create_runtime

    return create_runtime(test_provider, backoff=0.0)


@pytest.fixture
def bare_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An IPython shell with the extension loaded and the test provider (``test_magics.Shell``),
    nothing else defined; cleared afterwards."""
    from IPython.core.interactiveshell import InteractiveShell

    import openprogram_magics.bridge as bridge
    from tests.test_magics import make_shell

    monkeypatch.setattr(bridge, "_state", None)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    sh = make_shell(tmp_path / "ipython")
    try:
        yield sh
    finally:
        InteractiveShell.clear_instance()


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """Two machines: two SessionStores (``OPENPROGRAM_HOME``s), alice's and bob's."""
    from openprogram.store.session.store import SessionStore

    a, b = SessionStore(tmp_path / "alice"), SessionStore(tmp_path / "bob")
    yield a, b
    a.close()
    b.close()
