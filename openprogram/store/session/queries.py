"""The read side of an open session (a base of :class:`session.Session`): SQL over the
``nodes`` table (:mod:`index`) and the bounded cache of parsed nodes.  A node's content is
its record in ``rows`` while in flight, else its file in git.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, NamedTuple

from openprogram.context import graph
from openprogram.context.nodes import Call
from openprogram.errors import CorruptedFile, NodeFormatError
from openprogram.store.session.files import MAX_FILE_BYTES, loads
from openprogram.store.session.history import Repository
from openprogram.store.session.index import (
    ENTRY_FIELDS,
    TURNS_PER_BUCKET,
    Totals,
    Used,
    cat_file,
    counts_as_turn,
    parts_from,
    relpath,
    row_of,
)
from openprogram.store.session.live import LiveState
from openprogram.store.session.safegit import run_git

# parsed nodes kept beside the unsaved ones (LRU): a prompt reads ~20 turns, a few nodes each
NODE_CACHE_MAX = 256
BATCH_MIN = 8  # committed nodes read by one `git cat-file --batch` rather than one by one
ENTRY_SQL = ", ".join(ENTRY_FIELDS)
Entry = tuple[Any, ...]

# the nodes older than a window's first turn: all (kept in ``counts``) less the window's
OLDER = (
    "SELECT (SELECT coalesce(sum(n), 0) FROM counts) - (SELECT count(*) FROM nodes WHERE turn >= ?)"
)


class Links(NamedTuple):
    """The conversation chain as the index holds it (see :meth:`SessionQueries.links`)."""

    predecessors: dict[str, str | None]  # a node with no caller -> its predecessor, seq order
    top_seq: int  # the highest seq of any node (-1: none)
    top_turn: int  # the highest turn of any node (0: none)


@dataclass(frozen=True)
class Line:
    """A line of the conversation other than the one HEAD ends (what a pull names)."""

    tip: str  # the last node of the line
    turns: int  # its turns since it left the line HEAD is on


def walk(chain: Mapping[str, str | None], node: str | None, stop: Collection[str] = ()) -> set[str]:
    """The nodes from ``node`` back through ``chain`` (node -> predecessor) until ``stop``."""
    seen: set[str] = set()
    while node is not None and node not in seen and node not in stop:
        seen.add(node)
        node = chain.get(node)
    return seen


def other_lines(chain: Mapping[str, str | None], head: str | None) -> list[Line]:
    """The lines of ``chain`` (node -> predecessor, seq order) other than the one ``head``
    ends, with their turns since they left it."""
    ours = walk(chain, head)
    skip = ours | {pred for pred in chain.values() if pred is not None}  # followed: no tip
    return [Line(tip, len(walk(chain, tip, ours))) for tip in chain if tip not in skip]


def _entry(e: Entry) -> dict[str, Any]:
    path = e[10] if e[10] is not None else relpath(e[1], e[2], e[3], e[0])
    return dict(zip(ENTRY_FIELDS, (*e[:10], path, *e[11:]), strict=True))


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
    live: LiveState
    git: Repository
    _mu: threading.RLock
    _nodes: dict[str, Call]
    _dirty: dict[str, Call]
    _unindexed: dict[str, Call]

    def _index_recorded(self) -> None:
        """Put the ``nodes`` rows of the states recorded since (a batch, before a read)."""
        if self._unindexed:
            put = self.live.put_index
            self._flush(self._unindexed, lambda calls: put([row_of(call) for call in calls]))

    def _flush(self, held: dict[str, Call], write: Callable[[list[Call]], None]) -> None:
        """``write`` the states ``held``, then forget those that did not change meanwhile."""
        with self._mu:  # (not held while the write lock is taken: it is always taken first)
            calls = list(held.values())
        write(calls)
        with self._mu:
            for call in calls:
                if held.get(call.id) is call:
                    del held[call.id]

    def _query(self, sql: str, args: Iterable[Any] = ()) -> list[Any]:
        """``sql`` over the index, this process's newest states in it."""
        self._index_recorded()
        return self.live.query(sql, args)

    def _entries(self, where: str = "", args: Iterable[Any] = ()) -> list[Entry]:
        return self._query(f"SELECT {ENTRY_SQL} FROM nodes {where} ORDER BY seq", args)

    def get(self, node_id: str) -> Call:
        """A copy of node ``node_id`` (what a reader does to it never reaches the session)."""
        with self._mu:
            call = self._nodes.pop(node_id, None)
            if call is not None:
                self._nodes[node_id] = call  # the most recently used now
                return call.copy()
        found = self._rows("WHERE n.id = ?", (node_id,))
        if not found:
            raise KeyError(f"no node {node_id!r} in session {self.id}")
        _id, body, rel = found[0]
        return self._parse(rel, body if body is not None else self._blob(rel))

    def _blob(self, rel: str) -> bytes | None:
        try:
            return self.git.blob_at(rel)
        except Exception:  # not in HEAD, or objects git cannot read
            return None

    def _parse(self, rel: str, data: bytes | None) -> Call:
        """A copy of the node of file ``rel`` with content ``data`` (None: unreadable)."""
        try:
            if data is None:
                raise FileNotFoundError("not in the live state and not committed")
            call = Call.from_dict(loads(data))
        except (OSError, ValueError, NodeFormatError) as exc:
            raise CorruptedFile(str(self.path / rel), str(exc)) from exc
        with self._mu:
            self._cache(call)
        return call.copy()

    def index(self) -> list[dict[str, Any]]:
        """Light entries of every node (``ENTRY_FIELDS``, no input/output), in seq order."""
        return [_entry(e) for e in self._entries()]

    def links(self) -> Links:
        """The predecessor of each node with no caller in seq order, and the highest seq
        and turn: what a pull settles on."""
        chain = self._query("SELECT id, predecessor FROM nodes WHERE caller IS NULL ORDER BY seq")
        top_seq, top_turn = self._query("SELECT max(seq), max(turn) FROM nodes")[0]
        return Links(dict(chain), -1 if top_seq is None else top_seq, top_turn or 0)

    def light_nodes(self) -> list[dict[str, Any]]:
        """Every node as ``Call.to_dict()`` from the index only (metadata: kind and
        status): what a layout of the whole DAG needs."""
        return [_light(e) for e in self._entries()]

    def _window_start(self, sql: str, count: int) -> int:
        """The first turn of the newest whole buckets holding the ``count``-th newest of
        the turns ``sql`` lists (newest first)."""
        found = self._query(sql + " LIMIT 1 OFFSET ?", (max(count, 1) - 1,))
        if not found:
            return 0
        return found[0][0] // TURNS_PER_BUCKET * TURNS_PER_BUCKET

    def light_window(self, tops: int) -> tuple[list[dict[str, Any]], int]:
        """:meth:`light_nodes` of the newest whole buckets holding ``tops`` turn-level
        nodes, and how many nodes are older; a predecessor older is cut (``metadata.cut``)."""
        first = self._window_start(
            "SELECT turn FROM nodes WHERE caller IS NULL ORDER BY turn DESC", tops
        )
        entries = self._entries("WHERE turn >= ?", (first,))
        older = self._query(OLDER, (first,))[0][0]  # the window counted, not the rest
        known = {e[0] for e in entries}
        kept = []
        for node in map(_light, entries):
            if node["caller"] is not None and node["caller"] not in known:
                older += 1  # called from an older turn (a background run): not in the window
                continue
            if node["predecessor"] is not None and node["predecessor"] not in known:
                node["predecessor"] = None
                node["metadata"]["cut"] = True
            kept.append(node)
        return kept, older

    def totals(self) -> Totals:
        """The session's counts and what its ``llm`` nodes used (``functions``: by their
        caller's name), from the totals the triggers keep (:func:`index.keep_totals`);
        costs rounded once (``math.fsum``: the float a scan of every node gives)."""
        self._index_recorded()
        q = self.live.query
        kinds: dict[str, int] = {}
        statuses: dict[str, int] = {}
        tops: dict[str, int] = {}
        for kind, status, top, n in q("SELECT kind, status, top, n FROM counts"):
            kinds[kind] = kinds.get(kind, 0) + n
            statuses[status] = statuses.get(status, 0) + n
            if top:
                tops[kind] = tops.get(kind, 0) + n
        functions: dict[str, Used] = {}
        costs: list[float] = []
        for name, *used, blob in q("SELECT * FROM usage ORDER BY function"):
            parts = parts_from(blob)
            functions[name] = [*used, [math.fsum(parts)] if parts else []]
            costs += parts
        (llm_turns,) = q("SELECT count(*) FROM llm_turns")[0]
        calls, tokens_in, tokens_out, unpriced = (
            sum(used[i] for used in functions.values()) for i in range(4)
        )
        cost = math.fsum(costs)
        return {
            "nodes": sum(kinds.values()), "tops": sum(tops.values()),
            "turns": sum(n for k, n in tops.items() if counts_as_turn(None, k)),
            "calls": calls, "input_tokens": tokens_in, "output_tokens": tokens_out,
            "unpriced": unpriced, "llm_turns": llm_turns, "cost": cost,
            "cost_parts": [cost] if costs else [], "kinds": kinds, "statuses": statuses,
            "functions": functions, "callers": {},
        }  # fmt: skip

    def usage_window(self, turns: int | None) -> tuple[Totals, list[dict[str, Any]]]:
        """What ``sessions usage`` prints: :meth:`totals` and the ``llm`` entries of the
        newest buckets holding ``turns`` turns with ``llm`` nodes (None: every one)."""
        first = 0
        if turns is not None:
            first = self._window_start(
                "SELECT DISTINCT turn FROM nodes WHERE kind = 'llm' ORDER BY turn DESC", turns
            )
        calls = self._entries("WHERE kind = 'llm' AND turn >= ?", (first,))
        return self.totals(), [_entry(e) for e in calls]

    def nodes(self) -> list[Call]:
        """Copies of every readable node in seq order (corrupted ones in ``problems``)."""
        return list(self._read_many(self._rows("")).values())

    def get_many(self, node_ids: Iterable[str]) -> dict[str, Call]:
        """Copies of the readable nodes among ``node_ids``, in order (corrupted: ``problems``)."""
        wanted = list(dict.fromkeys(node_ids))
        found = self._rows("WHERE n.id IN (SELECT value FROM json_each(?))", (json.dumps(wanted),))
        by_id = {row[0]: row for row in found}
        return self._read_many([by_id[i] for i in wanted if i in by_id])

    def _rows(self, where: str, args: Iterable[Any] = ()) -> list[tuple[str, bytes | None, str]]:
        """(id, record in flight or None, file in git) of the nodes ``where`` selects."""
        found = self._query(
            "SELECT n.id, r.body, n.path, n.seq, n.turn, n.role FROM nodes n"
            f" LEFT JOIN rows r ON r.id = n.id {where} ORDER BY n.seq",
            args,
        )
        return [
            (node_id, body, path if path is not None else relpath(seq, turn, role, node_id))
            for node_id, body, path, seq, turn, role in found
        ]

    def _read_many(self, rows: list[tuple[str, bytes | None, str]]) -> dict[str, Call]:
        """Node id -> node; the committed ones not cached read from git in one go."""
        with self._mu:
            cached = {row[0]: self._nodes.get(row[0]) for row in rows}
        wanted = [rel for node_id, body, rel in rows if body is None and cached[node_id] is None]
        committed = read_paths(self.git, wanted) if len(wanted) >= BATCH_MIN else {}
        out: dict[str, Call] = {}
        for node_id, body, rel in rows:
            try:
                call = cached[node_id]
                if call is not None:
                    out[node_id] = call.copy()
                    continue
                data = body if body is not None else committed.get(rel) or self._blob(rel)
                out[node_id] = self._parse(rel, data)
            except CorruptedFile as exc:
                if str(exc) not in self.problems:
                    self.problems.append(str(exc))
        return out

    def children(self, caller: str | None) -> list[str]:
        """Ids of the nodes ``caller`` made (None: the turn-level nodes), in seq order."""
        found = self._query("SELECT id FROM nodes WHERE caller IS ? ORDER BY seq", (caller,))
        return [node_id for (node_id,) in found]

    def chain(self, start: str | None, limit: int) -> list[Call]:
        """Up to ``limit`` nodes of the chain ending at ``start``, oldest first."""
        return graph.chain(self._readable, start, limit)

    def _readable(self, node_id: str) -> Call | None:
        try:
            return self.get(node_id)
        except (KeyError, CorruptedFile):
            return None

    def _cache(self, call: Call) -> None:
        self._nodes.pop(call.id, None)
        self._nodes[call.id] = call
        self._trim()

    def _trim(self) -> None:
        # NODE_CACHE_MAX saved nodes beside the unsaved ones, least recently used dropped
        nodes, dirty = self._nodes, self._dirty
        excess = len(nodes) - NODE_CACHE_MAX - len(dirty)
        if excess > 0:
            for node_id in list(islice((k for k in nodes if k not in dirty), excess)):
                del nodes[node_id]


