"""No secret a model echoes reaches the notebook: a reply that quotes the value of
``OPENAI_API_KEY``, streamed by the real OpenAI SDK from the loopback wire server with the
key split across stream chunks, shows ``***`` in a plain, a ``--chat`` and a
``--background`` cell — in what the kernel sends the frontend, in the saved notebook and in
every file and git object of the session."""

from __future__ import annotations

import itertools
import os
import subprocess
import zlib
from pathlib import Path
from typing import Any

import nbformat
import pytest

from openprogram.context.secrets import SecretStream
from openprogram.store.session.store import SessionStore
from openprogram_magics.headless import run_notebook
from tests.test_kernel_turns import Kernel, start_kernel
from tests.wire_server import Reply, WireServer

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-fake-" + "9f3KqLx2" + "MustNotLeak7a1"  # what the kernel's OPENAI_API_KEY holds


def echoing(key: str, cut: list[int]) -> Reply:
    """A reply quoting ``key``, streamed in pieces cut inside it (``cut``: offsets)."""
    edges = [0, *cut, len(key)]
    inside = [key[a:b] for a, b in itertools.pairwise(edges)]
    return Reply(chunks=["Your key is ", *inside, " - keep it safe."])


REPLIES = [echoing(KEY, [3]), echoing(KEY, [1, 9, 20]), echoing(KEY, [len(KEY) - 1])]
WAIT = 'get_ipython().magics_manager.registry["OpenProgramMagics"].background.wait(30)'
CELLS = [
    "%load_ext openprogram_magics",
    '%%openprogram\nfrom openprogram import llm\nreply = llm("What is my key?")',
    "%%openprogram --chat\nWhat is my key, again?",
    '%%openprogram --background\nfrom openprogram import llm\nlate = llm("Once more?")',
    WAIT,
    "print(len(reply), len(late))",  # the program still gets the reply itself
]


def kernel_env(monkeypatch: pytest.MonkeyPatch, wire: WireServer) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", wire.openai_base_url)
    monkeypatch.setenv("OPENPROGRAM_PROVIDER", "openai")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))


def leaks_in_files(root: Path, secret: str) -> list[str]:
    """Every file under ``root`` holding ``secret``: raw, inside a loose git object
    (zlib), or in any object of any git repository there (packs included)."""
    needle = secret.encode()
    found: list[str] = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        if needle in data:
            found.append(str(path))
        elif _loose_object(path) and needle in zlib.decompress(data):
            found.append(f"{path} (git object)")
    git_dirs = {p.parent for p in root.rglob("HEAD") if (p.parent / "objects").is_dir()}
    for git_dir in sorted(git_dirs):
        objects = subprocess.run(
            ["git", "--git-dir", str(git_dir), "cat-file", "--batch-all-objects", "--batch"],
            capture_output=True,
            check=True,
        ).stdout
        if needle in objects:
            found.append(f"{git_dir} (an object)")
    return found


def _loose_object(path: Path) -> bool:
    return path.parent.parent.name == "objects" and len(path.parent.name) == 2


def test_a_secret_split_across_stream_pieces_is_masked_whatever_the_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    text = f"sk- s {KEY} and {KEY}{KEY} s"
    for size in range(1, len(text) + 1):
        stream = SecretStream()
        pieces = [text[i : i + size] for i in range(0, len(text), size)]
        shown = "".join(stream.feed(p) for p in pieces) + stream.end()
        assert shown == "sk- s *** and ****** s", size


@pytest.mark.kernel
@pytest.mark.timeout(300)
def test_an_echoed_key_reaches_no_output_no_notebook_and_no_session_file(
    tmp_path: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch, wire: WireServer
) -> None:
    kernel_env(monkeypatch, wire)
    wire.reply(*REPLIES)
    path = tmp_path / "work" / "nb.ipynb"
    path.parent.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nbformat.write(nb, path)
    result = run_notebook(path, timeout=120)
    assert result.error is None, result.error
    assert len(wire.requests) == 3  # the three cells asked the model, which echoed the key
    saved = nbformat.read(path, as_version=4)
    # what the cells wrote to stdout (a library's warning on stderr may land mid-stream),
    # and a chat cell's reply (one display, updated as it streamed)
    texts = [
        "".join(
            o.get("text", "") if "data" not in o else o.data.get("text/plain", "")
            for o in cell.outputs
            if o.get("name") != "stderr" and len(o.get("data", {"": 0})) == 1
        )
        for cell in saved.cells
    ]
    assert "Your key is *** - keep it safe." in texts[1]  # streamed, masked
    assert "Your key is *** - keep it safe." in texts[2]  # the chat reply
    assert texts[5].split() == [str(len(KEY) + 28)] * 2  # the values the program got are whole
    assert leaks_in_files(path.parent, KEY) == []
    assert leaks_in_files(op_home, KEY) == []


