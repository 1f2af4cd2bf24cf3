"""``openprogram.evaluate`` on a real ``dask.distributed.LocalCluster`` (worker processes on
loopback): the cases run on the workers, the nodes come back under the evaluation, and a
re-run after a docstring edit sends only the changed prompts — counted in a call log the
workers' provider writes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dask_cluster import local_cluster
from helpers import reopen
from test_evals import CASES, exact, judge, make_triage, model
from test_scale import cell

import openprogram
from openprogram import create_runtime
from openprogram.providers.base import LLMRequest
from openprogram.providers.test import FunctionProvider


@dataclass
class LoggedModel:
    """The test model, writing one line per request it answers into ``log`` (shared by the
    worker processes, which get copies of the provider)."""

    log: Path

    def __call__(self, request: LLMRequest) -> str:
        with self.log.open("a") as out:
            out.write(str(request.messages[-1].get("content", "")) + "\n")
        return model(request)


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    with local_cluster() as dask_client:
        yield dask_client


def test_an_evaluation_on_dask_reuses_what_did_not_change(
    client: Any, op_home: Path, tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"
    log.touch()
    runtime = create_runtime(FunctionProvider(LoggedModel(log)), backoff=0.0)
    with cell(runtime) as (s, _):
        first = openprogram.evaluate(
            make_triage("Label the ticket as bug or feature."),
            CASES,
            scorers=[exact, judge],
            executor=client,
            progress=False,
        )
    assert len(log.read_text().splitlines()) == 10
    assert first.mean() == {"exact": 0.8, "judge": 0.4}
    edited = make_triage("Label the ticket as bug or feature. Be careful: slowness is a bug.")
    with cell(runtime, s.session_id) as (s, _):
        second = openprogram.evaluate(
            edited, CASES, scorers=[exact, judge], executor=client, progress=False
        )
    sent = log.read_text().splitlines()[10:]
    assert sorted(sent) == sorted(
        [*(c["input"] for c in CASES if c["id"] != "crash"), "Rate the label: bug"]
    )
    assert second.comparison is not None
    assert [c.key for c in second.comparison.changed] == ["slow"]
    nodes = reopen(op_home, s.session_id)
    evaluation = next(n for n in nodes if n.id == second.node_id)
    cases = sorted((n for n in nodes if n.caller == evaluation.id), key=lambda n: n.seq)
    assert [c.metadata["eval_case"] for c in cases] == [c["id"] for c in CASES]
    assert all(c.metadata["worker"].startswith("tcp://127.0.0.1") for c in cases)
