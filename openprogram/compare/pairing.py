"""Pair the calls of two lines of a session: an LCS over their call trees.

A side is a list of turn-level nodes (in order) and the nodes under them.  Turns are paired
first: a longest common subsequence over their cells' text anchors the turns that ran the
same cell, and between two anchors the turns left over pair by position (an edited cell is
the one at its place).  Inside two paired nodes their children pair by an LCS over
``(kind, function name)`` (an ``llm`` call is keyed by kind alone, so a provider change
still pairs), recursively.  Every node of a subtree left unpaired is listed as added (only
in B) or removed (only in A).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from openprogram.context.nodes import Call

#: node kinds that are part of a call tree (turn-level kinds are the roots)
TURN_KINDS = ("turn", "reply")


@dataclass
class Tree:
    node: Call
    children: list[Tree] = field(default_factory=list)


@dataclass
class Pair:
    """One row of a comparison: a node of A, of B, or of both (paired)."""

    a: Call | None
    b: Call | None
    depth: int  # 0: a turn
    parent: int | None  # index of the enclosing pair in the list (None: a turn)

    @property
    def state(self) -> str:
        if self.a is None:
            return "added"
        if self.b is None:
            return "removed"
        return "paired"

    @property
    def node(self) -> Call:
        found = self.b if self.b is not None else self.a
        assert found is not None
        return found


def build_trees(nodes: Iterable[Call], turns: Sequence[Call]) -> list[Tree]:
    """The call tree under each of ``turns`` (children by ``caller``, in ``seq`` order)."""
    children: dict[str, list[Call]] = {}
    for node in nodes:
        if node.caller is not None:
            children.setdefault(node.caller, []).append(node)
    for group in children.values():
        group.sort(key=lambda c: c.seq)

    def grow(node: Call, seen: set[str]) -> Tree:
        tree = Tree(node)
        stack = [(tree, children.get(node.id, []))]
        while stack:
            parent, kids = stack.pop()
            for kid in kids:
                if kid.id in seen:
                    continue
                seen.add(kid.id)
                sub = Tree(kid)
                parent.children.append(sub)
                stack.append((sub, children.get(kid.id, [])))
        return tree

    seen: set[str] = set()
    return [grow(turn, seen) for turn in turns]


def call_key(node: Call) -> tuple[str, ...]:
    """What two calls must share to pair: their kind and function (an llm call: its kind)."""
    kind = node.kind
    if kind in ("llm", *TURN_KINDS):
        return (kind,)
    return (kind, node.name)


def cell_key(node: Call) -> str:
    """A turn's cell text without its ``%%openprogram`` line (a hash), or its name."""
    text = node.input.get("text") if isinstance(node.input, dict) else None
    if not isinstance(text, str):
        return f"{node.kind}:{node.name}:{node.input!r}"
    body = [ln.rstrip() for ln in text.strip().splitlines() if not ln.startswith("%%")]
    return hashlib.sha256("\n".join(body).strip().encode("utf-8", "replace")).hexdigest()[:16]


def lcs(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[tuple[int, int]]:
    """Index pairs of a longest common subsequence of ``a`` and ``b`` (in order).

    The common head and tail are matched first (two runs of one notebook share most of
    it), so the quadratic table covers only what differs.
    """
    start, end_a, end_b = 0, len(a), len(b)
    while start < end_a and start < end_b and a[start] == b[start]:
        start += 1
    tail = 0
    while (
        tail < end_a - start and tail < end_b - start and a[end_a - 1 - tail] == b[end_b - 1 - tail]
    ):
        tail += 1
    head = [(i, i) for i in range(start)]
    back = [(end_a - tail + i, end_b - tail + i) for i in range(tail)]
    mid_a, mid_b = a[start : end_a - tail], b[start : end_b - tail]
    if not mid_a or not mid_b:
        return head + back
    middle = _lcs_table(mid_a, mid_b)
    return head + [(i + start, j + start) for i, j in middle] + back


def _lcs_table(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[tuple[int, int]]:
    n, m = len(a), len(b)
    # lengths[i][j]: LCS of a[i:] and b[j:]; rows as lists of ints (fast enough for 500 x 500)
    lengths = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row, below, ai = lengths[i], lengths[i + 1], a[i]
        for j in range(m - 1, -1, -1):
            if ai == b[j]:
                row[j] = below[j + 1] + 1
            else:
                right, down = row[j + 1], below[j]
                row[j] = right if right > down else down
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < n and j < m:
        if a[i] == b[j]:
            out.append((i, j))
            i += 1
            j += 1
        elif lengths[i + 1][j] >= lengths[i][j + 1]:
            i += 1
        else:
            j += 1
    return out


def aligned(
    a: Sequence[Any],
    b: Sequence[Any],
    key: Callable[[Any], Hashable],
    *,
    fill_gaps: bool = False,
) -> list[tuple[Any | None, Any | None]]:
    """``a`` and ``b`` in one order: LCS matches paired, the rest alone (``fill_gaps``: the
    items left over between two matches pair by position)."""
    matches = lcs([key(x) for x in a], [key(y) for y in b])
    out: list[tuple[Any | None, Any | None]] = []
    i = j = 0
    for mi, mj in [*matches, (len(a), len(b))]:
        gap_a, gap_b = list(a[i:mi]), list(b[j:mj])
        if fill_gaps:
            both = min(len(gap_a), len(gap_b))
            out.extend(zip(gap_a[:both], gap_b[:both], strict=True))
            gap_a, gap_b = gap_a[both:], gap_b[both:]
        out.extend((x, None) for x in gap_a)
        out.extend((None, y) for y in gap_b)
        if mi < len(a) and mj < len(b):
            out.append((a[mi], b[mj]))
        i, j = mi + 1, mj + 1
    return out


def pair_lines(a: Sequence[Tree], b: Sequence[Tree]) -> list[Pair]:
    """Every node of both sides in one list of :class:`Pair` (preorder, A's order first)."""
    out: list[Pair] = []
    for ta, tb in aligned(a, b, lambda t: cell_key(t.node), fill_gaps=True):
        _emit(out, ta, tb, 0, None)
    return out


def _emit(
    out: list[Pair], ta: Tree | None, tb: Tree | None, depth: int, parent: int | None
) -> None:
    index = len(out)
    out.append(Pair(ta.node if ta else None, tb.node if tb else None, depth, parent))
    rows: list[tuple[Tree | None, Tree | None]]
    if ta is not None and tb is not None:
        rows = aligned(ta.children, tb.children, lambda t: call_key(t.node))
    elif ta is not None:
        rows = [(t, None) for t in ta.children]
    else:
        assert tb is not None
        rows = [(None, t) for t in tb.children]
    for ca, cb in rows:
        _emit(out, ca, cb, depth + 1, index)
