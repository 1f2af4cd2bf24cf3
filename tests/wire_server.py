"""A small local HTTP server that speaks the OpenAI and Anthropic wire protocols.

Used to test the real-provider adapters with the vendors' official SDKs, end to end over
HTTP, without mocking the SDKs and without leaving the machine.

* ``POST /v1/chat/completions`` - OpenAI Chat Completions: a JSON reply, or (``"stream":
  true``) SSE ``data: {chunk}`` lines ending with ``data: [DONE]``; ``tool_calls``;
  ``usage`` (in the stream only when ``stream_options.include_usage`` is set, like OpenAI).
* ``POST /v1/messages`` - Anthropic Messages: a JSON reply, or SSE events
  ``message_start`` / ``content_block_start`` / ``ping`` / ``content_block_delta`` /
  ``content_block_stop`` / ``message_delta`` / ``message_stop``; ``tool_use`` blocks; usage.

Every request is recorded (:class:`Recorded`: path, headers, JSON body).  Replies are
scripted per test with :meth:`WireServer.reply` - a FIFO queue of :class:`Reply` objects:
text, tool calls, an HTTP error status, a delay before answering, or a stream that stalls
(``stall_after``), dies without finishing the HTTP body (``die_after``) or ends cleanly but
early, before the protocol's final event (``end_after``).  With an empty queue the server
answers 500 ``no scripted reply``.

Usage::

    with WireServer() as server:
        server.reply(Reply(text="hi"))
        OpenAIProvider(base_url=server.openai_base_url, api_key="k").complete(...)
        server.requests[0].body
"""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted reply.

    ``chunks`` are the streamed text pieces (default: ``text`` in one chunk).  A tool call is
    ``(name, arguments)`` where ``arguments`` is a dict (sent as JSON) or a raw string (to
    send malformed JSON).  ``status`` >= 400 sends an error in the vendor's error format.
    ``stall_after=n`` pauses ``stall_for`` seconds after ``n`` stream events, or until
    ``release`` (a ``threading.Event`` the test sets) is set;
    ``die_after=n`` drops the connection after ``n`` events mid-body; ``end_after=n`` ends
    the HTTP body cleanly after ``n`` events (no ``[DONE]`` / ``message_stop``);
    ``error_event_after=n`` sends the vendor's in-band stream error (type ``error_type``)
    after ``n`` events and ends the body; ``pace`` spaces stream events (a generation rate).
    """

    text: str = ""
    chunks: list[str] | None = None
    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    status: int = 200
    error_message: str = "scripted error"
    error_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    model: str | None = None
    usage: tuple[int, int] = (11, 7)
    finish_reason: str | None = None
    stall_after: int | None = None
    stall_for: float = 30.0
    release: threading.Event | None = None  # ends a stall when the test sets it
    die_after: int | None = None
    end_after: int | None = None
    error_event_after: int | None = None  # send an in-band stream error after n events
    arg_chunk_size: int = 7  # streamed tool-call arguments are split into pieces this long
    pace: float = 0.0  # seconds between stream events (a model generating at a given rate)


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any
    raw: bytes


class _Abort(Exception):
    pass


class _QuietHTTPServer(ThreadingHTTPServer):
    """A client that leaves outside a reply (a reset while the request is read, a kept-alive
    connection closed by a retry) is an ordinary event here: counted (``on_reset``), not a
    traceback on the test output; any other error is still printed."""

    def __init__(self, address: tuple[str, int], handler: Any, on_reset: Any) -> None:
        super().__init__(address, handler)
        self.on_reset = on_reset

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # reset, broken pipe, aborted
            self.on_reset()
            return
        super().handle_error(request, client_address)


class WireServer:
    """Threaded HTTP server on ``host`` (default 127.0.0.1) and a random free port."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.requests: list[Recorded] = []
        # Replies the client hung up on before they were complete (seen while stalling, or
        # as a failed write).
        self.hangups: int = 0
        self.resets: int = 0  # connections a client reset outside a reply (not printed)
        self.served: list[str] | None = None  # what GET /models lists (None: 404)
        self.model_lists: int = 0  # GET requests seen
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd = _QuietHTTPServer((host, 0), self._handler_class(), self._reset_seen)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self.host = host
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> WireServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()  # wakes stalled / delayed handlers
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _reset_seen(self) -> None:
        with self._lock:
            self.resets += 1

    def reset(self) -> None:
        """Forget recorded requests and queued replies; wake handlers that stall or delay."""
        with self._lock:
            self.requests.clear()
            self.hangups = self.resets = 0
            self.served, self.model_lists = None, 0
            self._replies.clear()
            stop, self._stop = self._stop, threading.Event()
        stop.set()

    def __enter__(self) -> WireServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    # -- scripting ------------------------------------------------------------------------

    def reply(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def _next_reply(self) -> Reply | None:
        with self._lock:
            return self._replies.popleft() if self._replies else None

    def _record(self, recorded: Recorded) -> None:
        with self._lock:
            self.requests.append(recorded)

    # -- HTTP -------------------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else ~40 ms per reply (Nagle + delayed ACK)

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                """``/models``: the ``served`` list when the test set one, else 404 (a server
                that lists nothing); counted in ``model_lists``, not in ``requests``."""
                with server._lock:
                    server.model_lists += 1
                served = server.served
                if served is None or not self.path.split("?")[0].endswith("/models"):
                    try:
                        self._send_json(404, {"error": {"message": f"unknown path {self.path}"}})
                    except OSError:  # the client left
                        self.close_connection = True
                    return
                data = [{"id": name, "object": "model", "owned_by": "wire"} for name in served]
                try:
                    self._send_json(200, {"object": "list", "data": data})
                except OSError:  # the client left
                    self.close_connection = True

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                headers = {k.lower(): v for k, v in self.headers.items()}
                server._record(Recorded(self.path, headers, body, raw))
                reply = server._next_reply()
                path = self.path.split("?")[0]
                try:
                    if reply is None:
                        reply = Reply(status=500, error_message="no scripted reply")
                    stop = server._stop
                    if reply.delay and stop.wait(reply.delay):
                        return
                    if path.endswith("/chat/completions"):
                        _OpenAIWire(self, server, body or {}, reply).respond()
                    elif path.endswith("/messages"):
                        _AnthropicWire(self, server, body or {}, reply).respond()
                    else:
                        self._send_json(404, {"error": {"message": f"unknown path {path}"}})
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                    with server._lock:
                        server.hangups += 1
                except (_Abort, OSError):
                    self.close_connection = True

            def _send_json(
                self, status: int, payload: Any, headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()

        return Handler


class _Wire:
    """Shared streaming machinery: chunked SSE with stall / die / early-end controls."""

    def __init__(
        self, handler: Any, server: WireServer, body: dict[str, Any], reply: Reply
    ) -> None:
        self.h = handler
        self.server = server
        self.body = body
        self.reply = reply
        self.model = reply.model or str(body.get("model") or "wire-model")
        self._sent = 0

    def respond(self) -> None:
        if self.reply.status >= 400:
            self.h._send_json(self.reply.status, self.error_payload(), self.reply.headers)
        elif self.body.get("stream"):
            self.start_stream()
            for event in self.events():
                self.send_event(event)
            self.finish_stream()
        else:
            self.h._send_json(200, self.json_reply(), self.reply.headers)

    # -- to be provided by the protocol ---------------------------------------------------

    def error_payload(self) -> Any:
        raise NotImplementedError

    def json_reply(self) -> Any:
        raise NotImplementedError

    def events(self) -> list[bytes]:
        raise NotImplementedError

    def stream_error_event(self) -> bytes:
        raise NotImplementedError

    # -- chunked SSE ------------------------------------------------------------------------

    def chunks(self) -> list[str]:
        if self.reply.chunks is not None:
            return list(self.reply.chunks)
        return [self.reply.text] if self.reply.text else []

    def start_stream(self) -> None:
        self.h.send_response(200)
        self.h.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.h.send_header("Cache-Control", "no-cache")
        self.h.send_header("Transfer-Encoding", "chunked")
        for name, value in self.reply.headers.items():
            self.h.send_header(name, value)
        self.h.end_headers()
        self.h.wfile.flush()

    def _write_chunk(self, data: bytes) -> None:
        self.h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.h.wfile.flush()

    def send_event(self, event: bytes) -> None:
        reply = self.reply
        if reply.die_after is not None and self._sent >= reply.die_after:
            # Drop the connection in the middle of the chunked body.
            self._write_chunk(b'data: {"trunc')
            self.h.connection.shutdown(socket.SHUT_RDWR)
            raise _Abort
        if reply.end_after is not None and self._sent >= reply.end_after:
            self.finish_stream()
            raise _Abort
        if reply.error_event_after is not None and self._sent >= reply.error_event_after:
            self._write_chunk(self.stream_error_event())
            self.finish_stream()
            raise _Abort
        if reply.stall_after is not None and self._sent == reply.stall_after:
            self._stall(reply.stall_for, reply.release)
        if reply.pace:  # event n leaves at start + n * pace (no drift from sleep overshoot)
            if not self._sent:
                self._t0 = time.monotonic()
            time.sleep(max(0.0, self._t0 + self._sent * reply.pace - time.monotonic()))
        self._write_chunk(event)
        self._sent += 1
        time.sleep(0)  # let the client see chunks as separate reads

    def _stall(self, seconds: float, release: threading.Event | None = None) -> None:
        """Send nothing for ``seconds`` or until ``release`` is set; stop early (and count
        it) if the client hangs up."""
        stop = self.server._stop
        conn = self.h.connection
        deadline = time.monotonic() + seconds
        poller = select.poll()  # not select.select: a long test run has fds past 1024
        poller.register(conn, select.POLLIN)
        while time.monotonic() < deadline:
            if release is not None and release.is_set():
                return
            if stop.wait(0.01):
                raise _Abort
            readable = poller.poll(0)
            if readable and conn.recv(1, socket.MSG_PEEK) == b"":
                with self.server._lock:
                    self.server.hangups += 1
                raise _Abort

    def finish_stream(self) -> None:
        self.h.wfile.write(b"0\r\n\r\n")
        self.h.wfile.flush()


def _sse(data: Any, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {text}\n\n".encode()


def _arguments(arguments: dict[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _split(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class _OpenAIWire(_Wire):
    def error_payload(self) -> Any:
        kinds = {
            400: "invalid_request_error",
            401: "invalid_request_error",
            429: "rate_limit_exceeded",
        }
        return {
            "error": {
                "message": self.reply.error_message,
                "type": self.reply.error_type or kinds.get(self.reply.status, "server_error"),
                "param": None,
                "code": None,
            }
        }

    def stream_error_event(self) -> bytes:
        return _sse(self.error_payload())

    def _finish(self) -> str:
        if self.reply.finish_reason:
            return self.reply.finish_reason
        return "tool_calls" if self.reply.tool_calls else "stop"

    def _usage(self) -> dict[str, int]:
        prompt, completion = self.reply.usage
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def json_reply(self) -> Any:
        message: dict[str, Any] = {"role": "assistant", "content": self.reply.text or None}
        if self.reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": _arguments(args)},
                }
                for i, (name, args) in enumerate(self.reply.tool_calls)
            ]
        return {
            "id": "chatcmpl-wire",
            "object": "chat.completion",
            "created": 1700000000,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish()}],
            "usage": self._usage(),
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse(
            {
                "id": "chatcmpl-wire",
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    def events(self) -> list[bytes]:
        events = [self._chunk({"role": "assistant", "content": ""})]
        events += [self._chunk({"content": piece}) for piece in self.chunks()]
        for i, (name, args) in enumerate(self.reply.tool_calls):
            pieces = _split(_arguments(args), self.reply.arg_chunk_size)
            first = {
                "index": i,
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            events.append(self._chunk({"tool_calls": [first]}))
            events += [
                self._chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                for piece in pieces
            ]
        events.append(self._chunk({}, self._finish()))
        if (self.body.get("stream_options") or {}).get("include_usage"):
            events.append(
                _sse(
                    {
                        "id": "chatcmpl-wire",
                        "object": "chat.completion.chunk",
                        "created": 1700000000,
                        "model": self.model,
                        "choices": [],
                        "usage": self._usage(),
                    }
                )
            )
        events.append(_sse("[DONE]"))
        return events


class _AnthropicWire(_Wire):
    def error_payload(self) -> Any:
        kinds = {
            400: "invalid_request_error",
            401: "authentication_error",
            403: "permission_error",
            404: "not_found_error",
            429: "rate_limit_error",
            529: "overloaded_error",
        }
        return {
            "type": "error",
            "error": {
                "type": self.reply.error_type or kinds.get(self.reply.status, "api_error"),
                "message": self.reply.error_message,
            },
        }

    def stream_error_event(self) -> bytes:
        return _sse(self.error_payload(), "error")

    def _stop_reason(self) -> str:
        if self.reply.finish_reason:
            return self.reply.finish_reason
        return "tool_use" if self.reply.tool_calls else "end_turn"

    def json_reply(self) -> Any:
        content: list[dict[str, Any]] = []
        if self.reply.text:
            content.append({"type": "text", "text": self.reply.text})
        for i, (name, args) in enumerate(self.reply.tool_calls):
            content.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{i}",
                    "name": name,
                    "input": json.loads(_arguments(args)),
                }
            )
        prompt, completion = self.reply.usage
        return {
            "id": "msg_wire",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self._stop_reason(),
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": completion},
        }

    def events(self) -> list[bytes]:
        prompt, completion = self.reply.usage
        events = [
            _sse(
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_wire",
                        "type": "message",
                        "role": "assistant",
                        "model": self.model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {"input_tokens": prompt, "output_tokens": 1},
                    },
                },
                "message_start",
            )
        ]
        index = 0
        chunks = self.chunks()
        if chunks:
            events.append(
                _sse(
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    },
                    "content_block_start",
                )
            )
            events.append(_sse({"type": "ping"}, "ping"))
            events += [
                _sse(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                    "content_block_delta",
                )
                for piece in chunks
            ]
            events.append(
                _sse({"type": "content_block_stop", "index": index}, "content_block_stop")
            )
            index += 1
        for i, (name, args) in enumerate(self.reply.tool_calls):
            events.append(
                _sse(
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {
                            "type": "tool_use",
                            "id": f"toolu_{i}",
                            "name": name,
                            "input": {},
                        },
                    },
                    "content_block_start",
                )
            )
            events += [
                _sse(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                    "content_block_delta",
                )
                for piece in _split(_arguments(args), self.reply.arg_chunk_size)
            ]
            events.append(
                _sse({"type": "content_block_stop", "index": index}, "content_block_stop")
            )
            index += 1
        events.append(
            _sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": self._stop_reason(), "stop_sequence": None},
                    "usage": {"output_tokens": completion},
                },
                "message_delta",
            )
        )
        events.append(_sse({"type": "message_stop"}, "message_stop"))
        return events
