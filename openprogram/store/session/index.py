"""The one index of a session: the ``nodes`` table of its live database (:mod:`live`),
a row a node (what every view reads, and its file in git when not :func:`node_relpath`'s),
and the totals SQLite keeps from it by triggers (decision 0062).  The rows are derived
from git (:func:`derive`) for every committed turn, never over the row of a node in
flight (decision 0060).
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import threading
from array import array
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from openprogram.context.nodes import ROLE_LETTER, Call
from openprogram.errors import NodeFormatError
from openprogram.store.session.files import MAX_FILE_BYTES, loads, read_bytes
from openprogram.store.session.safegit import git_command, run_git

TURNS_PER_BUCKET = 100
BUCKET_INDEX = "index.json"  # committed by earlier versions: allowed, ignored
BUCKET_NAME = re.compile(r"[0-9]{4,}")
TURN_DIR_NAME = re.compile(r"[0-9]{6,}")
NODE_FILE = re.compile(r"history/[0-9]{4,}/[0-9]{6,}/[^/]+\.json")

# a node's row (:func:`row_of`), and its light entry (``Session.index()``)
COLUMNS = (
    "id", "seq", "turn", "role", "name", "kind", "status", "caller", "predecessor",
    "created_at", "tokens_in", "tokens_out", "cost", "path",
)  # fmt: skip
ENTRY_FIELDS = (*COLUMNS[:10], "path", *COLUMNS[10:13])
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS nodes (id TEXT PRIMARY KEY, seq INTEGER, turn INTEGER,"
    " role TEXT, name TEXT, kind TEXT, status TEXT, caller TEXT, predecessor TEXT,"
    " created_at REAL, tokens_in INTEGER, tokens_out INTEGER, cost REAL, path TEXT)"
    " WITHOUT ROWID",
    # children, turn-level nodes by turn (the windows); what the totals scan, covered
    "CREATE INDEX IF NOT EXISTS nodes_by_caller ON nodes (caller, turn, kind)",
    "CREATE INDEX IF NOT EXISTS nodes_by_turn ON nodes (turn)",
    "CREATE INDEX IF NOT EXISTS nodes_usage"
    " ON nodes (kind, turn, caller, tokens_in, tokens_out, cost)",
    "CREATE INDEX IF NOT EXISTS nodes_by_status ON nodes (status)",
)
_INSERT = f"INSERT INTO nodes ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
# what a new state changes (seq, turn, caller, role and path left: the indexes too)
_CHANGED = ("status", "name", "kind", "predecessor", "tokens_in", "tokens_out", "cost")
PUT_STATE = f"{_INSERT} ON CONFLICT (id) DO UPDATE SET " + ", ".join(
    f"{c} = excluded.{c}" for c in _CHANGED
)
# a committed node's row from git, every column: never over the row of a node in flight
PUT_COMMITTED = (
    f"{_INSERT} ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in COLUMNS[1:])
    + " WHERE nodes.id NOT IN (SELECT id FROM rows)"
)
Row = tuple[Any, ...]
Used = list[Any]  # [calls, input_tokens, output_tokens, unpriced, cost partials (floats)]
Totals = dict[str, Any]


def node_relpath(call: Call) -> str:
    return relpath(call.seq, call.turn, call.role, call.id)


def relpath(seq: int, turn: int, role: str, node_id: str) -> str:
    """``history/<bucket>/<turn>/<seq>-<role letter>-<id>.json``."""
    letter = ROLE_LETTER.get(role, "x")
    return f"history/{turn // TURNS_PER_BUCKET:04d}/{turn:06d}/{seq:08d}-{letter}-{node_id}.json"


def usage_of(metadata: Mapping[str, Any]) -> tuple[int | None, int, float | None]:
    """(input tokens: None without ``usage``, output tokens, cost: None unpriced), by
    ``usage.totals.Totals.add``'s rules (a value of another type counts as 0)."""
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


def row_of(call: Call, path: str | None = None) -> Row:
    """The row of ``call`` (:data:`COLUMNS`); ``path``: its file when not the usual one."""
    return (
        call.id, call.seq, call.turn, call.role, call.name, call.kind, call.status,
        call.caller, call.predecessor, call.created_at, *usage_of(call.metadata),
        None if path is None or path == node_relpath(call) else path,
    )  # fmt: skip


