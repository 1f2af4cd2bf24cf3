"""Replies stream into the cell: a plain ``runtime.exec`` at a cell's top level shows each
piece of text in the cell's output as the provider's SSE stream delivers it (both official
SDKs, against the loopback wire server), as ONE output per reply updated in place (stdout
in a terminal IPython), the node stores the complete reply, and Ctrl-C mid-stream keeps
what arrived, on the screen and in the node, marked cancelled."""

from __future__ import annotations

import io
import os
import signal
import threading
from typing import Any

import pytest
from IPython.core.displaypub import CapturingDisplayPublisher, DisplayPublisher

from openprogram.agent.session_db import default_db
from openprogram.context.nodes import Call
from openprogram.store.vars import get_store
from openprogram_magics import reply_output
from openprogram_magics.notebook import MIME_TYPE
from tests.helpers import wire_provider
from tests.test_magics import Shell
from tests.wire_server import Reply, WireServer

CELL = '%%openprogram\nfrom openprogram import llm\nreply = llm("Say hello")'


def llm_status() -> str:
    """The status of the llm node being recorded (``running``: before the reply ended)."""
    writer = get_store()
    if writer is None:
        return "none"
    llm = [writer.get(i) for i in writer.session.children(_turn_id(writer))]
    return next((n.status for n in reversed(llm) if n.kind == "llm"), "none")


class Screen(CapturingDisplayPublisher):
    """The cell's displays (as a kernel's frontend gets them): records, for every piece of
    a reply shown (what an update added to its display), the status the llm node had at
    that moment, and each display's latest text by display id."""

    def __init__(self, on_piece: Any = None) -> None:
        super().__init__()
        self.pieces: list[tuple[str, str]] = []
        self.replies: dict[str, str] = {}  # display id -> the text it shows
        self.on_piece = on_piece

    def publish(self, data: Any, *args: Any, **kwargs: Any) -> None:
        super().publish(data, *args, **kwargs)
        transient = kwargs.get("transient") or {}
        if MIME_TYPE in data or "display_id" not in transient:
            return  # the turn's DAG, not a reply
        key, text = transient["display_id"], data["text/plain"]
        piece = text[len(self.replies.get(key, "")) :]
        self.replies[key] = text
        if piece.strip():
            self.pieces.append((piece, llm_status()))
            if self.on_piece is not None:
                self.on_piece(self)


class Terminal(io.StringIO):
    """A terminal IPython's stdout: records each piece written, with the llm node's status."""

    def __init__(self) -> None:
        super().__init__()
        self.pieces: list[tuple[str, str]] = []

    def write(self, text: str) -> int:
        if text.strip() and get_store() is not None:
            self.pieces.append((text, llm_status()))
        return super().write(text)


def _turn_id(writer: Any) -> str:
    from openprogram.agentic_programming.function import get_call_id

    return str(get_call_id())


@pytest.fixture
def shell(bare_shell: Shell, monkeypatch: pytest.MonkeyPatch) -> Shell:
    monkeypatch.setattr(reply_output, "UPDATE_EVERY_S", 0.0)  # every piece shown as it comes
    return bare_shell


def watch(shell: Shell, on_piece: Any = None) -> Screen:
    screen = Screen(on_piece)
    shell.ip.display_pub = shell.display = screen
    return screen


def use(shell: Shell, kind: str, wire: WireServer) -> None:
    provider = wire_provider(kind, wire, api_key="k", timeout=10.0, model="wire-model")
    shell.use_runtime(provider)


def llm_sid() -> str:
    (sid,) = [m["id"] for m in default_db().list_sessions()]
    return str(sid)


