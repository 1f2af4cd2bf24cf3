"""Real git servers on 127.0.0.1 for the sharing tests: ``git daemon``, smart HTTP
(``git http-backend`` run as CGI behind a small WSGI server that requires a password) and
dumb HTTP (plain files)."""

from __future__ import annotations

import base64
import socket
import subprocess
import threading
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from tests.waiting import until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(port: int, proc: subprocess.Popen[bytes]) -> None:
    def answers() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"git daemon exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            return False

    if not until(answers, 10):
        raise RuntimeError("git daemon did not start")


@contextmanager
def git_daemon(base: Path) -> Iterator[str]:
    """``git daemon`` serving the bare repositories under ``base`` (push enabled); yields
    the ``git://127.0.0.1:PORT`` prefix."""
    port = free_port()
    proc = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", f"--base-path={base}", "--export-all",
         "--enable=receive-pack", "--listen=127.0.0.1", f"--port={port}", str(base)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        _wait_for(port, proc)
        yield f"git://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Threading(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def http_backend_app(root: Path, user: str, password: str) -> Any:
    """A WSGI app running ``git http-backend`` for the repositories under ``root``, behind
    HTTP basic authentication (401 without the right user and password)."""
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if environ.get("HTTP_AUTHORIZATION") != expected:
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="git"')])
            return [b"password required\n"]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        cgi = {
            "PATH": "/usr/bin:/bin",
            "GIT_PROJECT_ROOT": str(root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": user,
            "REMOTE_ADDR": "127.0.0.1",
            "REQUEST_METHOD": environ["REQUEST_METHOD"],
            "PATH_INFO": environ.get("PATH_INFO", ""),
            "QUERY_STRING": environ.get("QUERY_STRING", ""),
            "CONTENT_TYPE": environ.get("CONTENT_TYPE", ""),
            "CONTENT_LENGTH": str(len(body)),
            "GIT_PROTOCOL": environ.get("HTTP_GIT_PROTOCOL", ""),
            "HTTP_CONTENT_ENCODING": environ.get("HTTP_CONTENT_ENCODING", ""),
        }
        out = subprocess.run(
            ["git", "http-backend"], input=body, env=cgi, capture_output=True, check=False
        ).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = out.partition(b"\n\n")
        status, headers = "200 OK", []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = value.strip()
            elif name:
                headers.append((name, value.strip()))
        start_response(status, headers)
        return [payload]

    return app


@contextmanager
def serving(server: Any) -> Iterator[str]:
    """``server`` (a socketserver on 127.0.0.1) serving in a thread; yields its base URL."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def smart_http(root: Path, user: str, password: str) -> AbstractContextManager[str]:
    """Serve ``root`` over smart HTTP on 127.0.0.1; yields ``http://127.0.0.1:PORT``."""
    app = http_backend_app(root, user, password)
    return serving(make_server("127.0.0.1", 0, app, _Threading, _Quiet))


class _QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def dumb_http(root: Path) -> AbstractContextManager[str]:
    """``python -m http.server``'s handler serving the files under ``root`` on 127.0.0.1 (git's
    dumb HTTP once ``git update-server-info`` ran); yields ``http://127.0.0.1:PORT``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietFiles, directory=str(root)))
    server.daemon_threads = True
    return serving(server)