def counts_as_turn(caller: str | None, kind: str) -> bool:
    """Whether a node is one of the session's turns (every count of turns): a node of
    the conversation chain other than the root."""
    return caller is None and kind != "root"


def exact_add(parts: list[float], x: float) -> None:
    """Add ``x`` to ``parts``, floats whose exact sum is that of what was added
    (Shewchuk; ``math.fsum`` rounds it once): the same total in any order."""
    i = 0
    for y in parts:
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo:
            parts[i] = lo
            i += 1
        x = hi
    parts[i:] = [x]


# -- the totals, kept by triggers as the rows change (decision 0062) ------------------------
# ``counts``: nodes by kind, status and turn level; ``usage``: llm nodes by their caller's
# name, costs as exact partials (floats in a blob); ``llm_turns``: llm nodes by turn.
TOP = "(top level)"
TOTALS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS counts (kind TEXT, status TEXT, top INTEGER, n INTEGER,"
    " PRIMARY KEY (kind, status, top))",
    "CREATE TABLE IF NOT EXISTS usage (function TEXT PRIMARY KEY, calls INTEGER,"
    " tokens_in INTEGER, tokens_out INTEGER, unpriced INTEGER, parts BLOB)",
    "CREATE TABLE IF NOT EXISTS llm_turns (turn INTEGER PRIMARY KEY, n INTEGER)",
)
_ADD = " ON CONFLICT ({key}) DO UPDATE SET " + ", ".join(
    f"{c} = {c} + excluded.{c}" for c in ("calls", "tokens_in", "tokens_out", "unpriced")
)
_ADD_USAGE = _ADD.format(key="function") + ", parts = parts_merge(parts, excluded.parts);"
_ADD_COUNT = " ON CONFLICT ({key}) DO UPDATE SET n = n + excluded.n;"


def _function_of(r: str) -> str:
    return (
        f"CASE WHEN {r}.caller = {r}.id THEN {r}.name ELSE coalesce("
        f"(SELECT name FROM nodes WHERE id = {r}.caller), '{TOP}') END"
    )


def _one(r: str, sign: str) -> str:
    """Add (``sign`` "") or take away ("-") llm row ``r``'s usage."""
    return (
        f"INSERT INTO usage VALUES ({_function_of(r)}, {sign}1,"
        f" {sign}coalesce({r}.tokens_in, 0), {sign}coalesce({r}.tokens_out, 0),"
        f" {sign}({r}.cost IS NULL AND {r}.tokens_in IS NOT NULL),"
        f" parts_of({r}.cost, {sign}1)){_ADD_USAGE}"
        f" DELETE FROM usage WHERE function = {_function_of(r)} AND calls = 0;"
        f" INSERT INTO llm_turns VALUES ({r}.turn, {sign}1){_ADD_COUNT.format(key='turn')}"
        f" DELETE FROM llm_turns WHERE turn = {r}.turn AND n = 0;"
    )


def _callees(r: str, function: str, sign: str) -> str:
    """Add or take away the usage of the llm nodes ``r`` called, under ``function``
    (``+kind``: looked up by caller, not by ``nodes_usage``: every llm row)."""
    return (
        f"INSERT INTO usage SELECT {function}, {sign}count(*),"
        f" {sign}sum(coalesce(tokens_in, 0)), {sign}sum(coalesce(tokens_out, 0)),"
        f" {sign}sum(cost IS NULL AND tokens_in IS NOT NULL), parts_sum(cost, {sign}1)"
        f" FROM nodes WHERE caller = {r}.id AND +kind = 'llm' AND id != {r}.id"
        f" HAVING count(*) > 0{_ADD_USAGE}"
        f" DELETE FROM usage WHERE function = {function} AND calls = 0;"
    )


def _count(r: str, sign: str) -> str:
    return (
        f"INSERT INTO counts VALUES ({r}.kind, {r}.status, {r}.caller IS NULL, {sign}1)"
        + _ADD_COUNT.format(key="kind, status, top")
        + f" DELETE FROM counts WHERE kind = {r}.kind AND status = {r}.status"
        f" AND top = ({r}.caller IS NULL) AND n = 0;"
    )


