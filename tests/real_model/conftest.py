"""The real model's fixtures: one llama-cpp-python server per test session (skipped, with
the command to run, when ``tests/real_model/setup.sh`` has not installed it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from real_server import RealServer, missing, start

from openprogram.providers import capabilities


@pytest.fixture(scope="session")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    why = missing()
    if why is not None:
        pytest.skip(why)
    server = start(tmp_path_factory.mktemp("llama-server"))
    _started.append(server)
    try:
        yield server
    finally:
        server.stop()


_started: list[RealServer] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test that failed because the server died says so in one line, not with the
    client's "Server disconnected" / "Connection refused" tracebacks."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and _started and (death := _started[0].death()) is not None:
        report.longrepr = death


@pytest.fixture(autouse=True)
def fresh_profile(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every real-model test learns the server's capabilities from scratch (and does not
    start against a server that has died)."""
    if "real_server" not in request.fixturenames:
        yield
        return
    server: RealServer = request.getfixturevalue("real_server")
    if (death := server.death()) is not None:
        pytest.fail(death, pytrace=False)
    capabilities.forget_profiles(server.base_url)
    yield
    capabilities.forget_profiles(server.base_url)
