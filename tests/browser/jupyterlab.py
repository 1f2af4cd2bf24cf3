"""A loopback JupyterLab server and a Playwright Chromium page, for real browser tests.

Used through the fixtures in ``tests/browser/conftest.py`` (``lab_server``, ``notebook_dir``,
``lab``); this module holds the machinery so it can also be driven by hand::

    with LabServer.start(root_dir=tmp) as server, chromium() as browser:
        page = browser.new_page()
        lab = LabPage(page, server)
        lab.open_notebook("nb.ipynb"); lab.wait_kernel_idle(); lab.run_cell(0)

How the server finds the ``openprogram-jupyter`` extension
----------------------------------------------------------
The extension is prebuilt into ``openprogram_magics/labextension`` and a *regular* ``pip
install`` copies it to ``<prefix>/share/jupyter/labextensions/openprogram-jupyter``
(hatch shared-data); hatchling's editable install (``pip install -e .``, what ``.ci/run``
does) copies it too, but a copy goes stale as soon as the extension is rebuilt. So the server is
started with ``JUPYTER_PATH=<tmp>/jupyter_path`` where
``<tmp>/jupyter_path/labextensions/openprogram-jupyter`` is a symlink to the
``labextension`` folder next to the imported ``openprogram_magics`` package. JUPYTER_PATH
entries come first in jupyter_core's search path, so this copy wins over any installed
one (jupyterlab_server keeps the first extension of a given name it finds). The kernels the
server starts inherit ``PYTHONPATH`` with the directory holding that same
``openprogram_magics``, so the browser and the kernel run the code under test.
:meth:`LabPage.assert_extension_under_test` checks the page loaded exactly this build.

Isolation: each server gets its own ``JUPYTER_CONFIG_DIR``, ``JUPYTER_DATA_DIR``,
``JUPYTER_RUNTIME_DIR``, ``JUPYTERLAB_SETTINGS_DIR``, ``JUPYTERLAB_WORKSPACES_DIR``,
``IPYTHONDIR`` and ``OPENPROGRAM_HOME`` under a temp dir, listens on 127.0.0.1 only with a
random token, and is stopped by its own PID. ``--allow-root`` is passed when running as
root (it exits otherwise). The app is exposed as ``window.jupyterapp``
(``expose_app_in_browser``) so tests may call ``LabPage.command()``; prefer driving the
real UI for what a user does.

The same server also serves Notebook 7 (``/notebooks/<path>``, see
:meth:`LabServer.notebook_url` and :class:`NotebookPage`).

Timing on a 2-core machine: server up in ~2 s; a page load with a fresh kernel 4-5 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.waiting import until

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
EXTENSION_NAME = "openprogram-jupyter"
#: User settings of every test server, as <settings dir>/<pkg>/<plugin>.jupyterlab-settings.
USER_SETTINGS: dict[str, dict[str, Any]] = {
    "@jupyterlab/apputils-extension:notification": {
        "checkForUpdates": False,
        "fetchNews": "false",
    },
}
#: Selector for the visible notebook (``?reset`` + this keeps restored tabs out of the way).
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"


def extension_source() -> Path:
    """The built extension folder next to the ``openprogram_magics`` being imported."""
    import openprogram_magics

    paths = list(getattr(openprogram_magics, "__path__", []))
    for p in paths:
        candidate = Path(p) / "labextension"
        if (candidate / "package.json").is_file():
            return candidate
    raise FileNotFoundError(f"no built labextension under {paths}; `jlpm build` in labextension/")


def browser_skip_reason() -> str | None:
    """Why browser tests cannot run here, or None if they can."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install -y chromium; never `playwright install`)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "python package playwright is not installed"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LabServer:
    """A running ``jupyter lab`` process serving ``root_dir`` on 127.0.0.1."""

    root_dir: Path
    base: Path
    port: int
    token: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    env: dict[str, str] = field(repr=False, default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def lab_url(self, path: str = "", *, reset: bool = True) -> str:
        """URL opening ``path`` (relative to root_dir) in the Lab UI, token included."""
        tree = f"lab/tree/{quote(path)}" if path else "lab"
        return f"{self.url}{tree}?{'reset&' if reset else ''}token={self.token}"

    def notebook_url(self, path: str) -> str:
        """URL opening ``path`` in Notebook 7 (``/notebooks/<path>``), token included.

        The ``notebook`` package is a jupyter-server extension: the ``jupyter lab`` process
        serves its pages (``/tree``, ``/notebooks/...``) beside Lab's, with the same
        labextensions (so the same ``openprogram-jupyter`` build) and kernels.
        """
        return f"{self.url}notebooks/{quote(path)}?token={self.token}"

    def api(self, endpoint: str, method: str = "GET", body: Any = None) -> Any:
        """Call the REST API (e.g. ``api("api/sessions")``); returns decoded JSON or None."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.url}{endpoint}",
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    @property
    def openprogram_home(self) -> Path:
        """``OPENPROGRAM_HOME`` of the kernels this server starts (sessions live here)."""
        return Path(self.env["OPENPROGRAM_HOME"])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @classmethod
    @contextlib.contextmanager
    def start(
        cls, root_dir: Path, *, timeout: float = 60, extra_env: dict[str, str] | None = None
    ) -> Iterator[LabServer]:
        """Start a server for ``root_dir``; stop it (and its kernels) on exit.

        Kernels inherit the server's environment: ``OPENPROGRAM_HOME`` is
        ``<tmp>/openprogram_home`` (see :attr:`openprogram_home`) unless ``extra_env``
        (applied last) says otherwise.
        """
        base = Path(tempfile.mkdtemp(prefix="oplab-"))
        jpath = base / "jupyter_path"
        (jpath / "labextensions").mkdir(parents=True)
        (jpath / "labextensions" / EXTENSION_NAME).symlink_to(extension_source())
        # User settings live in our private JUPYTERLAB_SETTINGS_DIR: e.g. no news toast.
        for plugin_id, values in USER_SETTINGS.items():
            pkg, plugin = plugin_id.split(":")
            target = base / "settings" / pkg / f"{plugin}.jupyterlab-settings"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(values))
        pkg_parent = str(extension_source().parent.parent)
        env = dict(os.environ)
        env.update(
            JUPYTER_PATH=str(jpath),
            JUPYTER_CONFIG_DIR=str(base / "config"),
            JUPYTER_DATA_DIR=str(base / "data"),
            JUPYTER_RUNTIME_DIR=str(base / "runtime"),
            JUPYTERLAB_SETTINGS_DIR=str(base / "settings"),
            JUPYTERLAB_WORKSPACES_DIR=str(base / "workspaces"),
            IPYTHONDIR=str(base / "ipython"),
            PYTHONPATH=os.pathsep.join(filter(None, [pkg_parent, env.get("PYTHONPATH")])),
            JUPYTER_PLATFORM_DIRS="1",
            OPENPROGRAM_HOME=str(base / "openprogram_home"),
        )
        env.update(extra_env or {})
        for k in ("JPY_SESSION_NAME", "JUPYTER_TOKEN", "JPY_PARENT_PID"):
            env.pop(k, None)
        port, token = _free_port(), secrets.token_hex(16)
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--port-retries=0",
            f"--ServerApp.token={token}",
            f"--ServerApp.root_dir={root_dir}",
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.expose_app_in_browser=True",
            "--JupyterNotebookApp.expose_app_in_browser=True",  # Notebook 7 pages too
            "--ServerApp.shutdown_no_activity_timeout=0",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        log_path = base / "server.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd, cwd=root_dir, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        server = cls(root_dir, base, port, token, proc, log_path, env)
        try:
            server._wait_ready(timeout)
            yield server
        finally:
            server.stop()
            shutil.rmtree(base, ignore_errors=True)

    def _wait_ready(self, timeout: float) -> None:
        def answers() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited {self.proc.returncode}:\n{self.log()}")
            try:
                self.api("api/status")
                return True
            except (urllib.error.URLError, OSError, ValueError):
                return False

        if not until(answers, timeout):
            raise TimeoutError(f"jupyter lab not ready after {timeout}s:\n{self.log()}")

    def shutdown_notebook_kernels(self, path: str) -> None:
        """Delete the server sessions (so the kernels) of notebook ``path`` (root-relative)."""
        with contextlib.suppress(Exception):
            for s in self.api("api/sessions") or []:
                if s.get("path") == path:
                    self.api(f"api/sessions/{s['id']}", method="DELETE")

    def stop(self) -> None:
        """Shut down kernels via the API, then terminate our own process by PID."""
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                for k in self.api("api/kernels") or []:
                    self.api(f"api/kernels/{k['id']}", method="DELETE")
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Debian Chromium driven by Playwright (yields a ``Browser``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


def nbconvert_html(server: LabServer, notebook: Path) -> Path:
    """``jupyter nbconvert --to html`` of ``notebook`` (with ``server``'s environment); the
    HTML file it wrote."""
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", str(notebook)],
        capture_output=True,
        text=True,
        timeout=120,
        env=server.env,
    )
    assert proc.returncode == 0, proc.stderr
    return notebook.with_suffix(".html")


def write_notebook(path: Path, cells: list[str], metadata: dict[str, Any] | None = None) -> Path:
    """Write a minimal nbformat 4.5 notebook with python3 kernelspec and code ``cells``."""
    nb_meta: dict[str, Any] = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    nb_meta.update(metadata or {})
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": nb_meta,
        "cells": [
            {
                "cell_type": "code",
                "id": f"cell-{i}",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": src,
            }
            for i, src in enumerate(cells)
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1) + "\n")
    return path


class LabPage:
    """Helpers for one Playwright ``Page`` showing JupyterLab from ``server``.

    All selectors are scoped to the visible notebook (:data:`NOTEBOOK`). Timeouts are in ms.
    """

    def __init__(self, page: Any, server: LabServer) -> None:
        self.page = page
        self.server = server

    # -- navigation -----------------------------------------------------------------
    def open_notebook(self, path: str, timeout: float = 60_000) -> None:
        """Load Lab with ``path`` open (``?reset`` drops restored tabs)."""
        self.page.goto(self.server.lab_url(path), wait_until="domcontentloaded")
        self.page.wait_for_selector(f"{NOTEBOOK} .jp-Cell", timeout=timeout)

    def wait_kernel_session(self, timeout: float = 60_000) -> str:
        """Wait until the current notebook has a kernel connection (any status); return it.

        Earlier, JupyterLab's status bar may already show the *pending* kernel's name
        ("Python 3 (ipykernel) | Connecting") while ``sessionContext.hasNoKernel`` is still
        true; running cells then makes JupyterLab start/select a kernel itself and the
        cells may silently not run. Reads ``window.jupyterapp``.
        """
        handle = self.page.wait_for_function(
            """() => {
                const w = window.jupyterapp.shell.currentWidget;
                const k = w && w.sessionContext && w.sessionContext.session
                    && w.sessionContext.session.kernel;
                return k ? k.status : false;
            }""",
            timeout=timeout,
        )
        return str(handle.json_value())

    def wait_kernel_idle(self, timeout: float = 60_000) -> None:
        """Wait for the status bar to read ``... | Idle`` (the kernel exists and is idle).

        The toolbar's execution indicator reads idle before a kernel exists; this does not.
        """
        idle = re.compile(r"\|\s*Idle")
        self.page.locator(".jp-StatusBar-TextItem", has_text=idle).first.wait_for(timeout=timeout)

    # -- cells ----------------------------------------------------------------------
    def cell(self, index: int) -> Any:
        return self.page.locator(f"{NOTEBOOK} .jp-Cell").nth(index)

    def run_cell(self, index: int, timeout: float = 30_000) -> str:
        """Select cell ``index``, Shift+Enter, wait for its ``[n]`` prompt; return its output."""
        cell = self.cell(index)
        cell.locator(".jp-InputPrompt").click()
        self.page.keyboard.press("Shift+Enter")
        cell.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]")).wait_for(timeout=timeout)
        return self.output_text(index)

    def run_cell_expect(self, index: int, execution_count: int, timeout: float = 30_000) -> str:
        """Select cell ``index``, Shift+Enter, wait for exactly ``[execution_count]``.

        Safer than :meth:`run_cell` when the cell still shows an old ``[n]`` (after a
        kernel restart or a reopen): only the new count satisfies the wait.  Returns the
        cell's output text.
        """
        cell = self.cell(index)
        cell.locator(".jp-InputPrompt").click()
        self.page.keyboard.press("Shift+Enter")
        cell.locator(".jp-InputPrompt", has_text=f"[{execution_count}]").wait_for(timeout=timeout)
        return self.output_text(index)

    def output_text(self, index: int) -> str:
        out = self.cell(index).locator(".jp-OutputArea-output")
        return "\n".join(out.all_inner_texts())

    def wait_output(self, index: int, pattern: str, timeout: float = 30_000) -> str:
        """Wait until cell ``index``'s output matches regex ``pattern``; return the text."""
        loc = self.cell(index).locator(".jp-OutputArea-output", has_text=re.compile(pattern))
        loc.first.wait_for(timeout=timeout)
        return self.output_text(index)

    def run_all(self) -> None:
        """Menu Run > Run All Cells (the real UI path)."""
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        self.page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()

    # -- saving ---------------------------------------------------------------------
    def save(self, timeout: float = 30_000) -> None:
        """Escape, Control+s, then wait until no ``.jp-mod-dirty`` remains."""
        self.page.locator(NOTEBOOK).first.click(position={"x": 5, "y": 5})
        self.page.keyboard.press("Escape")
        self.page.keyboard.press("Control+s")
        self.page.wait_for_function(
            "() => document.querySelectorAll('.jp-mod-dirty').length === 0", timeout=timeout
        )

    def is_dirty(self) -> bool:
        return bool(self.page.locator(".jp-mod-dirty").count())

    # -- app access (window.jupyterapp) ---------------------------------------------
    def command(self, command_id: str, args: dict[str, Any] | None = None) -> None:
        """Start a JupyterLab command, e.g. ``notebook:restart-run-all``; do not wait for it.

        Commands that open a dialog resolve only when it closes, so this never awaits the
        result (``page.evaluate`` has no timeout): wait on the UI instead.
        """
        self.page.evaluate(
            "([id, args]) => { void window.jupyterapp.commands.execute(id, args); }",
            [command_id, args or {}],
        )

    def accept_dialog(self, timeout: float = 30_000) -> None:
        """Click the accept button of the open dialog (e.g. "Restart")."""
        self.page.locator(".jp-Dialog .jp-mod-accept").click(timeout=timeout)

    def notebook_metadata(self, key: str) -> Any:
        """The current (unsaved) model's top-level ``metadata[key]`` in the browser."""
        return self.page.evaluate(
            """(key) => {
                const w = window.jupyterapp.shell.currentWidget;
                return w && w.model ? w.model.getMetadata(key) ?? null : null;
            }""",
            key,
        )

    def loaded_extensions(self) -> dict[str, dict[str, Any]]:
        """Federated extensions the page was configured with: ``{name: {"load": ...}}``."""
        return self.page.evaluate(
            """() => {
                const el = document.getElementById('jupyter-config-data');
                const cfg = el ? JSON.parse(el.textContent) : {};
                return Object.fromEntries((cfg.federated_extensions || []).map(e => [e.name, e]));
            }"""
        )

    def assert_extension_under_test(self) -> None:
        """The page loaded ``openprogram-jupyter`` from the build under test (same hash)."""
        built = json.loads((extension_source() / "package.json").read_text())
        want = built["jupyterlab"]["_build"]["load"]
        got = self.loaded_extensions().get(EXTENSION_NAME)
        assert got is not None, f"{EXTENSION_NAME} not loaded: {self.loaded_extensions()}"
        assert got.get("load") == want, f"stale {EXTENSION_NAME}: page has {got}, build {want}"

    def screenshot(self, name: str, directory: str | Path = "/tmp") -> Path:
        path = Path(directory) / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


class NotebookPage(LabPage):
    """:class:`LabPage` for Notebook 7's single-document page (``/notebooks/<path>``).

    Same cell selectors and keyboard paths; Notebook 7 has no status bar, so kernel state
    and the dirty flag are read from ``window.jupyterapp`` (exposed by the server flag
    ``JupyterNotebookApp.expose_app_in_browser``).
    """

    def open_notebook(self, path: str, timeout: float = 60_000) -> None:
        self.page.goto(self.server.notebook_url(path), wait_until="domcontentloaded")
        self.page.wait_for_selector(f"{NOTEBOOK} .jp-Cell", timeout=timeout)

    def app_name(self) -> str:
        return str(self.page.evaluate("() => window.jupyterapp && window.jupyterapp.name"))

    def wait_kernel_idle(self, timeout: float = 60_000) -> None:
        self.page.wait_for_function(
            """() => {
                const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
                const k = w && w.sessionContext && w.sessionContext.session
                    && w.sessionContext.session.kernel;
                return !!k && k.status === 'idle';
            }""",
            timeout=timeout,
        )

    def save(self, timeout: float = 30_000) -> None:
        """Escape, Control+s, then wait until the document model is no longer dirty."""
        self.page.locator(NOTEBOOK).first.click(position={"x": 5, "y": 5})
        self.page.keyboard.press("Escape")
        self.page.keyboard.press("Control+s")
        self.page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.context.model.dirty === false",
            timeout=timeout,
        )

    def is_dirty(self) -> bool:
        return bool(
            self.page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty")
        )
