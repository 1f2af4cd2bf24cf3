"""Fixtures for real-browser tests: JupyterLab on loopback + headless Debian Chromium.

Fixtures (see ``jupyterlab.py`` for how the server finds the ``openprogram-jupyter``
extension and how it is isolated):

- ``lab_server`` (session): a running :class:`LabServer` whose root is a temp dir. Its
  kernels use ``lab_server.openprogram_home``, shared by all browser tests of the session
  (the per-test ``op_home`` of tests/conftest.py does not reach the kernels).
- ``notebook_dir`` (function): a fresh sub-directory of the server root; returns
  ``(abs_path, rel_path)``; write notebooks there with ``write_notebook``.
- ``chromium_browser`` (session): a Playwright ``Browser`` on /usr/bin/chromium.
- ``lab`` (function): a :class:`LabPage` on a fresh browser context. On failure a full-page
  screenshot goes to ``/tmp/<test name>.png`` and the browser console plus the server log
  tail are printed.

Every test under ``tests/browser`` is marked ``browser`` and skipped, with the reason,
when /usr/bin/chromium or the playwright package is missing. Select or deselect them with
``-m browser`` / ``-m "not browser"``.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from .jupyterlab import LabPage, LabServer, browser_skip_reason, chromium

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark (or skip) the browser tests, and run them last: Playwright's sync API keeps an
    event loop running in the main thread until the session ends, which would break every
    later test that starts its own loop (``asyncio.run``, top-level ``await``).  A test
    elsewhere marked ``browser`` (a story whose one step is in a browser) runs just before
    them: it starts and stops its own Playwright, which cannot start inside the session's."""
    reason = browser_skip_reason()
    browser: list[pytest.Item] = []
    elsewhere: list[pytest.Item] = []  # they start and stop their own Playwright: before ours
    others: list[pytest.Item] = []
    for item in items:
        here = _HERE in Path(str(item.fspath)).resolve().parents
        if here or item.get_closest_marker("browser") is not None:
            item.add_marker(pytest.mark.browser)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
            (browser if here else elsewhere).append(item)
        else:
            others.append(item)
    items[:] = others + elsewhere + browser


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[Any]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    setattr(item, f"rep_{report.when}", report)  # read by the ``lab`` fixture on teardown
    return report


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("labroot")
    with LabServer.start(root_dir=root) as server:
        yield server


@pytest.fixture
def notebook_dir(lab_server: LabServer, request: pytest.FixtureRequest) -> tuple[Path, str]:
    rel = request.node.name.replace("[", "_").replace("]", "_")
    path = lab_server.root_dir / rel
    path.mkdir(parents=True, exist_ok=True)
    return path, rel


@pytest.fixture(scope="session")
def chromium_browser() -> Iterator[Any]:
    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)
    with chromium() as browser:
        yield browser


@pytest.fixture
def lab(
    lab_server: LabServer, chromium_browser: Any, request: pytest.FixtureRequest
) -> Iterator[LabPage]:
    context = chromium_browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda msg: console.append(f"[{msg.type}] {msg.text}"))
    page.on("pageerror", lambda err: console.append(f"[pageerror] {err}"))
    lab_page = LabPage(page, lab_server)
    lab_page.console = console  # type: ignore[attr-defined]
    try:
        yield lab_page
    finally:
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            try:
                shot = lab_page.screenshot(request.node.name)
                print(f"\nscreenshot: {shot}")
            except Exception as exc:
                print(f"\nscreenshot failed: {exc}")
            print("browser console:\n" + "\n".join(console[-50:]))
            print("server log tail:\n" + "\n".join(lab_server.log().splitlines()[-40:]))
        context.close()
