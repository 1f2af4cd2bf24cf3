"""An evaluation on Dask worker processes with a real provider (the OpenAI SDK against a
loopback wire-level server): each worker builds the provider from its own environment, the
reuse of recorded answers is put back around it, and a re-run after a docstring edit sends
only the changed prompts — counted in the server's requests."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from dask_cluster import local_cluster
from test_evals import CASES, exact, judge, make_triage, model
from test_scale import cell
from wire_server import Recorded, Reply, WireServer

import openprogram
from openprogram import create_runtime
from openprogram.providers.base import LLMRequest


class ModelServer(WireServer):
    """The wire server answering each request with ``model`` (the test model) instead of a
    scripted queue: the cases run in any order."""

    def __init__(self) -> None:
        super().__init__()
        self._seen = threading.local()

    def _record(self, recorded: Recorded) -> None:
        super()._record(recorded)
        self._seen.body = recorded.body

    def _next_reply(self) -> Reply | None:
        body = getattr(self._seen, "body", None) or {}
        return Reply(text=model(LLMRequest(messages=list(body.get("messages") or []))))


def test_reuse_on_workers_that_build_a_real_provider_from_their_environment(
    op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ModelServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")
        monkeypatch.setenv("OPENPROGRAM_MODEL", "gpt-test")
        runtime = create_runtime("openai", "gpt-test", backoff=0.0)
        with local_cluster() as client:  # workers started now: the environment above is theirs
            run: dict[str, Any] = {"executor": client, "progress": False}
            with cell(runtime) as (s, _):
                first = openprogram.evaluate(
                    make_triage("Label the ticket as bug or feature."),
                    CASES,
                    scorers=[exact, judge],
                    **run,
                )
            assert len(server.requests) == 10 and first.mean() == {"exact": 0.8, "judge": 0.4}
            edited = make_triage(
                "Label the ticket as bug or feature. Be careful: slowness is a bug."
            )
            with cell(runtime, s.session_id):
                second = openprogram.evaluate(edited, CASES, scorers=[exact, judge], **run)
    sent = [r.body["messages"][-1]["content"] for r in server.requests[10:]]
    assert sorted(sent) == sorted(
        [*(c["input"] for c in CASES if c["id"] != "crash"), "Rate the label: bug"]
    )
    assert second.reused == 5 and second.comparison is not None
    assert [c.key for c in second.comparison.changed] == ["slow"]
