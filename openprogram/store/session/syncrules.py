"""What may arrive from elsewhere, how two lines of one session join, and how the turns of
several people are labelled: pure logic.

Everything a bundle, a fetch or an embedded blob brings is checked here before anything
is written into the session: the refs it carries and the shape of every new tree (only the
session layout, no symlinks, no submodules, no oversized blobs).  Git has refused what is
not a well-formed object already (``index-pack --strict``, ``transfer.fsckObjects``: bad or
hidden names such as ``..`` and ``.git``, zero-padded modes, unsorted or duplicate entries).
Joining two histories is a merge whose tree is the union of both: node files have unique ids
in their names, so the two lines of a diverged session never write the same path
(``meta.json`` and the committed bucket indexes aside, which are resolved here).  No I/O:
the caller reads the objects.
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
NODE_FILE = re.compile(r"[0-9]{8,}-[a-z]-[A-Za-z0-9_-]{1,64}\.json")


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
    """Checks the new trees of a history against the session layout, each tree once.

    ``trees``: sha -> raw tree data of every tree that arrived; ``sizes``: sha -> size of
    every blob that arrived.  Trees and blobs not listed are already local (trusted).
    """

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
        """Each commit rewrites a bucket tree of up to 100 entries, nearly all seen in the
        previous one: entries are matched in one regex pass, and a (name, mode) allowed at
        this depth once is not examined again."""
        if (tree, depth) in self._seen or tree not in self.trees:
            return
        self._seen.add((tree, depth))
        data = self.trees[tree]
        if self._fast and depth < len(_LAYOUT) and _LAYOUT[depth].fullmatch(data):
            # the whole tree is the layout at this depth (one match in C): only its
            # subtrees remain to look at; anything else takes the entry-by-entry path,
            # which says what is wrong
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
    """The mode a name may have at ``depth`` of a session tree (None: not allowed).

    ``meta.json``, ``.gitignore``, ``history/<bucket>/<turn>/<seq>-<l>-<id>.json`` and
    ``history/<bucket>/index.json`` — nothing else, so nothing hidden (``.gitattributes``,
    ``.gitmodules``), no ``..``, no separators.
    """
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
    """The tree holding both lines: the union of ``ours`` and ``theirs``.

    A path only one side changed since ``base`` takes that side; a path both changed keeps
    ours (``meta.json``: this user's HEAD and title; a bucket's ``index.json``: it records
    the tree it describes, so the store sees it no longer matches and scans the bucket).
    """
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


def changed_files(
    old: bytes | None, new: bytes | None, read: Reader, prefix: str = ""
) -> list[tuple[str, bytes | None]]:
    """Paths whose blob differs between two trees: (path, new blob sha, or None: removed)."""
    if old == new:
        return []
    a = read(old) if old is not None else {}
    b = read(new) if new is not None else {}
    out: list[tuple[str, bytes | None]] = []
    for name in sorted(set(a) | set(b)):
        before, after = a.get(name), b.get(name)
        if before == after:
            continue
        path = f"{prefix}{name}"
        old_tree = before[0] if before is not None and before[1] == TREE_MODE else None
        new_tree = after[0] if after is not None and after[1] == TREE_MODE else None
        if before is not None and old_tree is None and (after is None or new_tree is not None):
            out.append((path, None))
        if old_tree is not None or new_tree is not None:
            out.extend(changed_files(old_tree, new_tree, read, f"{path}/"))
        if after is not None and new_tree is None:
            out.append((path, after[0]))
    return out


# -- two histories of one id that share nothing ----------------------------------------------
ROOT_DIR = ("history", "0000", "000000")  # the root node's turn folder, in every session


def root_ids(names: Iterable[str]) -> list[str]:
    """The node ids among the file names of a root turn folder."""
    return [m.group(1) for n in names if (m := _NODE_ID.fullmatch(n))]


_NODE_ID = re.compile(r"[0-9]{8,}-[a-z]-([A-Za-z0-9_-]{1,64})\.json")


def rerooted(node: dict[str, Any], old_root: str, new_root: str) -> dict[str, Any]:
    """``node`` (which chained after ``old_root``) chained after ``new_root`` instead: the
    start of a line begun on a machine that did not have the session yet, joined to the
    session's history as a branch from its root (``metadata.joined_from_root`` keeps the
    root it had)."""
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
    """The lines of the conversation chain (``chain``: each node of it — a cell, a
    message, a top-level call, a bare ``llm`` call, the root — and its predecessor, in seq
    order; see ``Session.links``) other than the one HEAD ends, with how many turns each has
    since it left HEAD's line (two people who continued one session, or two copies of a
    notebook)."""
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


# -- a turn's label, unique across the people of a session ---------------------------------
# Each machine numbers its turns on from the highest it knows, so two people who go on from
# turn 4 each make a turn 5.  A number one person alone used stays as it is (``5``: a
# session of one author looks as it always did); a number several authors used is labelled
# by author, ``5@alice`` and ``5@bob`` (the author's key: the part of the email before the
# ``@``, else the name's first word, lowercased).  The same rule names the turns of a log
# (``turn 5@alice: …``), the sides of ``sessions diff`` and ``--from``; a number given
# alone when several authors used it is refused with the candidates listed.

_KEY_CHARS = re.compile(r"[^a-z0-9._-]+")
LABEL = re.compile(r"#?(\d{1,9})(?:[@.]([A-Za-z0-9._-]{1,64}))?")
TURN_SUMMARY = re.compile(r"turn (\d{1,9})(?=: |$)")


def author_key(name: str, email: str = "") -> str:
    """``alice`` for ``Alice Liddell <alice@example.org>``: the email's local part, else the
    name's first word, lowercased and kept to ``[a-z0-9._-]`` (empty: no author known)."""
    local = email.partition("@")[0] if "@" in email else ""
    for text in (local, (name.split() or [""])[0]):
        key = _KEY_CHARS.sub("", text.lower()).strip(".")[:32]
        if key:
            return key
    return ""


