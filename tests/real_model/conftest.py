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
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def fresh_profile(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every real-model test learns the server's capabilities from scratch."""
    if "real_server" not in request.fixturenames:
        yield
        return
    server: RealServer = request.getfixturevalue("real_server")
    capabilities.forget_profiles(server.base_url)
    yield
    capabilities.forget_profiles(server.base_url)
