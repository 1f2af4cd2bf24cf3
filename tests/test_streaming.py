"""Replies stream into the cell: a plain ``runtime.exec`` at a cell's top level writes each
piece of text to the cell's output as the provider's SSE stream delivers it (both official
SDKs, against the loopback wire server), the node stores the complete reply, and Ctrl-C
mid-stream keeps what arrived, marked cancelled."""

from __future__ import annotations

import io
import os
import signal
import threading
from typing import Any

import pytest

from openprogram.agent.session_db import default_db
from openprogram.context.nodes import Call
from openprogram.store.vars import get_store
from tests.helpers import wire_provider
from tests.test_magics import Shell
from tests.wire_server import Reply, WireServer

CELL = '%%openprogram\nfrom openprogram import llm\nreply = llm("Say hello")'


class Screen(io.StringIO):
    """The cell's stdout: records, for every piece written, the status the llm node being
    recorded had at that moment (``running`` = shown before the reply finished)."""

    def __init__(self, on_write: Any = None) -> None:
        super().__init__()
        self.pieces: list[tuple[str, str]] = []
        self.on_write = on_write

    def write(self, text: str) -> int:
        writer = get_store()
        if writer is not None and text.strip():
            llm = [writer.get(i) for i in writer.session.children(_turn_id(writer))]
            status = next((n.status for n in reversed(llm) if n.kind == "llm"), "none")
            self.pieces.append((text, status))
            if self.on_write is not None:
                self.on_write(self)
        return super().write(text)


def _turn_id(writer: Any) -> str:
    from openprogram.agentic_programming.function import get_call_id

    return str(get_call_id())


@pytest.fixture
def shell(bare_shell: Shell) -> Shell:
    return bare_shell


def use(shell: Shell, kind: str, wire: WireServer) -> None:
    provider = wire_provider(kind, wire, api_key="k", timeout=10.0, model="wire-model")
    shell.use_runtime(provider)


def llm_sid() -> str:
    (sid,) = [m["id"] for m in default_db().list_sessions()]
    return str(sid)


def llm_nodes() -> list[Call]:
    return [n for n in default_db().open(llm_sid()).nodes() if n.kind == "llm"]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_top_level_exec_streams_into_the_cell_and_is_stored_whole(
    kind: str, shell: Shell, wire: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    use(shell, kind, wire)
    wire.reply(Reply(chunks=["Hel", "lo, ", "wor", "ld!"]))
    screen = Screen()
    monkeypatch.setattr("sys.stdout", screen)
    shell.run(CELL)
    assert "".join(t for t, _ in screen.pieces).strip() == "Hello, world!"
    assert [s for _, s in screen.pieces] == ["running"] * 4  # each shown before the end
    assert wire.requests[0].body["stream"] is True
    (node,) = llm_nodes()
    assert node.output == "Hello, world!" and node.status == "completed"
    assert shell.ip.user_ns["reply"] == "Hello, world!"


def test_calls_inside_agentic_functions_and_gated_calls_do_not_stream(
    shell: Shell, wire: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    use(shell, "openai", wire)
    wire.reply(Reply(text="bug"), Reply(text="plain"))
    screen = Screen()
    monkeypatch.setattr("sys.stdout", screen)
    shell.run(
        "%%openprogram\nfrom openprogram import agentic_function, llm\n"
        "@agentic_function\ndef inner(runtime=None):\n"
        '    """Say something."""\n    return runtime.exec("x")\n'
        'llm("kind?", choices=["bug", "feature"])\nx = inner()'
    )
    assert screen.pieces == []  # (on the wire a long reply streams: issue 38, not shown)
    assert len(wire.requests) == 2


def test_ctrl_c_mid_stream_keeps_what_arrived_marked_cancelled(
    shell: Shell, wire: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    use(shell, "openai", wire)
    # two pieces, then the server stalls: the user presses Ctrl-C (a real SIGINT)
    wire.reply(Reply(chunks=["one ", "two ", "three"], stall_after=3, stall_for=30))
    fired = threading.Event()

    def interrupt(screen: Screen) -> None:
        if "two" in "".join(t for t, _ in screen.pieces) and not fired.is_set():
            fired.set()
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()

    monkeypatch.setattr("sys.stdout", Screen(interrupt))
    result = shell.run(CELL, error=KeyboardInterrupt)
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    (node,) = llm_nodes()
    assert node.status == "cancelled" and node.metadata["partial"] is True
    assert node.output == "one two "
    turn = next(n for n in default_db().open(llm_sid()).nodes() if n.kind == "turn")
    assert turn.status == "interrupted"
