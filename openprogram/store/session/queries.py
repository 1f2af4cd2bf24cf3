"""The read side of an open session: nodes by id, many at once, the whole DAG, children,
the conversation chain, and the light index entries — and the bounded cache of parsed
nodes they share with the write path.

:class:`SessionQueries` is a base of :class:`session.Session`; it only reads what the
session holds (its :class:`NodeIndex`, its :class:`NodeFiles`, the parsed nodes) and never
writes a file or a commit.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from itertools import islice
from pathlib import Path
from typing import Any, NamedTuple

from openprogram.context import graph
from openprogram.context.nodes import Call, NodeFormatError
from openprogram.errors import CorruptedFile
from openprogram.store.session.files import loads
from openprogram.store.session.index import (
    ENTRY_FIELDS,
    F_CALLER,
    F_KIND,
    F_SEQ,
    F_TURN,
    Entry,
    entry_path,
    full_entry,
)
from openprogram.store.session.indextotals import merge_used
from openprogram.store.session.nodefiles import NodeFiles
from openprogram.store.session.nodeindex import NodeIndex

# parsed nodes kept beyond this process's unsaved ones, the least recently used dropped
# first: a prompt's history walk reads ~20 turns (DEFAULT_TURNS), a few nodes each
NODE_CACHE_MAX = 256


class Links(NamedTuple):
    """The conversation chain as the index holds it (see :meth:`SessionQueries.links`)."""

    predecessors: dict[str, str | None]  # a node with no caller -> its predecessor, seq order
    top_seq: int  # the highest seq of any node (-1: none)
    top_turn: int  # the highest turn of any node (0: none)


def _light(e: Entry) -> dict[str, Any]:
    return {
        "id": e[0], "seq": e[1], "turn": e[2], "role": e[3], "name": e[4],
        "caller": e[7], "predecessor": e[8], "created_at": e[9],
        "metadata": {"kind": e[5], "status": e[6]},
    }  # fmt: skip


class SessionQueries:
    """The queries of :class:`session.Session` (which sets these fields)."""

    id: str
    path: Path
    problems: list[str]
    _mu: threading.RLock
    _nodes: dict[str, Call]  # parsed nodes (bounded), ours included
    _dirty: dict[str, Call]  # this process's unsaved nodes
    _index: NodeIndex
    _files: NodeFiles

    def get(self, node_id: str) -> Call:
        """The node ``node_id``: a copy (see ``Call.copy``), so what a reader does to it never
        reaches the session, and a node read while its call runs stays as it was read."""
        with self._mu:
            call = self._nodes.pop(node_id, None)
            if call is not None:
                self._nodes[node_id] = call  # the most recently used now
                return call.copy()
            entry = self._index.find(node_id)
        if entry is None:
            raise KeyError(f"no node {node_id!r} in session {self.id}")
        return self._read_node(entry_path(entry))

    def _read_node(self, rel: str, data: bytes | None = None) -> Call:
        """The node of file ``rel`` (its content ``data`` when read already), cached; a copy
        is returned."""
        try:
            call = Call.from_dict(loads(self._files.read(rel) if data is None else data))
        except (OSError, ValueError, NodeFormatError) as exc:
            raise CorruptedFile(str(self.path / rel), str(exc)) from exc
        with self._mu:
            self._cache(call)
        return call.copy()

    def _all_entries(self) -> list[Entry]:
        with self._mu:
            self._index.load_all()
            return sorted(self._index.entries.values(), key=lambda e: e[F_SEQ])

    def index(self) -> list[dict[str, Any]]:
        """Light entries of every node (``ENTRY_FIELDS``, no input/output), in seq order."""
        return [dict(zip(ENTRY_FIELDS, full_entry(e), strict=True)) for e in self._all_entries()]

    def links(self) -> Links:
        """The predecessor of each node of the conversation chain (no caller: the root, a
        cell, a message, a top-level call, a script's bare ``llm`` call) in seq order, and
        the highest seq and turn of any node: what a pull settles on, read from the index
        without an entry made a dict."""
        entries = self._all_entries()
        return Links(
            {e[0]: e[8] for e in entries if e[F_CALLER] is None},
            max((e[F_SEQ] for e in entries), default=-1),
            max((e[F_TURN] for e in entries), default=0),
        )

    def light_nodes(self) -> list[dict[str, Any]]:
        """Every node as a dict shaped like ``Call.to_dict()`` but from the index only (no
        input, output, doc; metadata holds kind and status): what a layout of the whole DAG
        needs, without reading a node file."""
        return [_light(e) for e in self._all_entries()]

    def light_window(self, tops: int) -> tuple[list[dict[str, Any]], int]:
        """The newest nodes as :meth:`light_nodes` makes them — whole buckets, newest first,
        until they hold ``tops`` turn-level nodes (or the whole session) — and how many
        nodes are older than them.  A node whose predecessor is older is listed without it
        (``metadata.cut``: the view starts there); no node file is read."""
        with self._mu:
            entries = self._index.window(tops)
            older = self._index.older_nodes()
        light = [_light(e) for e in entries]
        known = {e[0] for e in entries}
        kept = []
        for node in light:
            if node["caller"] is not None and node["caller"] not in known:
                older += 1  # called from an older turn (a background run): not in the window
                continue
            if node["predecessor"] is not None and node["predecessor"] not in known:
                node["predecessor"] = None
                node["metadata"]["cut"] = True
            kept.append(node)
        return kept, older

    def totals(self) -> dict[str, Any]:
        """Counts of the whole session from its index (nodes, ``tops`` turn-level nodes,
        ``turns``, ``kinds``, ``statuses``) and what its ``llm`` nodes used (``calls``,
        ``input_tokens``, ``output_tokens``, ``cost``, ``unpriced``): no node file read,
        the totals of sealed buckets kept in the local index cache."""
        with self._mu:
            return self._index.bucket_totals()

    def usage_window(self, turns: int | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """What ``sessions usage`` prints, from the index: the session's :meth:`totals` (its
        ``functions`` naming every caller, ``callers`` emptied) and the ``llm`` entries (as
        :meth:`index` makes them) of the newest buckets, loaded until they hold ``turns``
        turns with ``llm`` nodes (or all the session has; None: every bucket).  No node
        file is read."""
        with self._mu:
            totals = self._index.bucket_totals()
            functions = totals["functions"]
            for caller, used in totals.pop("callers").items():  # outside its bucket: found
                entry = self._index.find(caller)
                name = "(top level)" if entry is None else entry[4]
                merge_used(functions, {name: used})
            totals["callers"] = {}
            if turns is None:
                self._index.load_all()
                loaded = list(self._index.loaded_entries())
            else:
                want = min(turns, totals["llm_turns"])
                tops = max(want, 1)
                while True:
                    loaded = self._index.window(tops)
                    have = len({e[F_TURN] for e in loaded if e[F_KIND] == "llm"})
                    if have >= want or self._index.complete:
                        break
                    tops *= 2  # turns without calls: further back
            calls = sorted((e for e in loaded if e[F_KIND] == "llm"), key=lambda e: e[F_SEQ])
        return totals, [dict(zip(ENTRY_FIELDS, full_entry(e), strict=True)) for e in calls]

    def nodes(self) -> list[Call]:
        """Every readable node in seq order (corrupted ones are listed in ``problems``);
        copies, as :meth:`get`'s."""
        return list(self._read_many(self._all_entries()).values())

    def get_many(self, node_ids: Iterable[str]) -> dict[str, Call]:
        """The readable nodes among ``node_ids``, in that order (unknown ones left out,
        corrupted ones too and listed in ``problems``); copies, as :meth:`get`'s."""
        with self._mu:
            found = [self._index.find(node_id) for node_id in node_ids]
        return self._read_many([entry for entry in found if entry is not None])

    def _read_many(self, entries: list[Entry]) -> dict[str, Call]:
        """Node id -> node; those left out of the working tree read from git in one go."""
        with self._mu:
            wanted = [entry_path(e) for e in entries if e[0] not in self._nodes]
        committed = self._files.read_left_out(wanted)
        out: dict[str, Call] = {}
        for entry in entries:
            try:
                path = entry_path(entry)
                data = committed.pop(path, None)
                if data is None:
                    out[entry[0]] = self.get(entry[0])
                else:
                    out[entry[0]] = self._read_node(path, data)
            except CorruptedFile as exc:
                if str(exc) not in self.problems:
                    self.problems.append(str(exc))
        return out

    def children(self, caller: str | None) -> list[str]:
        """Ids of the nodes ``caller`` made, in seq order.  A node's children are in its
        bucket or newer ones, so only the buckets from the caller's on are loaded."""
        with self._mu:
            if caller is None:
                self._index.load_all()
            else:
                self._index.find(caller)
            return self._index.children(caller)

    def chain(self, start: str | None, limit: int) -> list[Call]:
        """Up to ``limit`` nodes of the conversation chain ending at ``start``, oldest first."""
        return graph.chain(self._readable, start, limit)

    def _readable(self, node_id: str) -> Call | None:
        try:
            return self.get(node_id)
        except (KeyError, CorruptedFile):
            return None

    def _cache(self, call: Call) -> None:
        # bounded memory: NODE_CACHE_MAX saved nodes beside the unsaved ones (which stay: the
        # commit writes them), the least recently used dropped first (dicts keep order)
        nodes = self._nodes
        nodes.pop(call.id, None)
        nodes[call.id] = call
        dirty = self._dirty
        excess = len(nodes) - NODE_CACHE_MAX - len(dirty)
        if excess > 0:
            for node_id in list(islice((k for k in nodes if k not in dirty), excess)):
                del nodes[node_id]
