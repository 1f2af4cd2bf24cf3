"""What the kernel sends is masked, and only what is shown (:mod:`openprogram_magics.outputs`):
a message's content and metadata lose their secrets while its header and parent header
(message ids, session, user name) reach the frontend as they were sent, still signed; a
widget's binary buffers lose theirs too, keeping their length (issue 34's review)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from jupyter_client.session import Session

from openprogram.context import secrets
from openprogram_magics import outputs
from tests.test_kernel_turns import Kernel, start_kernel

KEY = "sk-fake-" + "Routing0123" + "NeverShown"


def wrapped(session: Session) -> SimpleNamespace:
    shell = SimpleNamespace(kernel=SimpleNamespace(session=session))
    assert outputs.install(shell) == 1 and outputs.install(shell) == 1  # wrapped once
    return shell


def received(session: Session, parts: list[bytes]) -> dict[str, Any]:
    """The message as the frontend reads it (its signature checked)."""
    _, rest = session.feed_identities(parts)
    return session.deserialize(rest)


def test_the_content_is_masked_and_the_headers_are_sent_as_they_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    session = Session(key=b"hmac-key", username=f"ada-{KEY}")  # a header that holds it
    shell = wrapped(session)
    request = Session(session=f"front-{KEY}").msg("execute_request", content={})
    content = {"data": {"text/plain": f"'{KEY}'"}, "url": "http://u:pw@h/", "n": 3}
    msg = session.msg("execute_result", content, parent=request, metadata={"note": KEY})

    got = received(session, session.serialize(msg, [b"topic"]))

    assert got["content"] == {"data": {"text/plain": "'***'"}, "url": "http://u:***@h/", "n": 3}
    assert got["metadata"] == {"note": "***"}
    # the reply is still matched to its request, and says who sent it
    assert got["parent_header"]["msg_id"] == request["header"]["msg_id"]
    assert got["parent_header"]["session"] == f"front-{KEY}"
    assert got["header"]["msg_id"] == msg["header"]["msg_id"]
    assert got["header"]["username"] == f"ada-{KEY}"
    assert content["data"] == {"text/plain": f"'{KEY}'"}  # what the program holds is whole
    clean = session.msg("stream", {"name": "stdout", "text": "nothing to hide"})
    outputs.uninstall(shell)
    plain = session.serialize(clean)
    assert plain == outputs.masking_serializer(session)(clean)  # no hit: the same bytes


def test_a_relayed_message_with_packed_content_is_masked_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    session = Session(key=b"hmac-key")
    wrapped(session)
    msg = session.msg("stream", {})
    msg["content"] = json.dumps({"name": "stdout", "text": f"key {KEY}"}).encode()

    assert received(session, session.serialize(msg))["content"]["text"] == "key ***"


def test_a_content_of_a_dict_subclass_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    session = Session(key=b"hmac-key")
    wrapped(session)
    part = type("Part", (dict,), {})(name="stdout", text=KEY)  # a kernel's may be one

    assert received(session, session.serialize(session.msg("stream", part)))["content"] == {
        "name": "stdout",
        "text": "***",
    }


@pytest.mark.timeout(60)  # a quadratic URL pattern took ~10 minutes for this message
def test_a_large_output_holding_a_url_is_sent_and_its_password_masked() -> None:
    session = Session()
    wrapped(session)
    text = "a." * 400_000 + " fetched from https://ada:hunter2hunter2@db.example/x"

    got = received(session, session.serialize(session.msg("stream", {"text": text})))

    assert got["content"]["text"].startswith("a.a.a.")
    assert got["content"]["text"].endswith("https://ada:***@db.example/x")


def test_a_buffer_is_masked_in_place_and_a_clean_one_is_passed_on() -> None:
    url = b"\x89PNG\x00 https://ada:Hunter2Hunter2@db.example/x \x00"
    clean = bytearray(b"\x00\x01\x02 nothing")

    shown = outputs.masked_buffers([url, clean])

    assert shown[0] == b"\x89PNG\x00 https://ada:**************@db.example/x \x00"
    assert len(shown[0]) == len(url)
    assert shown[1] is clean


# the kernel: a widget's comm carries the key in its state and in two binary buffers
COMM = """
import os
from comm import create_comm
key = os.environ["OPENAI_API_KEY"].encode()
comm = create_comm(
    target_name="op-test",
    data={"state": {"value": key.decode()}, "buffer_paths": [["a"], ["b"]]},
    buffers=[b"\\x00\\x01" + key + b"\\xff", memoryview(b"plain bytes")],
)
"""


@pytest.mark.kernel
@pytest.mark.timeout(300)
def test_a_widgets_binary_buffers_reach_the_frontend_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    km, kc = start_kernel(tmp_path / "home")
    kernel = Kernel(km, kc)
    try:
        kernel.run("%load_ext openprogram_magics")
        _, msgs = kernel.run(COMM)
        # a variable set in a cell counts at once, and the reply still finds its request
        front = kc.session.session
        kernel.run(f'os.environ["FRONTEND_TOKEN"] = "{front}"; print("{front}")')
        _, after = kernel.run("print(len(key))")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    (opened,) = [m for m in msgs if m["msg_type"] == "comm_open"]
    buffers = [bytes(b) for b in opened["buffers"]]
    assert buffers == [b"\x00\x01" + b"*" * len(KEY) + b"\xff", b"plain bytes"]
    assert opened["content"]["data"]["state"] == {"value": "***"}
    printed = "".join(m["content"]["text"] for m in after if m["msg_type"] == "stream")
    assert printed == f"{len(KEY)}\n"  # the program's own value is whole


class Socket:
    """What a session sends on it, as the frontend reads it."""

    def __init__(self, session: Session) -> None:
        self.session, self.got = session, []

    def send_multipart(self, parts: list[bytes], copy: bool = True) -> None:
        self.got.append(received(self.session, parts))


def test_stream_pieces_are_masked_across_messages_and_a_held_tail_sent_before_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cell's stdout pieces spelling the key show ``***``; a tail that could begin it is
    sent before that cell's next other message, or when another cell begins."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    session = Session(key=b"hmac-key")
    wrapped(session)
    iopub, shell = Socket(session), Socket(session)
    cell, other = (session.msg("execute_request", content={}) for _ in range(2))

    def out(text: str, parent: Any = cell, name: str = "stdout") -> None:
        session.send(iopub, session.msg("stream", {"name": name, "text": text}, parent=parent))

    out("hi\n")
    for i in range(0, len(KEY), 6):
        out(KEY[i : i + 6])
    out(" x " + KEY[:2])  # held back
    out(KEY[:3], parent=other)  # another execution's: held on its own
    session.send(shell, "execute_reply", {"status": "ok"}, parent=cell)
    third = session.msg("execute_request", content={})
    session.send(iopub, "status", {"execution_state": "busy"}, parent=third)
    shown = [(m["parent_header"]["msg_id"], m["content"].get("text")) for m in iopub.got]
    first, second = cell["header"]["msg_id"], other["header"]["msg_id"]
    assert (
        shown
        == [
            (first, "hi\n"),
            (first, "***"),
            (first, " x "),
            (first, KEY[:2]),  # before the reply
            (second, KEY[:3]),  # when another execution begins
            (third["header"]["msg_id"], None),  # its busy
        ]
    )
    assert [m["msg_type"] for m in shell.got] == ["execute_reply"]
    # no secret known at all (this process may know others: other tests' keys, CI's variables)
    for name in [n for n in os.environ if secrets.is_secret_env(n)]:
        monkeypatch.delenv(name)
    for known in ("_explicit", "_values", "_patterns", "_read_from"):  # (all put back after)
        monkeypatch.setattr(secrets, known, getattr(secrets, known))
    secrets._explicit = set()
    clean = session.msg("stream", {"name": "stdout", "text": "sk-"}, parent=cell)
    assert session.send(iopub, clean) is clean and iopub.got[-1]["content"]["text"] == "sk-"