_NEW, _OLD = "NEW.kind = 'llm'", "OLD.kind = 'llm'"
TOTALS_TRIGGERS = tuple(
    f"CREATE TRIGGER IF NOT EXISTS {name} AFTER {event} ON nodes {when}"
    f" BEGIN {body} END"
    for name, event, when, body in (
        ("totals_put", "INSERT", "", _count("NEW", "")),
        ("totals_put_llm", "INSERT", f"WHEN {_NEW}", _one("NEW", "")),
        ("totals_put_caller", "INSERT", "", _callees("NEW", f"'{TOP}'", "-")
         + _callees("NEW", "NEW.name", "")),
        ("totals_drop", "DELETE", "", _count("OLD", "-")),
        ("totals_drop_llm", "DELETE", f"WHEN {_OLD}", _one("OLD", "-")),
        ("totals_drop_caller", "DELETE", "", _callees("OLD", "OLD.name", "-")
         + _callees("OLD", f"'{TOP}'", "")),
        ("totals_change", "UPDATE OF kind, status, caller",
         "WHEN OLD.kind IS NOT NEW.kind OR OLD.status IS NOT NEW.status"
         " OR (OLD.caller IS NULL) != (NEW.caller IS NULL)",
         _count("OLD", "-") + _count("NEW", "")),
        ("totals_change_old_llm", "UPDATE", f"WHEN {_OLD}", _one("OLD", "-")),
        ("totals_change_new_llm", "UPDATE", f"WHEN {_NEW}", _one("NEW", "")),
        ("totals_rename", "UPDATE OF name", "WHEN OLD.name IS NOT NEW.name",
         _callees("OLD", "OLD.name", "-") + _callees("NEW", "NEW.name", "")),
    )
)  # fmt: skip
# the totals counted again from the rows (a database made by a version without them)
RECOUNT = (
    "DELETE FROM counts", "DELETE FROM usage", "DELETE FROM llm_turns",
    "INSERT INTO counts SELECT kind, status, caller IS NULL, count(*) FROM nodes NOT INDEXED"
    " GROUP BY 1, 2, 3",  # (a scan of the table: no index holds the three)
    f"INSERT INTO usage SELECT CASE WHEN c.id IS NULL THEN '{TOP}' ELSE c.name END,"
    " count(*), sum(coalesce(n.tokens_in, 0)), sum(coalesce(n.tokens_out, 0)),"
    " sum(n.cost IS NULL AND n.tokens_in IS NOT NULL), parts_sum(n.cost, 1)"
    " FROM nodes n LEFT JOIN nodes c ON c.id = n.caller WHERE n.kind = 'llm' GROUP BY 1",
    "INSERT INTO llm_turns SELECT turn, count(*) FROM nodes WHERE kind = 'llm' GROUP BY 1",
)  # fmt: skip

# every row put again (a clone, a deleted live.db): without indexes or triggers, then
# the indexes built and the totals counted once, in one transaction
_INDEXES = [s.split()[5] for s in SCHEMA if s.startswith("CREATE INDEX")]
DROP_TRIGGERS = tuple(f"DROP TRIGGER IF EXISTS {t.split()[5]}" for t in TOTALS_TRIGGERS)
BULK_BEFORE = (
    *DROP_TRIGGERS,
    *(f"DROP INDEX IF EXISTS {name}" for name in _INDEXES),
    "DELETE FROM nodes WHERE id NOT IN (SELECT id FROM rows)",
)
BULK_AFTER = (*SCHEMA[1:], *RECOUNT, *TOTALS_TRIGGERS)


