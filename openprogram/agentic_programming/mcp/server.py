"""One MCP server: started on first use, its client session on a background event loop.

The ``mcp`` SDK is async (anyio).  Each :class:`McpServer` runs one asyncio event loop on
a thread of its own; the SDK's ``Client`` is entered there by a *keeper* task that holds it
open until :meth:`McpServer.stop`, and every request (list the tools, call one) is a task
submitted to that loop, waited on synchronously with the server's timeout.  So a tool
call works from any thread, also inside a notebook's kernel, whose own loop is running
(nothing is nested into it).

A server that cannot start, dies during a call or does not answer in ``timeout`` seconds
ends that call with one :class:`~openprogram.errors.McpServerError` line (the server's last
line on stderr when it said something) and is stopped; its next use starts it again.
Stopping closes the server's stdin, then the SDK ends its process group (SIGTERM, SIGKILL).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import tempfile
import threading
from collections.abc import Coroutine
from typing import Any, TextIO

from openprogram.agentic_programming.mcp.spec import ServerSpec
from openprogram.context.secrets import (
    command_secrets,
    redact_command,
    register_secret,
    url_passwords,
)
from openprogram.errors import McpServerError

STOP_WAIT_S = 15.0  # the SDK's own shutdown is bounded (stdin close, SIGTERM, SIGKILL): ~5 s
STDERR_TAIL = 4096  # bytes of the server's stderr read for the one-line error


def _import_sdk() -> None:
    """Import the SDK, and jsonschema, which its client imports at the first tool call
    (with rfc3987-syntax's grammar it takes seconds; a call's timeout would pay it)."""
    import jsonschema  # noqa: F401
    import mcp  # noqa: F401


class McpServer:
    """A client of one MCP server (see the module).  Thread-safe."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        for value in command_secrets(spec.command) | url_passwords(spec.url or ""):
            register_secret(value)  # masked wherever it may show: nodes, outputs, messages
        self._lock = threading.RLock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._keeper: concurrent.futures.Future[None] | None = None
        self._stop_event: asyncio.Event | None = None
        self._client: Any = None
        self._errlog: TextIO | None = None
        self._listing: list[dict[str, Any]] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def running(self) -> bool:
        return self._client is not None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"McpServer({self.name!r}, {self.spec.shown!r}, {state})"

    # -- requests ----------------------------------------------------------------------------
    def list_tools(self) -> list[dict[str, Any]]:
        """The server's tools as it lists them (``name``, ``description``, ``inputSchema``…);
        starts the server if needed.  Kept until the server stops."""
        with self._lock:
            if self._listing is None:
                self._listing = self._request("listing its tools", self._list)
            return list(self._listing)

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The result of calling ``tool`` (``content``, ``structuredContent``, ``isError``)."""

        async def call(client: Any) -> dict[str, Any]:
            result = await client.call_tool(tool, arguments)
            return dict(result.model_dump(by_alias=True, exclude_none=True, mode="json"))

        return self._request(tool, call)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the server and open its session (nothing when it runs)."""
        with self._lock:
            if self._client is not None:
                return
            _import_sdk()  # seconds on a loaded machine: not counted against the timeout
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name=f"openprogram-mcp-{self.name}", daemon=True
            )
            thread.start()
            self._loop, self._thread = loop, thread
            # the server's stderr, kept while it runs (closed by _shutdown)
            self._errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
            ready: concurrent.futures.Future[Any] = concurrent.futures.Future()
            self._keeper = asyncio.run_coroutine_threadsafe(self._keep(ready), loop)
            try:
                self._client = ready.result(self.spec.start_timeout)
            except concurrent.futures.TimeoutError:
                self._shutdown()
                raise McpServerError(
                    self.name,
                    f"MCP server {self.name!r} did not start within {self.spec.start_timeout:g} s "
                    f"({self.spec.shown})",
                ) from None
            except Exception as exc:
                why = self._why(exc)
                self._shutdown()
                raise McpServerError(
                    self.name,
                    f"MCP server {self.name!r} could not start ({self.spec.shown}): {why}",
                ) from None

    def stop(self) -> None:
        """Stop the server (its process ends) and its loop thread; nothing when stopped."""
        with self._lock:
            self._shutdown()

    # -- internals ---------------------------------------------------------------------------
    async def _keep(self, ready: concurrent.futures.Future[Any]) -> None:
        """Enter the SDK's client and hold it open until stopped (one task owns it: anyio's
        scopes are left by the task that entered them)."""
        from mcp import Client

        self._stop_event = asyncio.Event()
        try:
            async with Client(self._transport(), mode="auto") as client:
                ready.set_result(client)
                await self._stop_event.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            if not isinstance(exc, Exception):
                raise

    def _transport(self) -> Any:
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp.client.streamable_http import streamable_http_client

        if self.spec.url is not None:
            return streamable_http_client(self.spec.url)
        command, *args = self.spec.command
        params = StdioServerParameters(
            command=command, args=args, env=dict(self.spec.env) or None, cwd=self.spec.cwd
        )
        assert self._errlog is not None
        return stdio_client(params, errlog=self._errlog)

    async def _list(self, client: Any) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools += [
                t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in page.tools
            ]
            cursor = page.next_cursor
            if not cursor:
                return tools

    def _request(self, what: str, make: Any) -> Any:
        """Run ``make(client)`` on the server's loop and wait at most ``timeout`` seconds."""
        self.start()
        loop, client = self._loop, self._client
        assert loop is not None
        coroutine: Coroutine[Any, Any, Any] = make(client)
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        try:
            return future.result(self.spec.timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            self.stop()
            raise McpServerError(
                self.name,
                f"MCP server {self.name!r} did not answer {what} within {self.spec.timeout:g} s; "
                "it was stopped (it starts again at its next use)",
            ) from None
        except Exception as exc:
            from mcp import MCPError
            from mcp_types import CONNECTION_CLOSED

            closed = isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED
            if isinstance(exc, MCPError) and not closed and self._alive():
                raise McpServerError(
                    self.name, f"MCP server {self.name!r} refused {what}: {self._why(exc)}"
                ) from None
            why = self._why(exc)
            self.stop()
            raise McpServerError(
                self.name,
                f"MCP server {self.name!r} stopped during {what}: {why} "
                "(it starts again at its next use)",
            ) from None

    def _alive(self) -> bool:
        return self._keeper is not None and not self._keeper.done()

    def _why(self, exc: BaseException) -> str:
        """One line: the error's innermost message, and the server's last stderr line (a
        server may echo the token it was given, or its command line), credentials masked."""
        while getattr(exc, "exceptions", None):  # a task group's: the first one inside
            exc = exc.exceptions[0]  # type: ignore[attr-defined]
        said = str(exc).strip().splitlines()
        why = said[-1] if said else type(exc).__name__
        last = self._stderr_tail()
        line = f"{why} (it said: {last})" if last and last not in why else why
        return redact_command(line, self.spec.command)

    def _stderr_tail(self) -> str:
        log = self._errlog
        if log is None:
            return ""
        try:
            log.flush()
            end = log.seek(0, 2)
            log.seek(max(0, end - STDERR_TAIL))
            lines = [line.strip() for line in log.read().splitlines() if line.strip()]
        except (OSError, ValueError):
            return ""
        return lines[-1][:300] if lines else ""

    def _shutdown(self) -> None:
        loop, keeper, stop_event = self._loop, self._keeper, self._stop_event
        self._client = self._listing = None
        self._loop = self._keeper = self._stop_event = None
        if loop is None:
            return
        if keeper is not None and not keeper.done() and stop_event is not None:
            loop.call_soon_threadsafe(stop_event.set)
            try:
                keeper.result(STOP_WAIT_S)
            except Exception:  # the session broke before: its shutdown has run already
                pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(STOP_WAIT_S)
        if not loop.is_running():
            loop.close()
        self._thread = None
        if self._errlog is not None:
            self._errlog.close()
            self._errlog = None
