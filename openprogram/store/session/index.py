"""The light index of a session: one small tuple per node, and the committed per-bucket
index (``history/<bucket>/index.json``) that lets a session be opened without parsing every
node file.  Pure: no I/O here (the store reads and writes the files)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from openprogram.context.nodes import _ID as _NODE_ID
from openprogram.context.nodes import MAX_COUNT, ROLE_LETTER, ROLES, Call

TURNS_PER_BUCKET = 100
# history/<bucket>/index.json: the light entries of a sealed bucket, committed (see _seal)
BUCKET_INDEX = "index.json"
BUCKET_INDEX_VERSION = 2  # 2: the usage columns (tokens_in, tokens_out, cost)
SEALS_PER_MAINTENANCE = 4  # older buckets still unsealed are sealed a few at a time
BUCKET_NAME = re.compile(r"[0-9]{4,}")
TURN_DIR_NAME = re.compile(r"[0-9]{6,}")
_IDS = re.compile(rf"(?:{_NODE_ID.pattern}\n)*")


def node_relpath(call: Call) -> str:
    return _relpath(call.seq, call.turn, call.role, call.id)


def _relpath(seq: int, turn: int, role: str, node_id: str) -> str:
    letter = ROLE_LETTER.get(role, "x")
    return f"history/{turn // TURNS_PER_BUCKET:04d}/{turn:06d}/{seq:08d}-{letter}-{node_id}.json"


# The light index entry of a node (no inputs or outputs), kept as a tuple: a 5,000-turn
# session has ~25,000 of them, and tuples load and compare faster than dicts (open time).
ENTRY_FIELDS = (
    "id", "seq", "turn", "role", "name", "kind", "status", "caller", "predecessor",
    "created_at", "path", "tokens_in", "tokens_out", "cost",
)  # fmt: skip
F_SEQ, F_TURN, F_KIND, F_CALLER, F_PATH = 1, 2, 5, 7, 10
F_TOKENS_IN, F_TOKENS_OUT, F_COST = 11, 12, 13
Entry = tuple[Any, ...]


# In memory (:class:`nodeindex.NodeIndex`) an entry is *compact*: its path is None when it
# is the one :func:`node_relpath` names (nearly always: ~100 B a node saved), and its
# strings are shared — kinds, statuses, roles and names interned, a caller or predecessor
# the very id object of that node's entry when it was known — so a loaded node costs its
# tuple, its id and its ``created_at``.  The files (committed and cached indexes) hold full
# entries: :func:`full_entry`.


def entry_path(entry: Entry) -> str:
    """The node file (relative to the session) of an entry, compact or full."""
    path = entry[F_PATH]
    return _relpath(entry[1], entry[2], entry[3], entry[0]) if path is None else path


def entry_bucket(entry: Entry) -> str:
    """The bucket folder an entry's node file is in."""
    path = entry[F_PATH]
    return f"{entry[2] // TURNS_PER_BUCKET:04d}" if path is None else path.split("/", 2)[1]


def full_entry(entry: Entry) -> Entry:
    """The entry with its path, as the index files keep it."""
    if entry[F_PATH] is not None:
        return entry
    return (*entry[:F_PATH], entry_path(entry), *entry[F_PATH + 1 :])


def compact_columns(columns: list[Any], known: Mapping[str, Entry]) -> list[Entry]:
    """Compact entries (see above) of full ones given as columns (one list per
    ``ENTRY_FIELDS``, as a valid bucket index holds them); ``known``: entries already in
    memory, whose ids a caller or predecessor shares.  Column by column, in C loops but
    the paths'."""
    ids, seqs, turns, roles, names, kinds, statuses, callers, preds = columns[:9]
    own = dict(zip(ids, ids, strict=True))
    for node_id in {*callers, *preds} - own.keys() - {None}:
        found = known.get(node_id)
        if found is not None:
            own[node_id] = found[0]
    intern = sys.intern
    shared = {turn: turn for turn in turns}  # a turn's nodes share one int
    rows = zip(ids, seqs, turns, roles, columns[F_PATH], strict=True)
    paths = [None if path == _relpath(s, t, r, i) else path for i, s, t, r, path in rows]
    return list(
        zip(
            ids,
            seqs,
            map(shared.__getitem__, turns),
            map(intern, roles),
            map(intern, names),
            map(intern, kinds),
            map(intern, statuses),
            map(own.get, callers, callers),
            map(own.get, preds, preds),
            *columns[9:F_PATH],
            paths,
            *columns[F_PATH + 1 :],
            strict=True,
        )
    )


def compact_entry(entry: Entry, known: Mapping[str, Entry]) -> Entry:
    """One entry made compact (see above); ``known``: the entries in memory."""
    node_id, seq, turn, role, name, kind, status, caller, pred = entry[:9]
    same = known.get(node_id)
    if same is not None:
        node_id = same[0]  # the id object the index (and other entries) hold already
    if caller is not None:
        caller = known[caller][0] if caller in known else caller
    if pred is not None:
        pred = known[pred][0] if pred in known else pred
    path = entry[F_PATH]
    if path == _relpath(seq, turn, role, node_id):
        path = None
    strs = [role, name, kind, status]
    if all(type(value) is str for value in strs):
        role, name, kind, status = map(sys.intern, strs)
    head = (node_id, seq, turn, role, name, kind, status, caller, pred)
    return (*head, *entry[9:F_PATH], path, *entry[F_PATH + 1 :])