@pytest.mark.kernel
@pytest.mark.timeout(300)
def test_a_frontend_receives_no_echoed_key_from_any_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wire: WireServer
) -> None:
    """What a live frontend gets (every iopub message of the kernel, the background cell's
    streamed reply included, which lands under its cell after the cell returned)."""
    kernel_env(monkeypatch, wire)
    wire.reply(*REPLIES)
    home = tmp_path / "home"
    km, kc = start_kernel(home)
    kernel = Kernel(km, kc)
    messages: list[dict[str, Any]] = []
    try:
        for code in CELLS:
            msg_id = kernel.send(code)
            assert kernel.reply(msg_id)["status"] == "ok"
            while True:  # every message, whichever cell it belongs to, until this one is idle
                msg = kc.get_iopub_msg(timeout=60)
                messages.append(msg)
                state = msg["content"].get("execution_state")
                if msg["parent_header"].get("msg_id") == msg_id and state == "idle":
                    break
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    shown = [str(m["content"]) for m in messages]
    streamed = "".join(
        m["content"]["text"]
        for m in messages
        if m["msg_type"] == "stream" and m["content"].get("name") != "stderr"
    )
    chat = {  # a chat cell's reply: one display, updated as it streams (its last text)
        m["content"]["transient"]["display_id"]: m["content"]["data"]["text/plain"]
        for m in messages
        if m["msg_type"] in ("display_data", "update_display_data")
        and list(m["content"]["data"]) == ["text/plain"]
        and m["content"].get("transient")
    }
    streamed += "".join(chat.values())
    assert streamed.count("Your key is *** - keep it safe.") == 3, streamed
    assert not [s for s in shown if KEY in s]
    assert leaks_in_files(home, KEY) == []


# -- what a cell shows as its value, displays or prints (issue 34) ---------------------------------
OTHER_KEY = "mistral-" + "Zq81LowKnown" + "Name44"  # under a name the classifier did not know
PASSWORD = "hunter2-" + "UrlPassw0rd"  # inside OPENAI_BASE_URL
SHOWN = [
    "%load_ext openprogram_magics",
    '%%openprogram\nfrom openprogram import llm\nllm("What is my key?")',  # the cell's value
    "from IPython.display import display\nimport os\n"
    'display(os.environ["MISTRAL_KEY"])\nos.environ["OPENAI_API_KEY"]',
    "import os\nfrom openprogram import tool\n\n@tool\ndef whoami() -> str:\n"
    '    """Say the key."""\n    return "the key is " + os.environ["OPENAI_API_KEY"]',
    "%openprogram call whoami",  # the line it prints, and its TurnResult as the value
    "called = _",
    "%openprogram status",  # the base URL, with a password
    'print(os.environ["OPENAI_BASE_URL"])',
    "called.text",  # the TurnResult's own text
    'raise RuntimeError("refused: " + os.environ["OPENAI_API_KEY"])',  # an error quoting it
]


