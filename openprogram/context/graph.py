"""The pure DAG logic: which nodes an LLM call at a given frame gets to see.

``Graph`` is written over two plain callables (look up a node, list a frame's children),
so it runs the same over a session on disk and over a dict of hand-built nodes in a test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from openprogram.context.nodes import Call

Lookup = Callable[[str], Call | None]
Children = Callable[[str | None], list[str]]


def chain(
    lookup: Lookup, start: str | None, limit: int, *, stop_at_root: bool = False
) -> list[Call]:
    """Up to ``limit`` nodes of the conversation chain ending at ``start``, oldest first.

    Follows ``predecessor`` links; stops at a node ``lookup`` cannot find, at a cycle, and
    (``stop_at_root``) before the session's root node.
    """
    out: list[Call] = []
    seen: set[str] = set()
    node_id = start
    while node_id is not None and len(out) < limit and node_id not in seen:
        seen.add(node_id)
        node = lookup(node_id)
        if node is None or (stop_at_root and node.kind == "root"):
            break
        out.append(node)
        node_id = node.predecessor
    out.reverse()
    return out


@dataclass
class Visible:
    """What an exec at one frame sees."""

    doc: str | None  # the current frame's docstring (sent exactly once)
    history: list[Call] = field(default_factory=list)  # earlier turn-level nodes, oldest first
    steps: list[Call] = field(default_factory=list)  # earlier finished steps of this frame


class Graph:
    def __init__(self, lookup: Lookup, children: Children, head: str | None) -> None:
        self.lookup = lookup
        self.children = children
        self.head = head

    @classmethod
    def from_nodes(cls, nodes: Mapping[str, Call] | list[Call], head: str | None) -> Graph:
        table = dict(nodes) if isinstance(nodes, Mapping) else {n.id: n for n in nodes}
        kids: dict[str | None, list[str]] = {}
        for node in sorted(table.values(), key=lambda n: n.seq):
            kids.setdefault(node.caller, []).append(node.id)
        return cls(table.get, lambda caller: kids.get(caller, []), head)

    def ancestors(self, node_id: str | None) -> list[Call]:
        """The caller chain of ``node_id``, innermost first (cycle-safe)."""
        out: list[Call] = []
        seen: set[str] = set()
        while node_id is not None and node_id not in seen:
            seen.add(node_id)
            node = self.lookup(node_id)
            if node is None:
                break
            out.append(node)
            node_id = node.caller
        return out

    def turn_level(self, node_id: str | None) -> Call | None:
        """The outermost frame of ``node_id`` (the node on the conversation chain)."""
        chain = self.ancestors(node_id)
        return chain[-1] if chain else None

    def history(self, before: str | None, max_turns: int) -> list[Call]:
        """Up to ``max_turns`` turn-level nodes ending at ``before``, oldest first (no root)."""
        return chain(self.lookup, before, max_turns, stop_at_root=True)

    def visible_for(self, frame_id: str | None, *, max_turns: int = 20) -> Visible:
        """What an exec made inside ``frame_id`` sees (``None``: a top-level exec).

        * ``doc``: the docstring of the frame itself, if it is a function — once;
        * ``history``: the turns before the one this frame belongs to;
        * ``steps``: the frame's earlier children that finished (rejected attempts of a
          ``choices`` gate and still-running calls are left out).
        """
        frames = self.ancestors(frame_id)
        doc = frames[0].metadata.get("doc") if frames else None
        history = self.history(self.history_start(frames), max_turns)
        return Visible(doc=doc or None, history=history, steps=self.steps(frame_id))

    def history_start(self, frames: list[Call]) -> str | None:
        """Where the history of a frame begins (``frames``: its ancestors, innermost first):
        the turn before the one it belongs to, or HEAD for a top-level exec."""
        return frames[-1].predecessor if frames else self.head

    def steps(self, frame_id: str | None) -> list[Call]:
        """The frame's earlier children that finished (rejected attempts of a ``choices``
        gate and still-running calls left out); an ``llm`` step is followed by the tools
        its reply called (``tool`` nodes under it, the tool loop's), in order."""
        steps: list[Call] = []
        if frame_id is not None:
            for child in self._finished(frame_id):
                steps.append(child)
                if child.kind == "llm":
                    steps += [t for t in self._finished(child.id) if t.kind == "tool"]
        return steps

    def _finished(self, frame_id: str) -> list[Call]:
        out: list[Call] = []
        for child_id in self.children(frame_id):
            child = self.lookup(child_id)
            if child is None or child.is_open or child.metadata.get("rejected"):
                continue
            out.append(child)
        return out
