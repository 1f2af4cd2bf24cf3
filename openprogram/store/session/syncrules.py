"""What may arrive from elsewhere (refs, ``meta.json``, the session layout of every new
tree) and how two lines of one session join: pure logic, the caller reads the objects.
Git has fsck'ed every object already (decision 0063).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from openprogram.errors import SyncError
from openprogram.store.session.files import MAX_FILE_BYTES, validate_session_id
from openprogram.store.session.history import BLOB_MODE, TREE_MODE, TreeEntries
from openprogram.store.session.index import BUCKET_INDEX, BUCKET_NAME, TURN_DIR_NAME

NAMESPACE = "refs/openprogram/sessions/"
MAX_BLOB_BYTES = MAX_FILE_BYTES  # one node file: what the reader reads (one rule, in files)
TOP_LEVEL = {".gitignore": BLOB_MODE, "meta.json": BLOB_MODE, "history": TREE_MODE}
NODE_FILE = re.compile(r"[0-9]{8,}-[a-z]-([A-Za-z0-9_-]{1,64})\.json")  # (the node id)


def session_ref(session_id: str) -> str:
    """Where a session lives in a shared repository: its own ref, never a branch."""
    return NAMESPACE + validate_session_id(session_id)


def check_refs(refs: Iterable[str], session_id: str) -> None:
    """A bundle or fetch may carry exactly the ref of ``session_id``."""
    refs = list(refs)
    want = session_ref(session_id)
    others = [r for r in refs if r != want]
    if others:
        raise SyncError(
            f"refused: it carries refs outside session {session_id}'s namespace "
            f"({', '.join(others[:3])}); only {want} is accepted"
        )
    if not refs:
        raise SyncError(f"refused: it carries no {want}")


def check_meta(data: bytes, session_id: str) -> None:
    """The tip's ``meta.json`` must name the session that was asked for."""
    try:
        meta = orjson.loads(data)  # nesting past 1,024 levels is an error, not a crash
    except ValueError as exc:
        raise SyncError(f"refused: its meta.json is not JSON ({exc})") from None
    found = meta.get("id") if isinstance(meta, dict) else None
    if found != session_id:
        raise SyncError(
            f"refused: it holds session {found!r}, not {session_id!r} "
            "(use --as NEW_ID to import it under another id)"
        )


@dataclass
class HistoryCheck:
    """Checks the trees that arrived (sha -> raw data) against the session layout, each
    once, and the blobs that arrived (sha -> size) against ``max_blob``."""

    trees: dict[bytes, bytes]
    sizes: dict[bytes, int]
    max_blob: int = MAX_BLOB_BYTES

    def __post_init__(self) -> None:
        self._seen: set[tuple[bytes, int]] = set()
        self._allowed: set[tuple[bytes, bytes, int]] = set()  # (name, mode, depth) passed
        self._fast = all(n <= self.max_blob for n in self.sizes.values())

    def root(self, tree: bytes) -> None:
        self._check(tree, 0, "")

    def _check(self, tree: bytes, depth: int, where: str) -> None:
        """A tree that is wholly the layout at its depth: one regex match; else entry by
        entry (which says what is wrong), each (name, mode, depth) allowed once."""
        if (tree, depth) in self._seen or tree not in self.trees:
            return
        self._seen.add((tree, depth))
        data = self.trees[tree]
        if self._fast and depth < len(_LAYOUT) and _LAYOUT[depth].fullmatch(data):
            for mode, name, sha in _ENTRY.findall(data):
                if mode == b"40000" and (sha, depth + 1) not in self._seen:
                    self._check(sha, depth + 1, f"{where}{name.decode()}/")
            return
        for raw_mode, raw_name, sha in _ENTRY.findall(data):  # well-formed: git fsck'ed it
            if (raw_name, raw_mode, depth) not in self._allowed:
                self._allow(raw_name, raw_mode, depth, where)
            if int(raw_mode, 8) == TREE_MODE:
                if (sha, depth + 1) not in self._seen:  # most subtrees: checked already
                    self._check(sha, depth + 1, f"{where}{raw_name.decode()}/")
            elif self.sizes.get(sha, 0) > self.max_blob:
                raise SyncError(
                    f"refused: {where}{raw_name.decode(errors='replace')} is "
                    f"{self.sizes[sha]} bytes, over the {self.max_blob >> 20} MiB a session "
                    "file may be"
                )

    def _allow(self, raw_name: bytes, raw_mode: bytes, depth: int, where: str) -> None:
        name, mode = raw_name.decode("utf-8", "surrogateescape"), int(raw_mode, 8)
        path = f"{where}{name}"
        if mode == 0o120000:
            raise SyncError(f"refused: {path} is a symbolic link")
        want = expected_mode(name, depth)
        if want is None or mode != want:
            raise SyncError(f"refused: unexpected {_what(mode)} {path!r} in the session")
        self._allowed.add((raw_name, raw_mode, depth))