def usage_of(metadata: Mapping[str, Any]) -> tuple[int | None, int, float | None]:
    """``(input tokens, output tokens, cost)`` of a node as the index keeps them: input
    tokens None when the node records no ``usage`` at all, cost None when it has no price
    (the rules of ``usage.totals.Totals.add``; a value of another type counts as 0)."""
    if "usage" not in metadata and "cost" not in metadata:  # most nodes: the fast path
        return None, 0, None
    usage = metadata.get("usage")
    value = metadata.get("cost")
    cost = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if cost is not None and not 0 <= cost < 1e15:  # also NaN
        cost = None
    if not isinstance(usage, Mapping) or not usage:
        return None, 0, cost
    counts = [usage.get("input_tokens"), usage.get("output_tokens")]
    tokens = [c if type(c) is int and 0 <= c < 1 << 53 else 0 for c in counts]
    return tokens[0], tokens[1], cost


def entry_of(call: Call, path: str) -> Entry:
    return (
        call.id,
        call.seq,
        call.turn,
        call.role,
        call.name,
        call.kind,
        call.status,
        call.caller,
        call.predecessor,
        call.created_at,
        path,
        *usage_of(call.metadata),
    )


def counts_as_turn(caller: str | None, kind: str) -> bool:
    """Whether a node is one of the session's turns, the one way every count of turns
    counts (``meta.json``'s ``turns``, ``sessions list/show``, ``status``, a pull's
    report): a node of the conversation chain other than the root — a cell, a chat
    message, a top-level call (a script's bare ``runtime.exec`` in a ``session_context``
    is that turn's node, on the chain like any other)."""
    return caller is None and kind != "root"


def count_turns(entries: Iterable[Mapping[str, Any]]) -> int:
    """The turns among index entries (``Session.index()``), see :func:`counts_as_turn`."""
    return sum(1 for e in entries if counts_as_turn(e.get("caller"), e.get("kind", "")))


def valid_columns(bucket: str, columns: Any) -> bool:
    """Whether ``columns`` (a bucket index, committed or cached: one list per
    ``ENTRY_FIELDS``) has the shape of light entries of bucket ``bucket``: typed fields,
    unique short-name ids, seqs from 0 to ``MAX_COUNT``, turns in the bucket, and paths of
    JSON files inside it.  Checked column by column in C loops (a join fails on anything but
    strings): an index is data from wherever the session folder came from, never trusted
    as it is."""
    if type(columns) is not list or len(columns) != len(ENTRY_FIELDS):
        return False
    if any(type(column) is not list for column in columns):
        return False
    ids, seqs, turns, roles, names, kinds, statuses, callers, preds, created, paths = columns[:11]
    tokens_in, tokens_out, costs = columns[11:]
    count = len(ids)
    if count == 0 or any(len(column) != count for column in columns):
        return False
    try:
        if _IDS.fullmatch("\n".join(ids) + "\n") is None or len(set(ids)) != count:
            return False
        "".join(names)  # strings (TypeError otherwise)
        if any(type(value) is not str for col in (kinds, statuses) for value in set(col)):
            return False
        joined = "\n".join(paths)
    except TypeError:
        return False
    if set(map(type, seqs)) != {int} or set(map(type, turns)) != {int}:
        return False
    optional = {str, type(None)}
    if not (set(map(type, callers)) <= optional and set(map(type, preds)) <= optional):
        return False
    if not set(map(type, created)) <= {float, int} or not set(roles) <= set(ROLES):
        return False
    if min(seqs) < 0 or max(seqs) >= MAX_COUNT:
        return False
    if not set(map(type, tokens_in)) <= {int, type(None)} or set(map(type, tokens_out)) != {int}:
        return False
    if min(tokens_out) < 0 or any(t is not None and t < 0 for t in set(tokens_in)):
        return False
    if not set(map(type, costs)) <= {float, type(None)}:
        return False
    if not all(c is None or 0 <= c < 1e15 for c in set(costs)):  # NaN fails too
        return False
    first = int(bucket) * TURNS_PER_BUCKET
    if min(turns) < first or max(turns) >= first + TURNS_PER_BUCKET:
        return False
    # every path is under history/<bucket>/ (read by get(), never written): with no
    # newline inside a path, each line of ``joined`` starts so
    joined = f"\n{joined}"
    return (
        joined.count("\n") == count
        and ".." not in joined
        and joined.count(f"\nhistory/{bucket}/") == count
    )


def clean_meta(meta: dict[str, Any]) -> list[str]:
    """Drop the fields of a ``meta.json`` that do not have their type (a damaged or hostile
    file); returns what was dropped, to report."""
    dropped = []
    for key, types in _META_TYPES.items():
        value = meta.get(key)
        if value is None:
            continue
        ok = type(value) in types
        if ok and type(value) in (int, float):
            ok = 0 <= value < 1e15  # also false for NaN
        if not ok:
            del meta[key]
            dropped.append(f"{key}={value!r:.40}")
    return dropped


_META_TYPES: dict[str, tuple[type, ...]] = {
    "title": (str,),
    "agent_id": (str,),
    "source": (str,),
    "head_id": (str,),
    "turns": (int,),
    "created_at": (int, float),
    "updated_at": (int, float),
}
