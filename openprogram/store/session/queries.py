"""The read side of an open session: nodes by id, many at once, the whole DAG, children,
the conversation chain, the light index entries and the totals — SQL over the ``nodes``
table of the live database (:mod:`index`), and the bounded cache of parsed nodes they
share with the write path.

A node's content is its record in the ``rows`` table while it is in flight, else its file
in git (one ``git cat-file --batch`` for many).  :class:`SessionQueries` is a base of
:class:`session.Session`; it never writes a file or a commit.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
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

# parsed nodes kept beyond this process's unsaved ones, the least recently used dropped
# first: a prompt's history walk reads ~20 turns (DEFAULT_TURNS), a few nodes each
NODE_CACHE_MAX = 256
BATCH_MIN = 8  # committed nodes read by one `git cat-file --batch` rather than one by one
# the columns of a light entry (``Session.index()``)
ENTRY_SQL = ", ".join(ENTRY_FIELDS)
Entry = tuple[Any, ...]

# the nodes older than a window's first turn: all (kept in ``counts``) less the window's
_OLDER = (
    "SELECT (SELECT coalesce(sum(n), 0) FROM counts) - (SELECT count(*) FROM nodes WHERE turn >= ?)"
)


class Links(NamedTuple):
    """The conversation chain as the index holds it (see :meth:`SessionQueries.links`)."""

    predecessors: dict[str, str | None]  # a node with no caller -> its predecessor, seq order
    top_seq: int  # the highest seq of any node (-1: none)
    top_turn: int  # the highest turn of any node (0: none)


def _path(e: Entry) -> str:
    return e[10] if e[10] is not None else relpath(e[1], e[2], e[3], e[0])


def _entry(e: Entry) -> dict[str, Any]:
    return dict(zip(ENTRY_FIELDS, (*e[:10], _path(e), *e[11:]), strict=True))


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
    _nodes: dict[str, Call]  # parsed nodes (bounded), ours included
    _dirty: dict[str, Call]  # this process's unsaved nodes
    _unindexed: dict[str, Call]  # this process's node states whose index rows wait

    def _index_recorded(self) -> None:
        """Put the index rows of the node states this process recorded since (a batch,
        before a read: the row per event is the record's)."""
        if not self._unindexed:
            return
        with self._mu:  # (not held while the write lock is taken: it is always taken first)
            calls = list(self._unindexed.values())
        self.live.put_index([row_of(call) for call in calls])
        with self._mu:
            for call in calls:
                if self._unindexed.get(call.id) is call:
                    del self._unindexed[call.id]

    def _query(self, sql: str, args: Iterable[Any] = ()) -> list[Any]:
        """``sql`` over the index, this process's newest states in it."""
        self._index_recorded()
        return self.live.query(sql, args)

    def _entries(self, where: str = "", args: Iterable[Any] = ()) -> list[Entry]:
        return self._query(f"SELECT {ENTRY_SQL} FROM nodes {where} ORDER BY seq", args)

    def get(self, node_id: str) -> Call:
        """The node ``node_id``: a copy (see ``Call.copy``), so what a reader does to it never
        reaches the session, and a node read while its call runs stays as it was read."""
        with self._mu:
            call = self._nodes.pop(node_id, None)
            if call is not None:
                self._nodes[node_id] = call  # the most recently used now
                return call.copy()
        found = self._rows("WHERE n.id = ?", (node_id,))
        if not found:
            raise KeyError(f"no node {node_id!r} in session {self.id}")
        _id, body, path, seq, turn, role = found[0]
        rel = path if path is not None else relpath(seq, turn, role, node_id)
        return self._parse(rel, body if body is not None else self._blob(rel))

    def _blob(self, rel: str) -> bytes | None:
        try:
            return self.git.blob_at(rel)
        except Exception:  # not in HEAD, or objects git cannot read
            return None

    def _parse(self, rel: str, data: bytes | None) -> Call:
        """The node of file ``rel`` with content ``data`` (None: unreadable), cached; a
        copy is returned."""
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
        """The predecessor of each node of the conversation chain (no caller: the root, a
        cell, a message, a top-level call, a script's bare ``llm`` call) in seq order, and
        the highest seq and turn of any node: what a pull settles on."""
        chain = self._query("SELECT id, predecessor FROM nodes WHERE caller IS NULL ORDER BY seq")
        top_seq, top_turn = self._query("SELECT max(seq), max(turn) FROM nodes")[0]
        return Links(dict(chain), -1 if top_seq is None else top_seq, top_turn or 0)

    def light_nodes(self) -> list[dict[str, Any]]:
        """Every node as a dict shaped like ``Call.to_dict()`` but from the index only (no
        input, output, doc; metadata holds kind and status): what a layout of the whole DAG
        needs, without reading a node's content."""
        return [_light(e) for e in self._entries()]

    def _window_start(self, sql: str, count: int) -> int:
        """The first turn of the newest whole buckets holding the ``count``-th newest of
        what ``sql`` lists (turns, newest first; 0: the whole session)."""
        found = self._query(sql + " LIMIT 1 OFFSET ?", (max(count, 1) - 1,))
        if not found:
            return 0
        return found[0][0] // TURNS_PER_BUCKET * TURNS_PER_BUCKET

    def light_window(self, tops: int) -> tuple[list[dict[str, Any]], int]:
        """The newest nodes as :meth:`light_nodes` makes them — whole buckets of 100 turns,
        newest first, until they hold ``tops`` turn-level nodes (or the whole session) — and
        how many nodes are older than them.  A node whose predecessor is older is listed
        without it (``metadata.cut``: the view starts there); no node's content is read."""
        first = self._window_start(
            "SELECT turn FROM nodes WHERE caller IS NULL ORDER BY turn DESC", tops
        )
        entries = self._entries("WHERE turn >= ?", (first,))
        older = self._query(_OLDER, (first,))[0][0]  # the window counted, not the rest
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
        """Counts of the whole session (nodes, ``tops`` turn-level nodes, ``turns``,
        ``kinds``, ``statuses``) and what its ``llm`` nodes used (``calls``,
        ``input_tokens``, ``output_tokens``, ``cost``, ``unpriced``; ``functions``: by the
        name of the node each was called from; ``llm_turns``: turns with one): the totals
        the live database keeps as the rows change (:func:`index.keep_totals`), a few
        rows read.  Costs are kept exactly and rounded once (``math.fsum``: the float a
        scan of every node gives)."""
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
        """What ``sessions usage`` prints, from the index: the session's :meth:`totals` and
        the ``llm`` entries (as :meth:`index` makes them) of the newest buckets holding the
        newest ``turns`` turns with ``llm`` nodes (None: every one).  No node's content is
        read."""
        first = 0
        if turns is not None:
            first = self._window_start(
                "SELECT DISTINCT turn FROM nodes WHERE kind = 'llm' ORDER BY turn DESC", turns
            )
        calls = self._entries("WHERE kind = 'llm' AND turn >= ?", (first,))
        return self.totals(), [_entry(e) for e in calls]

    def nodes(self) -> list[Call]:
        """Every readable node in seq order (corrupted ones are listed in ``problems``);
        copies, as :meth:`get`'s."""
        return list(self._read_many(self._rows("")).values())

    def get_many(self, node_ids: Iterable[str]) -> dict[str, Call]:
        """The readable nodes among ``node_ids``, in that order (unknown ones left out,
        corrupted ones too and listed in ``problems``); copies, as :meth:`get`'s."""
        wanted = list(dict.fromkeys(node_ids))
        found: dict[str, tuple[Any, ...]] = {}
        for start in range(0, len(wanted), 500):  # (SQLite's limit on variables)
            part = wanted[start : start + 500]
            where = f"WHERE n.id IN ({','.join('?' * len(part))})"
            found.update((row[0], row) for row in self._rows(where, part))
        return self._read_many([found[i] for i in wanted if i in found])

    def _rows(self, where: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        return self._query(
            "SELECT n.id, r.body, n.path, n.seq, n.turn, n.role FROM nodes n"
            f" LEFT JOIN rows r ON r.id = n.id {where} ORDER BY n.seq",
            args,
        )

    def _read_many(self, rows: list[tuple[Any, ...]]) -> dict[str, Call]:
        """Node id -> node; the committed ones not cached read from git in one go."""
        with self._mu:
            cached = {row[0]: self._nodes.get(row[0]) for row in rows}
        paths = {
            row[0]: row[2] if row[2] is not None else relpath(row[3], row[4], row[5], row[0])
            for row in rows
        }
        wanted = [paths[row[0]] for row in rows if row[1] is None and cached[row[0]] is None]
        committed = read_paths(self.git, wanted) if len(wanted) >= BATCH_MIN else {}
        out: dict[str, Call] = {}
        for node_id, body, *_rest in rows:
            try:
                call = cached[node_id]
                if call is not None:
                    out[node_id] = call.copy()
                    continue
                rel = paths[node_id]
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
        """Up to ``limit`` nodes of the conversation chain ending at ``start``, oldest first."""
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
        # bounded memory: NODE_CACHE_MAX saved nodes beside the unsaved ones (which stay: the
        # commit writes them), the least recently used dropped first (dicts keep order)
        nodes, dirty = self._nodes, self._dirty
        excess = len(nodes) - NODE_CACHE_MAX - len(dirty)
        if excess > 0:
            for node_id in list(islice((k for k in nodes if k not in dirty), excess)):
                del nodes[node_id]


def read_paths(repo: Repository, paths: list[str]) -> dict[str, bytes]:
    """Many files of HEAD at once (one ``git ls-tree`` of their folders, one ``git
    cat-file --batch``); those not there or over ``MAX_FILE_BYTES`` left out.  (Naming
    each as ``<commit>:<path>`` to ``cat-file`` would walk the trees once a name.)"""
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