def llm_nodes() -> list[Call]:
    return [n for n in default_db().open(llm_sid()).nodes() if n.kind == "llm"]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_top_level_exec_streams_into_one_output_of_the_cell_and_is_stored_whole(
    kind: str, shell: Shell, wire: WireServer, capsys: pytest.CaptureFixture[str]
) -> None:
    use(shell, kind, wire)
    wire.reply(Reply(chunks=["Hel", "lo, ", "wor", "ld!"]))
    screen = watch(shell)
    capsys.readouterr()
    shell.run(CELL)
    assert "".join(t for t, _ in screen.pieces) == "Hello, world!"
    assert [s for _, s in screen.pieces] == ["running"] * 4  # each shown before the end
    assert list(screen.replies.values()) == ["Hello, world!\n"]  # one output, the whole reply
    assert "Hello" not in capsys.readouterr().out  # no piece went to stdout as well
    assert wire.requests[0].body["stream"] is True
    (node,) = llm_nodes()
    assert node.output == "Hello, world!" and node.status == "completed"
    assert shell.ip.user_ns["reply"] == "Hello, world!"


def test_each_streamed_reply_of_a_cell_is_its_own_output(shell: Shell, wire: WireServer) -> None:
    use(shell, "openai", wire)
    wire.reply(Reply(chunks=["one ", "two"]), Reply(chunks=["three ", "four"]))
    screen = watch(shell)
    shell.run('%%openprogram\nfrom openprogram import llm\nllm("a")\nprint("between")\nllm("b")')
    assert list(screen.replies.values()) == ["one two\n", "three four\n"]
    shown = [o["data"]["text/plain"] for o in screen.outputs if MIME_TYPE not in o["data"]]
    assert shown[-1] == "three four\n" and "one two\n" in shown


def test_in_a_terminal_ipython_a_reply_streams_to_stdout(
    shell: Shell, wire: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A terminal prints every display (an update would print the reply again): there each
    piece is written to stdout once, as it arrives."""
    use(shell, "openai", wire)
    wire.reply(Reply(chunks=["Hel", "lo, ", "wor", "ld!"]))
    shell.ip.display_pub = DisplayPublisher(shell=shell.ip)
    terminal = Terminal()
    monkeypatch.setattr("sys.stdout", terminal)
    shell.run(CELL)
    assert [s for _, s in terminal.pieces][:4] == ["running"] * 4  # each shown before the end
    reply = terminal.getvalue().split("openprogram · session", 1)[0]
    assert reply.count("Hello, world!") == 1


def test_calls_inside_agentic_functions_and_gated_calls_do_not_stream(
    shell: Shell, wire: WireServer, capsys: pytest.CaptureFixture[str]
) -> None:
    use(shell, "openai", wire)
    wire.reply(Reply(text="bug"), Reply(text="plain"))
    screen = watch(shell)
    shell.run(
        "%%openprogram\nfrom openprogram import agentic_function, llm\n"
        "@agentic_function\ndef inner(runtime=None):\n"
        '    """Say something."""\n    return runtime.exec("x")\n'
        'llm("kind?", choices=["bug", "feature"])\nx = inner()'
    )
    assert screen.pieces == []  # (on the wire a long reply streams: issue 38, not shown)
    assert "plain" not in capsys.readouterr().out
    assert len(wire.requests) == 2


def test_ctrl_c_mid_stream_keeps_what_arrived_marked_cancelled(
    shell: Shell, wire: WireServer
) -> None:
    use(shell, "openai", wire)
    # two pieces, then the server stalls: the user presses Ctrl-C (a real SIGINT)
    wire.reply(Reply(chunks=["one ", "two ", "three"], stall_after=3, stall_for=30))
    fired = threading.Event()

    def interrupt(screen: Screen) -> None:
        if "two" in "".join(t for t, _ in screen.pieces) and not fired.is_set():
            fired.set()
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()

    screen = watch(shell, interrupt)
    result = shell.run(CELL, error=KeyboardInterrupt)
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert list(screen.replies.values()) == ["one two \n"]  # still shown, in its one output
    (node,) = llm_nodes()
    assert node.status == "cancelled" and node.metadata["partial"] is True
    assert node.output == "one two "
    turn = next(n for n in default_db().open(llm_sid()).nodes() if n.kind == "turn")
    assert turn.status == "interrupted"
