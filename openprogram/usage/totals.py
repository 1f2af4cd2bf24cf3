"""Usage totals over recorded nodes (pure): per call, function, turn and session.

Everything is summed from the ``llm`` nodes' ``metadata.usage`` and ``metadata.cost`` —
the nodes are the record, so the table always equals the sum of what was recorded.  A
call without a price counts its tokens and marks the total ``unpriced``.  Costs are summed
exactly (``index.exact_add``): the same float whatever the order, so the totals the
index keeps (:func:`index_usage_report`) equal a scan of every node.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from openprogram.context.nodes import Call
from openprogram.store.session.index import Totals as IndexTotals
from openprogram.store.session.index import Used, exact_add, usage_of


@dataclass
class Totals:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    unpriced: int = 0  # calls with tokens but no price
    parts: list[float] = field(default_factory=list, repr=False, compare=False)  # exact cost

    @classmethod
    def of_used(cls, used: Used) -> Totals:
        """From the index's totals (``index.Used``)."""
        parts = list(used[4])
        return cls(used[0], used[1], used[2], math.fsum(parts), used[3], parts)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, node: Call) -> None:
        self.add_used(*usage_of(node.metadata))

    def add_used(self, input_tokens: int | None, output_tokens: int, cost: float | None) -> None:
        """Count one call that used these (``usage_of``: input tokens None when it recorded
        no usage, cost None when it has no price)."""
        self.calls += 1
        self.input_tokens += input_tokens or 0
        self.output_tokens += output_tokens
        if cost is not None:
            exact_add(self.parts, cost)
            self.cost = math.fsum(self.parts)
        elif input_tokens is not None:
            self.unpriced += 1

    @property
    def priced(self) -> bool:
        """Whether any call counted here had a price (``parts`` holds each priced cost)."""
        return bool(self.parts)

    def cost_text(self) -> str:
        """``$0.0123``, ``$0.0123 (+2 unpriced)``, or ``unpriced`` when no call had a price
        — never a dollar figure that is zero only because nothing is priced (``-`` when no
        call recorded any usage)."""
        if not self.priced:
            return "unpriced" if self.unpriced else "-" if self.calls else "$0.0000"
        text = f"${self.cost:.4f}"
        return text + (f" (+{self.unpriced} unpriced)" if self.unpriced else "")


@dataclass
class UsageReport:
    session: Totals = field(default_factory=Totals)
    turns: dict[int, Totals] = field(default_factory=dict)
    functions: dict[str, Totals] = field(default_factory=dict)
    calls: list[tuple[Call, str]] = field(default_factory=list)  # (llm node, its function)
    older_turns: int = 0  # turns with calls left out of ``turns`` (the newest ones listed)


def usage_rows(nodes: Iterable[Call]) -> UsageReport:
    """Sum the ``llm`` nodes of ``nodes`` by turn, by calling function and overall."""
    nodes = list(nodes)
    by_id = {n.id: n for n in nodes}
    report = UsageReport()
    for node in sorted(nodes, key=lambda n: n.seq):
        if node.kind != "llm":
            continue
        caller = by_id.get(node.caller) if node.caller else None
        function = caller.name if caller is not None else "(top level)"
        report.calls.append((node, function))
        report.session.add(node)
        report.turns.setdefault(node.turn, Totals()).add(node)
        report.functions.setdefault(function, Totals()).add(node)
    return report


def _line(label: str, t: Totals) -> str:
    from openprogram.view.inert import terminal_text  # a function's name: a session's text

    return (
        f"{terminal_text(label)[:32]:<32} {t.calls:>5} {t.input_tokens:>9} {t.output_tokens:>9} "
        f"{t.tokens:>9}  {t.cost_text()}"
    )


def usage_table(nodes: Iterable[Call], *, calls: bool = False) -> str:
    """The report as text: by function, by turn, the session total (and each call)."""
    return report_table(usage_rows(nodes), calls=calls)


def index_usage_rows(entries: Iterable[Mapping[str, Any]]) -> UsageReport:
    """:func:`usage_rows` from a session's index (``Session.index()``: each node's tokens
    and cost are columns of it), no node read; ``calls`` is left empty."""
    entries = list(entries)
    names = {e["id"]: e["name"] for e in entries}
    report = UsageReport()
    for entry in entries:
        if entry["kind"] != "llm":
            continue
        caller = entry["caller"]
        function = names.get(caller, "(top level)") if caller else "(top level)"
        used = entry["tokens_in"], entry["tokens_out"], entry["cost"]
        report.session.add_used(*used)
        report.turns.setdefault(entry["turn"], Totals()).add_used(*used)
        report.functions.setdefault(function, Totals()).add_used(*used)
    return report


def index_usage_report(
    totals: IndexTotals, entries: Iterable[Mapping[str, Any]], turns: int | None
) -> UsageReport:
    """:func:`index_usage_rows` from the totals the index keeps (``Session.usage_window``:
    the session's and each function's, every caller named) and the entries of the newest
    buckets: the newest ``turns`` turns with calls (None: each) are listed, ``older_turns``
    says how many more there are."""
    report = UsageReport()
    report.session = Totals(
        totals["calls"],
        totals["input_tokens"],
        totals["output_tokens"],
        totals["cost"],
        totals["unpriced"],
        list(totals["cost_parts"]),
    )
    report.functions = {name: Totals.of_used(u) for name, u in totals["functions"].items()}
    newest = index_usage_rows(entries).turns
    kept = sorted(newest)[-turns:] if turns is not None else sorted(newest)
    report.turns = {turn: newest[turn] for turn in kept}
    report.older_turns = max(0, totals["llm_turns"] - len(kept))
    return report


def report_table(report: UsageReport, *, calls: bool = False) -> str:
    """A :class:`UsageReport` as text: by function, by turn, the session total (and each
    call, when ``calls`` and the report lists them)."""
    header = f"{'':<32} {'calls':>5} {'input':>9} {'output':>9} {'tokens':>9}  cost (USD)"
    lines = [header, "by function"]
    lines += [_line(f"  {name}", t) for name, t in sorted(report.functions.items())]
    lines.append("by turn")
    if report.older_turns:
        lines.append(f"  … {report.older_turns} older turns not shown (--turns all)")
    lines += [_line(f"  turn {turn}", t) for turn, t in sorted(report.turns.items())]
    if calls:
        lines.append("by call")
        for node, function in report.calls:
            one = Totals()
            one.add(node)
            model = node.metadata.get("model") or node.name
            lines.append(_line(f"  {node.id[:10]} {function}:{model}", one))
    lines.append(_line("session", report.session))
    if report.session.unpriced:
        lines.append(UNPRICED_NOTE.format(n=report.session.unpriced))
    return "\n".join(lines)


UNPRICED_NOTE = (
    "{n} unpriced call(s): tokens counted, no cost. A price set now "
    "(openprogram.usage.set_price or $OPENPROGRAM_HOME/prices.json) prices later calls; "
    "a recorded call keeps the cost it was recorded with."
)


def summarize(nodes: Iterable[Call]) -> dict[str, Any]:
    """The session total as a dict (what ``%openprogram usage`` returns); ``cost`` is None
    when no call had a price (not a 0.0 that only means nothing was priced)."""
    t = usage_rows(nodes).session
    return {
        "calls": t.calls,
        "input_tokens": t.input_tokens,
        "output_tokens": t.output_tokens,
        "tokens": t.tokens,
        "cost": round(t.cost, 10) if t.priced else None,
        "unpriced": t.unpriced,
    }