def node_author_key(metadata: Mapping[str, Any]) -> str:
    """:func:`author_key` of a node's ``metadata.author`` (``{"name", "email"}``)."""
    author = metadata.get("author")
    if not isinstance(author, Mapping):
        return ""
    name, email = author.get("name"), author.get("email")
    return author_key(
        name if isinstance(name, str) else "", email if isinstance(email, str) else ""
    )


def shared_numbers(turns: Iterable[tuple[int, str]]) -> set[int]:
    """The turn numbers more than one author used, of ``(number, author key)`` pairs."""
    keys: dict[int, set[str]] = {}
    for number, key in turns:
        keys.setdefault(number, set()).add(key)
    return {number for number, found in keys.items() if len(found) > 1}


def label(number: int, key: str, shared: set[int]) -> str:
    """``5`` or, when several authors used 5, ``5@key`` (``5@?`` for an unknown author)."""
    return f"{number}@{key or '?'}" if number in shared else str(number)


@dataclass(frozen=True)
class Spec:
    """A label as typed: ``5``, ``#5``, ``5@alice`` or ``5.alice``."""

    number: int
    key: str | None


def parse_label(text: str) -> Spec | None:
    """The turn a label names, or None when ``text`` is no label (a node id, ``head``)."""
    found = LABEL.fullmatch(text.strip())
    if found is None:
        return None
    return Spec(int(found.group(1)), found.group(2).lower() if found.group(2) else None)


def relabel_log(rows: Iterable[tuple[str, str, str]]) -> list[str]:
    """The summaries of a log's commits (``(summary, author name, email)``, any order) with
    ``turn N: …`` made ``turn N@key: …`` where several authors made a turn N."""
    rows = list(rows)
    keyed = []
    for summary, name, email in rows:
        found = TURN_SUMMARY.match(summary)
        keyed.append((int(found.group(1)) if found else None, author_key(name, email)))
    shared = shared_numbers((n, k) for n, k in keyed if n is not None)
    out = []
    for (summary, _name, _email), (number, key) in zip(rows, keyed, strict=True):
        if number is not None and number in shared:
            summary = f"turn {label(number, key, shared)}{summary[len(f'turn {number}') :]}"
        out.append(summary)
    return out


def turn_labels(nodes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Node id -> label (``5@alice``) of the turn-level node dicts (``Call.to_dict()``)
    whose number several authors made: what a DAG's detail shows as the turn.  A dict read
    light from the index (no ``metadata.author``) counts for no author; none: ``{}``."""
    found: list[tuple[str, int, str]] = []
    for node in nodes:
        meta = node.get("metadata")
        if not isinstance(meta, Mapping) or meta.get("kind") not in ("turn", "reply"):
            continue
        number = node.get("turn")
        if type(number) is int and isinstance(node.get("id"), str) and "author" in meta:
            found.append((node["id"], number, node_author_key(meta)))
    shared = shared_numbers((number, key) for _, number, key in found)
    return {nid: label(number, key, shared) for nid, number, key in found if number in shared}
