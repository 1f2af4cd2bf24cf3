"""Replay has no side effects (issue 34, item 4): in a replay (``openprogram run
--replay``) a ``%openprogram call`` is answered from the recording — its turn written with
the recorded result, the tool never run — and push, pull, import, export and embed are
skipped with a note.  A real listener on loopback counts every connection: the live run
reaches it, the replay never does."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_forced_tool import Host as CommandHost

from openprogram import tool
from openprogram.agent.session_db import default_db
from openprogram_magics import bridge, commands
from openprogram_magics.notebook import NotebookMeta


class Listener(ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 that counts every connection made to it."""

    def __init__(self) -> None:
        self.contacts = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Pong)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            self.contacts += 1
        super().process_request(request, client_address)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Pong(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        server = self.server
        assert isinstance(server, Listener)
        body = f"pong {server.contacts}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@tool
def ping(url: str) -> str:
    """Fetch the URL."""
    with urllib.request.urlopen(url, timeout=30) as reply:
        return str(reply.read().decode())


@tool
def refuse(url: str) -> str:
    """Fail after reaching the URL."""
    ping(url)
    raise PermissionError(f"no access to {url}")


def host_for(meta: NotebookMeta) -> CommandHost:
    shell = SimpleNamespace(user_ns={"ping": ping, "refuse": refuse})
    return CommandHost(meta=meta, shell=shell)


def test_a_replay_answers_forced_calls_from_the_recording_and_reaches_nothing(
    listener: Listener,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = listener.url
    live = host_for(NotebookMeta("nb_rec"))
    first = commands.run(live, f"call ping url={url}/a")
    second = commands.run(live, f"call ping url={url}/a")
    failed = commands.run(live, f"call refuse url={url}/b")
    assert (first.text, second.text) == ("pong 1", "pong 2")
    assert failed.status == "error" and failed.error == f"PermissionError: no access to {url}/b"
    long = f"{url}/a?{'x' * 100}"  # the turn's text shows 80 characters of an argument
    assert commands.run(live, f"call ping url={long}1").text == "pong 4"
    assert listener.contacts == 4
    recorded = default_db().open("nb_rec")
    root = next(n.id for n in recorded.nodes() if n.kind == "root")

    # the replay: the runner tells the kernel, the next turns branch from the root
    state = bridge.FrontendState(None, None, 0.0, replay=bridge.ReplayRun("nb_rec"))
    monkeypatch.setattr(bridge, "_state", state)
    again = host_for(NotebookMeta("nb_rec", root))
    capsys.readouterr()
    got = [commands.run(again, f"call ping url={url}/a") for _ in range(2)]
    assert [r.text for r in got] == ["pong 1", "pong 2"]  # in the order they were made
    redo = commands.run(again, f"call refuse url={url}/b")
    assert (redo.status, redo.error) == ("error", failed.error)
    out = capsys.readouterr().out
    assert out.count("answered from the recording") == 3 and out.count("\n") == 3
    session = default_db().open("nb_rec")
    assert session.get(got[0].user_node_id).predecessor == root  # the replay's own line
    assert session.get(got[1].user_node_id).predecessor == got[0].user_node_id
    assert session.get(got[1].reply_node_id).output == "pong 2"

    # no recording: skipped with a note; and the commands that reach out are skipped too
    assert commands.run(again, f"call ping url={url}/a") is None  # both recordings used
    assert commands.run(again, f"call ping url={url}/new") is None
    assert commands.run(again, f"call ping url={long}2") is None  # all of them must match
    assert commands.run(again, f"call ping url={long}1").text == "pong 4"
    bundle = tmp_path / "s.bundle"
    for line in (
        f"push {url}/remote.git",
        f"pull {url}/remote.git",
        f"export {bundle}",
        f"import {bundle}",
        "embed",
    ):
        assert commands.run(again, line) is None
    out = capsys.readouterr().out
    assert out.count("skipped") == 8 and out.count("\n") == 9
    assert "the recording holds no such call" in out and url not in out
    assert not bundle.exists()
    assert listener.contacts == 4  # the listener saw the live runs only


SETUP = """%load_ext openprogram_magics
%openprogram provider test
import urllib.request
from openprogram import tool

@tool
def ping(url: str) -> str:
    \"\"\"Fetch the URL.\"\"\"
    with urllib.request.urlopen(url, timeout=30) as reply:
        return reply.read().decode()"""


@pytest.mark.kernel
@pytest.mark.timeout(300)
def test_openprogram_run_replay_never_reaches_what_a_call_cell_reached(
    listener: Listener, tmp_path: Path
) -> None:
    import json

    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from openprogram.cli import main as cli_main

    home, nb = tmp_path / "home", tmp_path / "nb.ipynb"
    cells = [SETUP, '%%openprogram\nprint("start")', f"%openprogram call ping url={listener.url}/x"]
    book = new_notebook(cells=[new_code_cell(c) for c in cells])
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(book, nb)
    assert cli_main(["--home", str(home), "run", str(nb)]) == 0
    assert listener.contacts == 1

    out = tmp_path / "replayed.ipynb"
    assert cli_main(["--home", str(home), "run", str(nb), "--replay", "-o", str(out)]) == 0
    assert listener.contacts == 1  # the replay reached nothing
    call_cell = json.loads(out.read_text())["cells"][2]
    shown = "".join("".join(o.get("text", "")) for o in call_cell["outputs"])
    assert "openprogram: replay: ping · turn " in shown and "· pong 1 (answered from" in shown
