"""What an evaluation gives back: :class:`EvalResult` (per case, totals, means) and
:class:`EvalComparison` (which cases changed score between two evaluations, and why).

Both are built from the session's nodes (pure), so an earlier evaluation reads exactly as
the one just run.  Why a case's score moved is the project's one call-by-call diff
(:func:`openprogram.compare.diffs.compare`) of the two case nodes: the docstring, prompt and
answer diffs of every call under them and the sentence that says what changed.  Each
renders as a table (:mod:`openprogram.scale.evals.table`) in a notebook.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from openprogram.compare.diffs import Report, compare
from openprogram.compare.sides import Nodes, Side
from openprogram.context.nodes import COMPLETED, Call
from openprogram.scale.evals.recording import (
    EVAL_META,
    REUSED_META,
    cases_under,
    children_of,
    recorded_scores,
    subtree,
)
from openprogram.store.session.index import usage_of


@dataclass
class CaseResult:
    key: str
    case: Any  # the case as given (recorded: its JSON-safe copy)
    output: Any
    scores: dict[str, float]
    error: str | None = None  # the function failed on this case
    score_errors: dict[str, str] = field(default_factory=dict)
    tokens: int = 0  # of the calls sent now (reused answers cost nothing)
    cost: float | None = None  # USD; None: no call was priced
    calls: int = 0  # LLM calls made for the case (sent or reused)
    reused: int = 0  # of which answered from the earlier recording
    node_id: str = ""


@dataclass
class EvalResult:
    """One evaluation: ``cases`` (a :class:`CaseResult` each, in order), ``scores`` (case key
    -> scorer -> score), :meth:`mean`, and :meth:`compare` with another evaluation.
    ``comparison``: with the earlier evaluation of the same function and cases, if any."""

    function: str
    cases: list[CaseResult]
    scorers: list[str]
    session_id: str = ""
    node_id: str = ""
    turn: int = 0
    comparison: EvalComparison | None = None
    # its own nodes and the callers above it (what the call-by-call diff reads)
    nodes: Sequence[Call] = field(default=(), repr=False)

    @property
    def scores(self) -> dict[str, dict[str, float]]:
        return {c.key: dict(c.scores) for c in self.cases}

    @property
    def names(self) -> list[str]:
        """Every score name, in the order first met (a dict scorer gives several)."""
        out: dict[str, None] = {}
        for case in self.cases:
            out.update(dict.fromkeys(case.scores))
        return list(out)

    def mean(self, name: str | None = None) -> Any:
        """Mean of each score over the cases that have it (``name``: that one, a float;
        None when no case has it)."""
        means: dict[str, float | None] = {}
        for score in self.names if name is None else [name]:
            values = [c.scores[score] for c in self.cases if score in c.scores]
            means[score] = sum(values) / len(values) if values else None
        return means[name] if name is not None else means

    @property
    def failed(self) -> int:
        return sum(1 for c in self.cases if c.error is not None)

    @property
    def tokens(self) -> int:
        return sum(c.tokens for c in self.cases)

    @property
    def cost(self) -> float | None:
        priced = [c.cost for c in self.cases if c.cost is not None]
        return sum(priced) if priced else None

    @property
    def sent(self) -> int:
        return sum(c.calls - c.reused for c in self.cases)

    @property
    def reused(self) -> int:
        return sum(c.reused for c in self.cases)

    @property
    def label(self) -> str:
        return f"evaluation of {self.function} at turn {self.turn} ({self.node_id})"

    def summary(self) -> dict[str, Any]:
        """What the evaluation's node records as its output."""
        return {
            "cases": len(self.cases),
            "failed": self.failed,
            "mean": self.mean(),
            "tokens": self.tokens,
            "cost": self.cost,
            "llm_calls_sent": self.sent,
            "llm_calls_reused": self.reused,
        }

    def compare(self, other: EvalResult) -> EvalComparison:
        """How ``self`` differs from ``other`` (the earlier one), case by case."""
        both = {n.id: n for n in [*other.nodes, *self.nodes]}
        return compare_results(other, self, list(both.values()))

    def _repr_html_(self) -> str:
        from openprogram.scale.evals.table import result_html

        return result_html(self)

    def _repr_markdown_(self) -> str:
        from openprogram.scale.evals.table import result_markdown

        return result_markdown(self)

    def __str__(self) -> str:
        from openprogram.scale.evals.table import result_text

        return result_text(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython's text/plain
        printer.text(str(self))

    def __repr__(self) -> str:
        return f"<EvalResult {self.function}: {len(self.cases)} cases, mean {self.mean()}>"


@dataclass
class CaseChange:
    """A case whose scores differ between two evaluations, and the diff that explains it."""

    key: str
    before: dict[str, float]
    after: dict[str, float]
    error_before: str | None
    error_after: str | None
    report: Report | None = None  # the call-by-call diff of the two case nodes

    @property
    def delta(self) -> float:
        """The summed change of the scores both have (> 0: better)."""
        shared = set(self.before) & set(self.after)
        return sum(self.after[k] - self.before[k] for k in shared)

    @property
    def why(self) -> list[str]:
        return self.report.findings if self.report is not None else []


@dataclass
class EvalComparison:
    before: EvalResult
    after: EvalResult
    changed: list[CaseChange]
    added: list[str]  # case keys only in ``after``
    removed: list[str]  # only in ``before``
    same: int  # cases with the same scores

    @property
    def better(self) -> list[CaseChange]:
        return [c for c in self.changed if c.delta > 0]

    @property
    def worse(self) -> list[CaseChange]:
        return [c for c in self.changed if c.delta < 0]

    def mean_deltas(self) -> dict[str, tuple[float | None, float | None]]:
        before, after = self.before.mean(), self.after.mean()
        return {k: (before.get(k), after.get(k)) for k in dict.fromkeys([*before, *after])}

    def _repr_html_(self) -> str:
        from openprogram.scale.evals.table import comparison_html

        return comparison_html(self)

    def _repr_markdown_(self) -> str:
        from openprogram.scale.evals.table import comparison_markdown

        return comparison_markdown(self)

    def __str__(self) -> str:
        from openprogram.scale.evals.table import comparison_text

        return "\n".join(comparison_text(self))

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def __repr__(self) -> str:
        return (
            f"<EvalComparison {len(self.changed)} changed ({len(self.better)} better, "
            f"{len(self.worse)} worse), {self.same} same>"
        )


def result_of(
    evaluation: Call,
    nodes: Sequence[Call],
    *,
    session_id: str = "",
    outputs: Mapping[str, Any] | None = None,
) -> EvalResult:
    """The :class:`EvalResult` the nodes of ``evaluation`` record (``outputs``: the live
    values by case key, instead of their recorded copies)."""
    kids = children_of(nodes)
    info = evaluation.metadata.get(EVAL_META) or {}
    cases = [
        _case_result(key, node, kids, outputs)
        for key, node in cases_under(evaluation, kids).items()
    ]
    return EvalResult(
        function=str(info.get("function") or evaluation.name),
        cases=cases,
        scorers=[str(s) for s in info.get("scorers") or []],
        session_id=session_id,
        node_id=evaluation.id,
        turn=evaluation.turn,
        nodes=[*_callers(evaluation, nodes), *subtree(evaluation, kids)],
    )


def _callers(node: Call, nodes: Sequence[Call]) -> list[Call]:
    """The nodes above ``node`` (its frame, up to its turn)."""
    by_id = {n.id: n for n in nodes}
    out: list[Call] = []
    up = by_id.get(node.caller) if node.caller else None
    while up is not None and all(up.id != n.id for n in out):
        out.append(up)
        up = by_id.get(up.caller) if up.caller else None
    return out


def _case_result(
    key: str, node: Call, kids: dict[str, list[Call]], outputs: Mapping[str, Any] | None
) -> CaseResult:
    recorded = node.output.get("output") if isinstance(node.output, dict) else None
    raw = node.input.get("case") if isinstance(node.input, dict) else node.input
    errors = node.metadata.get("score_errors")
    result = CaseResult(
        key=key,
        case=raw,
        output=outputs[key] if outputs is not None and key in outputs else recorded,
        scores=recorded_scores(node),
        error=None if node.status == COMPLETED else str(node.metadata.get("error") or node.status),
        score_errors=dict(errors) if isinstance(errors, dict) else {},
        node_id=node.id,
    )
    for call in subtree(node, kids):
        if call.kind != "llm":
            continue
        result.calls += 1
        if call.metadata.get(REUSED_META):
            result.reused += 1
        input_tokens, output_tokens, cost = usage_of(call.metadata)
        result.tokens += (input_tokens or 0) + output_tokens
        if cost is not None:
            result.cost = (result.cost or 0.0) + cost
    return result


def compare_results(before: EvalResult, after: EvalResult, nodes: Sequence[Call]) -> EvalComparison:
    """Which cases changed score from ``before`` to ``after`` and, for each, the diff of
    their two case nodes (``nodes``: the session's, holding both)."""
    old = {c.key: c for c in before.cases}
    new = {c.key: c for c in after.cases}
    index: Nodes | None = None
    changed: list[CaseChange] = []
    same = 0
    for key, case in new.items():
        earlier = old.get(key)
        if earlier is None:
            continue
        if earlier.scores == case.scores and (earlier.error is None) == (case.error is None):
            same += 1
            continue
        change = CaseChange(key, earlier.scores, case.scores, earlier.error, case.error)
        if index is None:
            index = Nodes(nodes)
        a, b = index.by_id.get(earlier.node_id), index.by_id.get(case.node_id)
        if a is not None and b is not None:
            change.report = compare(
                index,
                Side(f"case {key} ({before.label})", [a]),
                Side(f"case {key} ({after.label})", [b]),
            )
        changed.append(change)
    added = [k for k in new if k not in old]
    removed = [k for k in old if k not in new]
    return EvalComparison(before, after, changed, added, removed, same)