def parts_from(blob: bytes | None) -> list[float]:
    """The exact partials a ``usage`` row keeps (nothing from a damaged one)."""
    return array("d", blob[: len(blob) // 8 * 8]).tolist() if isinstance(blob, bytes) else []


_CTRL_C = threading.local()  # set where a Ctrl-C landed in one of the functions below


def noting_ctrl_c(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` as SQLite calls it: SQLite keeps of an exception only that a
    "user-defined function raised", so a Ctrl-C is noted for :func:`ctrl_c_landed`."""

    def call(*args: Any) -> Any:
        try:
            return function(*args)
        except KeyboardInterrupt:
            _CTRL_C.landed = True
            raise

    return call


def ctrl_c_landed() -> bool:
    """Whether a Ctrl-C landed in a totals function since the last ask (this thread)."""
    landed, _CTRL_C.landed = getattr(_CTRL_C, "landed", False), False
    return landed


def _parts_of(cost: float | None, sign: int) -> bytes:
    return array("d", [sign * cost] if isinstance(cost, float) else []).tobytes()


def _parts_merge(parts: bytes | None, more: bytes | None) -> bytes:
    out = parts_from(parts)
    for x in parts_from(more):
        exact_add(out, x)
    return array("d", out).tobytes()


class _PartsSum:
    """SQL aggregate ``parts_sum(cost, sign)``: the exact partials of the costs times sign."""

    def __init__(self) -> None:
        self.parts: list[float] = []

    @noting_ctrl_c
    def step(self, cost: float | None, sign: int) -> None:
        if isinstance(cost, float):
            exact_add(self.parts, sign * cost)

    @noting_ctrl_c
    def finalize(self) -> bytes:
        return array("d", self.parts).tobytes()


def keep_totals(db: sqlite3.Connection) -> None:
    """Register the triggers' functions; make the tables and triggers, the totals
    counted again, when new or of an older version (decision 0064)."""
    db.create_function("parts_of", 2, noting_ctrl_c(_parts_of), deterministic=True)
    db.create_function("parts_merge", 2, noting_ctrl_c(_parts_merge), deterministic=True)
    db.create_aggregate("parts_sum", 2, _PartsSum)  # type: ignore[arg-type]
    while not db.execute(_KEPT).fetchone()[0] or _foreign_triggers(db):
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:  # another process writes: wait its turn
            if "locked" in str(exc) or "busy" in str(exc):
                continue
            raise
        try:
            foreign = _foreign_triggers(db)  # planted, or an older version's: replaced
            if foreign or not db.execute(_KEPT).fetchone()[0]:
                for name in foreign:
                    db.execute('DROP TRIGGER "{}"'.format(name.replace('"', '""')))
                for statement in (*TOTALS_SCHEMA, *DROP_TRIGGERS, *TOTALS_TRIGGERS, *RECOUNT):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {TOTALS_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise


def _foreign_triggers(db: sqlite3.Connection) -> list[str]:
    """The triggers of ``db`` that are not :data:`TOTALS_TRIGGERS` word for word (a
    folder from elsewhere may plant one: SQLite would run it at every write)."""
    found = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
    return [name for name, sql in found if _OURS.get(name) != sql]


# our triggers as SQLite keeps their text (without "IF NOT EXISTS")
_OURS = {t.split()[5]: t.replace(" IF NOT EXISTS", "", 1) for t in TOTALS_TRIGGERS}
TOTALS_VERSION = 2  # of the triggers (2: a node's callees looked up by caller)
_KEPT = (f"SELECT (SELECT user_version FROM pragma_user_version) = {TOTALS_VERSION}"
         " AND EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'totals_rename')")  # fmt: skip


# -- derivation from git (I/O) ----------------------------------------------------------
Problem = Callable[[str, str], None]


def _node_files(root: Path, commit: str) -> dict[str, bytes]:
    listed = run_git(root, "ls-tree", "-r", "-z", "--full-tree", commit, "--", "history")
    found: dict[str, bytes] = {}
    for item in listed.stdout.split(b"\0"):
        info, _, raw = item.partition(b"\t")
        parts = info.split()
        path = raw.decode("utf-8", "surrogateescape")
        if len(parts) == 3 and parts[1] == b"blob" and NODE_FILE.fullmatch(path):
            found[path] = parts[2]
    return found


def _changed_files(root: Path, old: str, new: str) -> tuple[dict[str, bytes], list[str]]:
    """Node files added or changed from ``old`` to ``new`` (path -> blob) and removed."""
    done = run_git(
        root, "diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", old, new, "--",
        "history",
    )  # fmt: skip
    items = done.stdout.split(b"\0")
    changed: dict[str, bytes] = {}
    removed: list[str] = []
    for info, raw in zip(items[0::2], items[1::2], strict=False):
        parts = info.split()  # ":<old mode> <new mode> <old sha> <new sha> <status>"
        path = raw.decode("utf-8", "surrogateescape")
        if len(parts) != 5 or not NODE_FILE.fullmatch(path):
            continue
        if parts[4] == b"D":
            removed.append(path)
        elif parts[1] != b"160000":
            changed[path] = parts[3]
    return changed, removed


def _within_bounds(root: Path, files: dict[str, bytes], problem: Problem) -> list[str]:
    """Those of ``files`` (path -> blob) that are blobs within ``MAX_FILE_BYTES`` (one
    ``git cat-file --batch-check``: a file over it is never read); the others reported."""
    paths = list(files)
    if not paths:
        return []
    checked = run_git(
        root, "cat-file", "--batch-check", input=b"".join(files[p] + b"\n" for p in paths)
    ).stdout.splitlines()
    kept = []
    for path, line in zip(paths, checked, strict=False):
        parts = line.split()  # "<sha> <type> <size>", or "<sha> missing"
        if len(parts) == 3 and parts[1] == b"blob" and int(parts[2]) <= MAX_FILE_BYTES:
            kept.append(path)
        else:
            problem(str(root / path), f"not a node file within {MAX_FILE_BYTES} bytes")
    return kept


def cat_file(
    root: Path, names: list[bytes], *, sanitize: bool = True
) -> Iterator[tuple[bytes, bytes] | None]:
    """(type, content) of each object of ``names`` in order (None: missing or
    unreadable), streamed from one ``git cat-file --batch``."""
    argv, env = git_command(root, "cat-file", "--batch", sanitize=sanitize)
    proc = subprocess.Popen(
        argv, cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    feeder = threading.Thread(target=_feed, args=(proc.stdin, names), daemon=True)
    feeder.start()
    try:
        out = proc.stdout
        for _name in names:  # "<sha> <type> <size>\n<content>\n", or "<sha> missing\n"
            header = out.readline().split()
            if len(header) != 3 or not header[2].isdigit():
                yield None
                continue
            data = out.read(int(header[2]))
            out.read(1)
            yield header[1], data
    finally:
        proc.kill()
        proc.wait()
        feeder.join()
        proc.stdout.close()


def _feed(stdin: IO[bytes], shas: list[bytes]) -> None:
    try:
        with stdin:
            stdin.write(b"".join(sha + b"\n" for sha in shas))
    except OSError:  # git ended (killed when the reader stops early)
        pass


def derive(
    root: Path, since: str | None, commit: str, problem: Problem
) -> tuple[list[Row], list[str] | None]:
    """The rows of the node files ``commit`` adds or changes since ``since`` (every one
    when None or gone), and the ids it removed (None: every row); what is not a node is
    reported and left out."""
    removed: list[str] | None = None
    files: dict[str, bytes] | None = None
    if since is not None:
        try:
            files, gone = _changed_files(root, since, commit)  # <seq>-<role>-<id>.json:
            removed = [path.rsplit("/", 1)[-1][:-5].split("-", 2)[-1] for path in gone]
        except Exception:  # the old commit is gone (a rewritten folder): from scratch
            files = None
    if files is None:
        files, removed = _node_files(root, commit), None  # (faster than a diff-tree)
    paths = _within_bounds(root, files, problem)
    rows: list[Row] = []
    for path, got in zip(paths, cat_file(root, [files[p] for p in paths]), strict=True):
        try:
            if got is None or got[0] != b"blob":
                raise ValueError("not a readable blob")
            call = Call.from_dict(loads(got[1]))
        except (ValueError, NodeFormatError) as exc:
            problem(str(root / path), str(exc))
            continue
        rows.append(row_of(call, path))
    return rows, removed


def read_meta(path: Path) -> tuple[dict[str, Any], list[str]]:
    """A ``meta.json`` (``OSError``, ``ValueError``: unreadable) without the fields of the
    wrong type, and what was dropped."""
    meta = loads(read_bytes(str(path)))
    if not isinstance(meta, dict):
        raise ValueError("not a JSON object")
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
    return meta, dropped


_META_TYPES: dict[str, tuple[type, ...]] = {
    "title": (str,), "agent_id": (str,), "source": (str,), "head_id": (str,), "turns": (int,),
    "created_at": (int, float), "updated_at": (int, float),
}  # fmt: skip
