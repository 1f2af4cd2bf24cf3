"""Which turns a side of a comparison is: a turn, the line ending at a node, or a run.

``nodes`` are every node of one session (``Session.nodes()``).  A spec is a node id, a
turn label (``3``, ``#3``; ``3@alice`` when several people made a turn 3:
:mod:`openprogram.compare.labels`), ``head`` or ``root``; ``--runs`` specs are run
ids (the ``run`` a notebook's kernel stamps on its turns; ``openprogram run`` twice makes
two runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from openprogram.compare.labels import (
    Spec,
    label,
    node_author_key,
    parse_label,
    shared_numbers,
)
from openprogram.context.nodes import Call
from openprogram.errors import UserError

TURN_LEVEL = ("turn", "reply")
MODES = ("turns", "lines", "runs")


@dataclass
class Side:
    label: str  # what the user named, as shown in the report's header
    turns: list[Call]


class Nodes:
    """An index over one session's nodes: by id, and each node's turn-level node."""

    def __init__(self, nodes: Sequence[Call], head_id: str | None = None) -> None:
        self.all = sorted(nodes, key=lambda n: n.seq)
        self.by_id = {n.id: n for n in self.all}
        self.head_id = head_id
        self._turns: dict[str, Call] = {}  # node id -> its turn-level node (turn_of's memo)
        self._shared: set[int] | None = None  # turn numbers several authors made

    def turn_of(self, node: Call) -> Call:
        """The turn-level node ``node`` is under (itself when it is one).  Every node the
        walk passes is remembered with the answer: asking for each node of a turn nested
        ``d`` deep costs O(d) in all, not O(d²)."""
        passed: list[str] = []
        seen: set[str] = set()
        while True:
            known = self._turns.get(node.id)
            if known is not None:
                node = known
                break
            if node.kind in (*TURN_LEVEL, "root") or not node.caller or node.caller in seen:
                break
            seen.add(node.caller)
            up = self.by_id.get(node.caller)
            if up is None:
                break
            passed.append(node.id)
            node = up
        for node_id in passed:
            self._turns[node_id] = node
        return node

    def find(self, spec: str) -> Call:
        """The node ``spec`` names: an id, a turn number (``3``/``#3``) or ``head``."""
        text = spec.strip()
        if text == "root":
            roots = [n for n in self.all if n.kind == "root"]
            if not roots:
                raise UserError("the session has no root node")
            return roots[0]
        if text == "head":
            if self.head_id is None or self.head_id not in self.by_id:
                raise UserError("the session has no HEAD turn yet")
            return self.by_id[self.head_id]
        label_spec = parse_label(text)
        if label_spec is not None:
            return self._turn(label_spec, text)
        node = self.by_id.get(text)
        if node is None:
            near = [n for n in self.by_id if n.startswith(text[:4])][:3]
            hint = f" (nearest: {', '.join(near)})" if near else ""
            raise UserError(f"no node {text!r} in this session{hint}")
        return node

    def _turn(self, spec: Spec, text: str) -> Call:
        """The turn a label names (``5``, ``5@alice``); refused, with the candidates
        listed, when several authors made a turn of that number and none is named."""
        found = [n for n in self.all if n.kind in TURN_LEVEL and n.turn == spec.number]
        if not found:
            raise UserError(f"no turn {spec.number} in this session")
        by_key: dict[str, Call] = {}
        for node in found:  # one person's own turn of a number: the first, as always
            by_key.setdefault(node_author_key(node.metadata), node)
        candidates = sorted(by_key.values(), key=self.label)
        if spec.key is not None:
            if spec.key in by_key or (spec.key == "?" and "" in by_key):
                return by_key[spec.key if spec.key != "?" else ""]
            named = ", ".join(self.label(n) for n in candidates)
            raise UserError(f"no turn {text} in this session (turn {spec.number}: {named})")
        if len(by_key) == 1:
            return found[0]
        listed = "; ".join(f"{self.label(n)} ({n.id}, {n.name})" for n in candidates)
        raise UserError(
            f"turn {spec.number} is ambiguous: several people made a turn {spec.number} "
            f"({listed}); name one"
        )

    def label(self, node: Call) -> str:
        """``node``'s turn label: its number, by author when several made that number
        (:mod:`openprogram.compare.labels`)."""
        if self._shared is None:
            self._shared = shared_numbers(
                (n.turn, node_author_key(n.metadata)) for n in self.all if n.kind in TURN_LEVEL
            )
        return label(node.turn, node_author_key(node.metadata), self._shared)

    def line(self, tip: Call) -> list[Call]:
        """The turns from the session's root to ``tip``'s turn, oldest first (by
        ``predecessor``, the conversation chain)."""
        out: list[Call] = []
        node: Call | None = self.turn_of(tip)
        seen: set[str] = set()
        while node is not None and node.id not in seen and node.kind != "root":
            seen.add(node.id)
            if node.kind in TURN_LEVEL:
                out.append(node)
            node = self.by_id.get(node.predecessor) if node.predecessor else None
        out.reverse()
        return out

    def runs(self) -> list[str]:
        """The runs of the session (a notebook's kernels), in the order they began."""
        order: list[str] = []
        for node in self.all:
            run = node.metadata.get("run") if node.kind == "turn" else None
            if isinstance(run, str) and run not in order:
                order.append(run)
        return order

    def run_turns(self, run: str) -> list[Call]:
        return [n for n in self.all if n.kind == "turn" and n.metadata.get("run") == run]


def sides(index: Nodes, a: str | None, b: str | None, mode: str) -> tuple[Side, Side, int]:
    """The two sides ``a`` and ``b`` name in ``mode`` (``turns``, ``lines``, ``runs``) and
    how many turns they share (lines: the common start, left out of both)."""
    if mode not in MODES:
        raise UserError(f"unknown comparison {mode!r}; one of {', '.join(MODES)}")
    if mode == "runs":
        runs = index.runs()
        if a is None and b is None:
            if len(runs) < 2:
                raise UserError(
                    f"the session has {len(runs)} run(s) of a notebook; `--runs` needs two "
                    "(run the notebook again, e.g. `openprogram run nb.ipynb`)"
                )
            a, b = runs[-2], runs[-1]
        if a is None or b is None:
            raise UserError("--runs takes two run ids, or none (the last two runs)")
        for run in (a, b):
            if run not in runs:
                raise UserError(f"no run {run!r} in this session; runs: {', '.join(runs) or '-'}")
        return Side(f"run {a}", index.run_turns(a)), Side(f"run {b}", index.run_turns(b)), 0
    if a is None or b is None:
        raise UserError(f"diff needs two {mode} (A and B)")
    node_a, node_b = index.find(a), index.find(b)
    if mode == "turns":
        ta, tb = index.turn_of(node_a), index.turn_of(node_b)
        side_a = Side(f"turn {index.label(ta)} ({ta.id})", [ta])
        return side_a, Side(f"turn {index.label(tb)} ({tb.id})", [tb]), 0
    line_a, line_b = index.line(node_a), index.line(node_b)
    shared = 0
    while shared < min(len(line_a), len(line_b)) and line_a[shared].id == line_b[shared].id:
        shared += 1
    return (
        Side(f"the line ending at {a}", line_a[shared:]),
        Side(f"the line ending at {b}", line_b[shared:]),
        shared,
    )
