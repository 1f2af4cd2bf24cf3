"""One case of an evaluation, as a map item runs it (on a thread here or on a worker).

:class:`CaseRunner` is the function :func:`openprogram.map` runs per case: it writes the
case's node under the evaluation's node (a ``function`` node named ``case <key>`` with
``metadata.eval_case``), runs the evaluated function in that frame, then each scorer — an
``@agentic_function`` (an LLM judge, whose docstring is its rubric) records its own call;
a plain callable is recorded as a ``tool`` node with the score it gave — and ends the node
with the output and the scores.  A scorer that fails or returns no score leaves that score
out and says why in the case's ``score_errors``; the function failing fails the case.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from openprogram.context.nodes import make_call
from openprogram.context.outcome import error_text, finish
from openprogram.scale.evals.cases import Case, score_values, scorer_name
from openprogram.scale.evals.recording import CASE_META
from openprogram.store.vars import get_call_id, get_store, using_call_id


@dataclass
class CaseOutcome:
    """What a case sends back: the function's output, its scores, why a score is missing."""

    key: str
    output: Any
    scores: dict[str, float] = field(default_factory=dict)
    score_errors: dict[str, str] = field(default_factory=dict)


@dataclass
class CaseRunner:
    fn: Callable[..., Any]
    scorers: Sequence[Callable[..., Any]] = ()

    def __call__(self, case: Case) -> CaseOutcome:
        writer = get_store()
        assert writer is not None  # map runs every item inside a recorder
        anchor = get_call_id()
        node = make_call(
            "function",
            f"case {case.key}",
            input={"case": case.raw},
            caller=anchor,
            **{CASE_META: case.key},
        )
        writer.append(node, turn_level=anchor is None)
        started = time.perf_counter()
        outcome = CaseOutcome(case.key, None)
        try:
            with using_call_id(node.id):
                outcome.output = self.fn(case.input)
                for scorer in self.scorers:
                    self._score(scorer, case, outcome, node.id)
        except BaseException as exc:
            finish(node, exc=exc, with_traceback=True, started=started)
            writer.update(node)
            raise
        finish(node, output={"output": outcome.output, "scores": outcome.scores}, started=started)
        if outcome.score_errors:
            node.metadata["score_errors"] = outcome.score_errors
        writer.update(node)
        return outcome

    def _score(
        self, scorer: Callable[..., Any], case: Case, outcome: CaseOutcome, case_id: str
    ) -> None:
        name = scorer_name(scorer)
        writer = get_store()
        assert writer is not None
        node = None
        if not getattr(scorer, "__agentic__", False):  # an agentic judge records itself
            node = make_call("tool", name, input={"output": outcome.output}, caller=case_id)
            node.metadata["scorer"] = True
            writer.append(node)
        try:
            scores = score_values(name, scorer(case.raw, outcome.output))
        except Exception as exc:
            outcome.score_errors[name] = error_text(exc, 300)
            if node is not None:
                finish(node, exc=exc)
                writer.update(node)
            return
        outcome.scores.update(scores)
        if node is not None:
            finish(node, output=scores)
            writer.update(node)
