"""Streaming a reply to where the user is looking (``agentic_programming/echo.py``): a plain
exec in the frame an echo is installed for streams its reply as it arrives, secrets masked
even when split across pieces; a gated exec does not stream; with ``per_reply`` each reply
gets an output of its own, closed when the reply ends."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from openprogram import create_runtime, session_context
from openprogram.agentic_programming.echo import Echo, echo_for, using_echo
from openprogram.providers.test import TestProvider
from openprogram.store.session.store import SessionStore

KEY = "sk-test-" + "k3y" * 10


def test_a_plain_exec_streams_its_reply_and_a_gated_one_does_not(tmp_path: Path) -> None:
    out = io.StringIO()
    runtime = create_runtime(TestProvider())
    store = SessionStore(tmp_path / "home")
    try:
        with session_context("nb_echo", db=store, runtime=runtime), using_echo(Echo(None, out)):
            assert echo_for(None) is not None and echo_for("n_other") is None
            reply = runtime.exec("Say something")
            streamed = out.getvalue()
            assert (
                streamed.endswith("\n")
                and streamed.strip() == reply == "[test reply] Say something"
            )
            runtime.exec("Pick one", choices=["bug", "feature"])
            assert out.getvalue() == streamed  # a gated answer is not streamed
    finally:
        store.close()


def test_a_secret_split_across_pieces_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    out = io.StringIO()
    echo = Echo(None, out)
    for piece in ("the key is ", KEY[:10], KEY[10:], " — keep it"):
        echo(piece)
    echo.end()
    assert out.getvalue() == "the key is *** — keep it\n"
    assert echo.total == len("the key is ") + len(KEY) + len(" — keep it")


class Output(io.StringIO):
    closed_with: str | None = None

    def close(self) -> None:
        self.closed_with = self.getvalue()


def test_each_reply_gets_its_own_output_closed_at_its_end() -> None:
    outputs: list[Output] = []

    def new_output() -> Output:
        outputs.append(Output())
        return outputs[-1]

    echo = Echo(None, per_reply=new_output)
    echo("first ")
    echo("reply")
    echo.end()
    echo("")  # an empty piece opens nothing
    echo("second")
    echo.end()
    assert [o.closed_with for o in outputs] == ["first reply\n", "second\n"]
