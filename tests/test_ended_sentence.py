"""A failed chat reply or goal turn is said in words: "the reply failed: …", never "the reply
ended error: …" (the status code read out as if it were English)."""

from __future__ import annotations

from typing import Any

import pytest

from openprogram.cli import main
from openprogram.context.outcome import ended_sentence


@pytest.mark.timeout(60)
def test_openprogram_chat_says_the_reply_failed(
    capsys: pytest.CaptureFixture[str], wire: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wire_server import Reply

    from openprogram.providers.network import allow_model_requests

    monkeypatch.setenv("OPENAI_BASE_URL", wire.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wire-chat")
    wire.reply(Reply(status=401, error_message="Incorrect API key provided"))
    with allow_model_requests(True):
        assert main(["chat", "--provider", "openai", "-m", "hello"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("openprogram: the reply failed: ") and "401" in err
    assert "ended error" not in err


def test_each_status_reads_as_a_sentence() -> None:
    assert ended_sentence("the turn", "error", "ValueError: x") == "the turn failed: ValueError: x"
    assert ended_sentence("the reply", "cancelled") == "the reply was cancelled"
    assert ended_sentence("the reply", "interrupted", "") == "the reply was interrupted"
    assert ended_sentence("the reply", "odd") == "the reply ended with status 'odd'"