@pytest.mark.kernel
@pytest.mark.timeout(300)
def test_a_key_shown_as_a_value_displayed_or_printed_is_masked_in_the_saved_notebook(
    tmp_path: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch, wire: WireServer
) -> None:
    """The cell's value (``execute_result``), ``display_data``, ``%openprogram call``'s
    line and value, ``%openprogram status`` and a ``print``: each shows ``***``, in the
    saved notebook and every file of the session; the session's title has no home path."""
    kernel_env(monkeypatch, wire)
    base = wire.openai_base_url.replace("http://", f"http://ada:{PASSWORD}@")
    monkeypatch.setenv("OPENAI_BASE_URL", base)
    monkeypatch.setenv("MISTRAL_KEY", OTHER_KEY)
    monkeypatch.setenv("HOME", str(tmp_path))  # the notebook is in the user's home
    wire.reply(Reply(text=f"Your key is {KEY}"))
    path = tmp_path / "work" / "nb.ipynb"
    path.parent.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in SHOWN]
    nbformat.write(nb, path)
    result = run_notebook(path, timeout=120)
    assert result.error is not None and "RuntimeError: refused: ***" in result.error
    assert len(wire.requests) == 1  # the model was asked, and echoed the key

    saved = nbformat.read(path, as_version=4)

    def shown(index: int, kind: str) -> str:
        outputs = saved.cells[index].outputs
        return "".join(
            str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
            for o in outputs
            if o["output_type"] == kind
        )

    assert "Your key is ***" in shown(1, "execute_result")
    assert shown(2, "display_data") == "'***'" and shown(2, "execute_result") == "'***'"
    assert "· the key is ***" in shown(4, "stream")  # the line `call` prints
    assert "text='the key is ***'" in shown(4, "execute_result")  # the TurnResult
    assert f"http://ada:***@127.0.0.1:{wire.url.rsplit(':', 1)[1]}/v1" in shown(6, "stream")
    assert shown(7, "stream").strip() == base.replace(PASSWORD, "***")
    assert shown(8, "execute_result") == "'the key is ***'"
    assert saved.cells[9].outputs[0]["evalue"] == "refused: ***"
    for secret in (KEY, OTHER_KEY, PASSWORD):
        assert leaks_in_files(path.parent, secret) == [], secret
        assert leaks_in_files(op_home, secret) == [], secret
    session = SessionStore(op_home).open(result.session_id or "")
    assert session.meta["title"] == "notebook ~/work/nb.ipynb"
    committed = subprocess.run(  # what a push or an export takes along
        ["git", "-C", str(session.path), "cat-file", "--batch-all-objects", "--batch"],
        capture_output=True,
        check=True,
    ).stdout
    assert b"nb.ipynb" in committed and str(tmp_path).encode() not in committed


# -- a cell that prints the key in pieces, as a hand-written streaming loop prints a reply ---------
PIECES = """import os, time
from IPython.display import display
k = os.environ["OPENAI_API_KEY"]
print("before", flush=True)
for i in range(0, len(k), 6):
    print(k[i : i + 6], end="", flush=True)
    time.sleep(0.05)
print(" after", flush=True)
print(k[:4], end="", flush=True)  # could begin the key: held back, sent before the display
display("shown")
print("|" + k[:3], end="", flush=True)  # held back until the cell ends
print("to stderr", file=__import__("sys").stderr)"""


@pytest.mark.kernel
@pytest.mark.timeout(300)
def test_a_key_printed_in_pieces_is_masked_and_the_output_around_it_kept_in_order(
    tmp_path: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each piece is a stream message of its own; a frontend (and a reader of the saved
    notebook) joins them: the key must not be spelled by them together."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    path = tmp_path / "nb.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in ("%load_ext openprogram_magics", PIECES)]
    nbformat.write(nb, path)
    result = run_notebook(path, timeout=120)
    assert result.error is None, result.error

    outputs = nbformat.read(path, as_version=4).cells[1].outputs
    stderr = [o.text for o in outputs if o.get("name") == "stderr"]
    shown = []  # (kind, text): consecutive pieces of stdout joined, as a frontend shows them
    for o in outputs:
        kind, text = o.get("name") or o["output_type"], o.get("text") or o.get("data", {})
        if kind == "stdout" and shown and shown[-1][0] == kind:
            shown[-1] = (kind, shown[-1][1] + text)
        elif kind != "stderr":  # its own stream: its order to stdout is the kernel's
            shown.append((kind, text))
    assert KEY not in str(outputs)
    joined = "".join(text for kind, text in shown if kind == "stdout")
    assert KEY not in joined and "***" in joined
    assert shown == [
        ("stdout", f"before\n*** after\n{KEY[:4]}"),
        ("display_data", {"text/plain": "'shown'"}),
        ("stdout", f"|{KEY[:3]}"),
    ]
    assert stderr == ["to stderr\n"]