_ENTRY = re.compile(rb"([0-7]{1,7}) ([^\0]+)\0(.{20})", re.S)  # one tree entry


def _entries(*kinds: bytes) -> re.Pattern[bytes]:
    """A whole tree made only of entries of ``kinds`` (``<mode> <name>`` patterns)."""
    return re.compile(rb"(?:(?:" + rb"|".join(kinds) + rb")\0.{20})*", re.S)


_LAYOUT = (  # the session layout, depth by depth (see expected_mode)
    _entries(rb"100644 \.gitignore", rb"100644 meta\.json", rb"40000 history"),
    _entries(rb"40000 " + BUCKET_NAME.pattern.encode()),
    _entries(rb"40000 " + TURN_DIR_NAME.pattern.encode(), rb"100644 index\.json"),
    _entries(rb"100644 " + NODE_FILE.pattern.encode()),
)


def expected_mode(name: str, depth: int) -> int | None:
    """The mode ``name`` may have at ``depth`` (None: not allowed): ``meta.json``,
    ``.gitignore``, ``history/<bucket>/<turn>/<seq>-<l>-<id>.json``, ``history/<bucket>/
    index.json``, nothing else."""
    if depth == 0:
        return TOP_LEVEL.get(name)
    if depth == 1:
        return TREE_MODE if BUCKET_NAME.fullmatch(name) else None
    if depth == 2:
        if name == BUCKET_INDEX:
            return BLOB_MODE
        return TREE_MODE if TURN_DIR_NAME.fullmatch(name) else None
    if depth == 3:
        return BLOB_MODE if NODE_FILE.fullmatch(name) else None
    return None


def _what(mode: int) -> str:
    return {TREE_MODE: "folder", 0o160000: "submodule"}.get(mode, "file")


# -- joining two lines -----------------------------------------------------------------------
Reader = Callable[[bytes], TreeEntries]
Writer = Callable[[TreeEntries], bytes]


def merge_trees(
    base: bytes | None, ours: bytes, theirs: bytes, read: Reader, write: Writer
) -> bytes:
    """The union of ``ours`` and ``theirs``: a path only one side changed since ``base``
    takes that side, one both changed keeps ours (node files never collide: unique ids)."""
    if ours == theirs:
        return ours
    if base == theirs:
        return ours
    if base == ours:
        return theirs
    b = read(base) if base is not None else {}
    o, t = read(ours), read(theirs)
    out: TreeEntries = {}
    for name in sorted(set(o) | set(t)):
        mine, other, old = o.get(name), t.get(name), b.get(name)
        if other is None or mine == other or other == old:
            if mine is not None:
                out[name] = mine
            continue
        if mine is None or mine == old:
            out[name] = other
            continue
        if mine[1] == TREE_MODE and other[1] == TREE_MODE:
            base_sub = old[0] if old is not None and old[1] == TREE_MODE else None
            out[name] = (merge_trees(base_sub, mine[0], other[0], read, write), TREE_MODE)
        else:
            out[name] = mine
    return write(out)


# -- two histories of one id that share nothing ----------------------------------------------
ROOT_DIR = "history/0000/000000"  # the root node's turn folder, in every session


def root_ids(names: Iterable[str]) -> list[str]:
    """The node ids among the file names of a root turn folder."""
    return [m.group(1) for n in names if (m := NODE_FILE.fullmatch(n))]


def rerooted(node: dict[str, Any], old_root: str, new_root: str) -> dict[str, Any]:
    """``node`` chained after ``new_root`` instead of ``old_root`` (a line begun without the
    session, joined as a branch from its root; ``metadata.joined_from_root`` keeps it)."""
    out = dict(node)
    if out.get("predecessor") == old_root:
        out["predecessor"] = new_root
    if out.get("caller") == old_root:
        out["caller"] = new_root
    metadata = dict(out.get("metadata") or {})
    metadata["joined_from_root"] = old_root
    out["metadata"] = metadata
    return out


# -- lines of one session --------------------------------------------------------------------
@dataclass(frozen=True)
class Line:
    tip: str  # the last node of the line
    turns: int  # its turns since it left the line HEAD is on


def other_lines(chain: Mapping[str, str | None], head: str | None) -> list[Line]:
    """The lines of the conversation ``chain`` (node -> predecessor, in seq order) other than
    the one HEAD ends, with their turns since they left HEAD's line."""
    ours: set[str] = set()
    node = head
    while node is not None and node not in ours:
        ours.add(node)
        node = chain.get(node)
    followed = {pred for pred in chain.values() if pred is not None}
    lines: list[Line] = []
    for tip in chain:
        if tip in followed or tip in ours:
            continue
        turns, node, seen = 0, tip, set()
        while node is not None and node not in ours and node not in seen:
            seen.add(node)
            turns += 1
            node = chain.get(node)
        lines.append(Line(tip, turns))
    return lines