def read_paths(repo: Repository, paths: list[str]) -> dict[str, bytes]:
    """Many files of HEAD (one ``ls-tree`` of their buckets, then one ``cat-file
    --batch``: ``<commit>:<path>`` would walk the trees a name); those over
    ``MAX_FILE_BYTES`` left out."""
    commit = repo.read_ref()
    if commit is None or not paths:
        return {}
    # the folders two levels up (history/<bucket>), or the whole tree
    folders = {path.rsplit("/", 2)[0] if path.count("/") >= 2 else "" for path in paths}
    listed = run_git(
        repo.worktree, "ls-tree", "-r", "-l", "-z", "--full-tree", commit.hex(), "--",
        *([] if "" in folders else sorted(folders)), check=False,
    )  # fmt: skip
    blobs: dict[str, bytes] = {}  # path -> hex sha, "<mode> blob <sha> <size>\t<path>"
    for item in listed.stdout.split(b"\0") if listed.returncode == 0 else []:
        info, _, name = item.partition(b"\t")
        parts = info.split()
        if len(parts) == 4 and parts[1] == b"blob" and int(parts[3]) <= MAX_FILE_BYTES:
            blobs[name.decode("utf-8", "surrogateescape")] = parts[2]
    wanted = [path for path in paths if path in blobs]
    fetched = cat_file(repo.worktree, [blobs[path] for path in wanted])
    return {path: got[1] for path, got in zip(wanted, fetched, strict=True) if got is not None}
