"""What an earlier evaluation recorded, read from a session's nodes (pure).

An evaluation is a ``function`` node named ``evaluate <fn>`` with ``metadata.evaluation``
(the function's name, the case keys, the scorers); each case is a ``function`` node under
it with ``metadata.eval_case`` (its key), and under the case hang the function's call, the
scorers' calls and every LLM call they made.  :func:`earlier_evaluation` finds the newest
evaluation of the same function sharing case keys with this one; :func:`case_recordings`
gives, per case, what the one stale rule (:func:`openprogram.compare.stale.stale_reasons`)
compares with — the functions it ran (docstring and code hashes) and the models that
answered — and the answered LLM calls a re-run may reuse.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from openprogram.compare.diffs import prompt_text
from openprogram.compare.stale import RecordedCell
from openprogram.context.nodes import Call

EVAL_META: Final = "evaluation"  # on the evaluation's node: function, cases, scorers
CASE_META: Final = "eval_case"  # on a case's node: its key
REUSED_META: Final = "reused_from"  # on an llm node answered from a recording: its node id
TURN_FRAME: Final = "<turn>"


@dataclass(frozen=True)
class RecordedCall:
    """An answered LLM call of a case: the function it was made in, its own prompt (without
    the earlier turns), the reply and the model that gave it."""

    node_id: str
    function: str
    own: str
    reply: str
    model: str


@dataclass
class CaseRecording:
    key: str
    node: Call
    cell: RecordedCell = field(default_factory=RecordedCell)  # what stale_reasons reads
    calls: list[RecordedCall] = field(default_factory=list)


def is_evaluation(node: Call, function: str | None = None) -> bool:
    info = node.metadata.get(EVAL_META)
    if node.kind != "function" or not isinstance(info, dict):
        return False
    return function is None or info.get("function") == function


def case_key(node: Call) -> str | None:
    key = node.metadata.get(CASE_META)
    return key if isinstance(key, str) else None


def children_of(nodes: Iterable[Call]) -> dict[str, list[Call]]:
    """Caller id -> the nodes it made, in seq order."""
    out: dict[str, list[Call]] = {}
    for node in sorted(nodes, key=lambda n: n.seq):
        if node.caller is not None:
            out.setdefault(node.caller, []).append(node)
    return out


def subtree(node: Call, kids: dict[str, list[Call]]) -> list[Call]:
    """``node`` and everything under it, in preorder."""
    out: list[Call] = []
    stack = [node]
    seen: set[str] = set()
    while stack:
        top = stack.pop()
        if top.id in seen:
            continue
        seen.add(top.id)
        out.append(top)
        stack.extend(reversed(kids.get(top.id, [])))
    return out


def cases_under(evaluation: Call, kids: dict[str, list[Call]]) -> dict[str, Call]:
    """Case key -> the newest case node of ``evaluation``."""
    return {k: n for n in kids.get(evaluation.id, []) if (k := case_key(n)) is not None}


def earlier_evaluation(
    nodes: Sequence[Call], function: str, keys: Iterable[str], *, before: int | None = None
) -> Call | None:
    """The newest evaluation of ``function`` (older than seq ``before``) with a case key
    among ``keys``, or None."""
    wanted = set(keys)
    kids = children_of(nodes)
    found = None
    for node in nodes:
        if before is not None and node.seq >= before:
            continue
        if not is_evaluation(node, function) or (found and found.seq > node.seq):
            continue
        if wanted & set(cases_under(node, kids)):
            found = node
    return found


def frame_name(node: Call | None) -> str:
    """The function a call made in frame ``node`` is made in (as the replay names it)."""
    if node is None or node.kind in ("turn", "root"):
        return TURN_FRAME
    return str(node.name)


def case_recordings(evaluation: Call, nodes: Sequence[Call]) -> dict[str, CaseRecording]:
    """Per case key of ``evaluation``: what it ran and the LLM calls it answered."""
    kids = children_of(nodes)
    out: dict[str, CaseRecording] = {}
    for key, case in cases_under(evaluation, kids).items():
        rec = CaseRecording(key, case)
        rec.cell.turns.append(case)
        by_id = {}
        for node in subtree(case, kids):
            by_id[node.id] = node
            meta = node.metadata
            if node.kind == "function" and meta.get("doc_hash") is not None:
                hashes = (meta.get("doc_hash"), meta.get("source_hash"))
                rec.cell.functions.setdefault(node.name, set()).add(hashes)
            if node.kind != "llm":
                continue
            answered = node.status == "completed" or meta.get("rejected")
            if not answered or node.output is None or meta.get("tool_calls"):
                continue
            model = str(meta.get("model") or "")
            rec.cell.models.add((node.name, model or None))
            frame = by_id.get(node.caller) if node.caller is not None else None
            rec.calls.append(
                RecordedCall(
                    node.id,
                    frame_name(frame),
                    prompt_text(meta.get("messages")),
                    str(node.output),
                    model,
                )
            )
        out[key] = rec
    return out


def recorded_scores(case: Call) -> dict[str, float]:
    """The scores a case node recorded (its output's ``scores``)."""
    scores = case.output.get("scores") if isinstance(case.output, dict) else None
    if not isinstance(scores, dict):
        return {}
    return {
        str(k): float(v)
        for k, v in scores.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
