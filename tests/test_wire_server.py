"""The test wire server takes a client that resets its connection mid-request in its stride:
no raw ``ConnectionResetError`` traceback in the test output, and it keeps answering."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable

import pytest
from wire_server import Reply, WireServer

from openprogram.providers.base import LLMRequest
from openprogram.providers.openai_provider import OpenAIProvider


def wait_for(condition: Callable[[], bool], polls: int = 3000) -> bool:
    tick = threading.Event()
    for _ in range(polls):
        if condition():
            return True
        tick.wait(0.01)
    return False


def test_a_reset_while_the_body_is_read_prints_no_traceback(
    wire: WireServer, capfd: pytest.CaptureFixture[str]
) -> None:
    client = socket.create_connection(("127.0.0.1", wire.port))
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: wire\r\nContent-Length: 100000\r\n\r\n"
    client.sendall(head + b'{"model": ')  # then leaves with a reset, the body unsent
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()
    assert wait_for(lambda: wire.resets == 1)  # the server saw the client leave
    wire.reply(Reply(text="still here"))
    provider = OpenAIProvider(base_url=wire.openai_base_url, api_key="sk-wire", model="m")
    assert provider.complete(LLMRequest([{"role": "user", "content": "hi"}])).text == "still here"
    err = capfd.readouterr().err
    assert "Traceback" not in err and "ConnectionResetError" not in err
