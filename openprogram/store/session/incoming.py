"""What arrives, before it joins a session: the caps on a pack counted as it streams to
``git index-pack --strict`` (git checks each object, not how much they inflate to: a delta
bomb is refused before git inflates it), bundle headers, the quarantine's spare kept for
the next pull, a fetch over git's dumb HTTP refused, and the check of what arrived: its
caps, refs and session layout (decision 0063).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import zlib
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NoReturn

import orjson
from gitdb.fun import OFS_DELTA, REF_DELTA, msb_size, type_id_to_type_map
from gitdb.pack import pack_object_at

from openprogram.errors import SyncError
from openprogram.store.session.files import MAX_FILE_BYTES
from openprogram.store.session.history import BLOB_MODE, TREE_MODE
from openprogram.store.session.index import BUCKET_INDEX, BUCKET_NAME, TURN_DIR_NAME, cat_file
from openprogram.store.session.remotes import git_fail
from openprogram.store.session.safegit import (
    HEAD_CONTENT,
    REPOSITORY_DIRS,
    canonical_config,
    git,
    git_command,
    holds,
    init_repository,
    is_real_dir,
    remove,
)

_KIND = {n: type_id_to_type_map[n].decode() for n in (1, 2, 3, 4)}  # commit, tree, blob, tag
_CHUNK = 1 << 16
_HEADER = 40  # an object's header and an ofs-delta's offset are shorter


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, "")) or default
    except ValueError:
        return default


@dataclass(frozen=True)
class Caps:
    """The most a bundle or a fetch may bring: inflated bytes, objects, one commit's bytes
    (100,000 turns: ~230 MB in ~1.1 M objects); ``OPENPROGRAM_INCOMING_MAX_*`` raise them."""

    total_bytes: int = 1 << 30
    objects: int = 4_000_000
    commit_bytes: int = 1 << 20

    @classmethod
    def from_env(cls) -> Caps:
        return cls(
            total_bytes=_env_int("OPENPROGRAM_INCOMING_MAX_BYTES", cls.total_bytes),
            objects=_env_int("OPENPROGRAM_INCOMING_MAX_OBJECTS", cls.objects),
        )

    def check_total(self, total: int, count: int) -> None:
        if count > self.objects:
            raise SyncError(f"refused: it holds more than {self.objects} git objects")
        if total > self.total_bytes:
            raise SyncError(
                f"refused: its objects inflate to more than {self.total_bytes >> 20} MiB "
                "(OPENPROGRAM_INCOMING_MAX_BYTES raises the cap)"
            )

    def check_object(self, kind: str, size: int) -> None:
        if kind in ("commit", "tag") and size > self.commit_bytes:
            raise SyncError(f"refused: a {kind} object of {size} bytes (limit {self.commit_bytes})")


# -- bundles ---------------------------------------------------------------------------------

BUNDLE_SIGNATURES = (b"# v2 git bundle\n", b"# v3 git bundle\n")
MAX_HEADER = 1 << 20
_HEX = re.compile(r"[0-9a-f]{40}")  # an object's name, as git writes it


def holds_bundle(path: Path) -> bool:
    """Whether ``path`` is a regular file that begins as a git bundle."""
    if not path.is_file():  # (a FIFO is never opened)
        return False
    try:
        with path.open("rb") as stream:
            return stream.readline(64) in BUNDLE_SIGNATURES
    except OSError:
        return False


def read_bundle_header(stream: BinaryIO) -> tuple[list[tuple[str, str]], list[str]]:
    """A v2/v3 bundle's refs ((sha, name)) and prerequisites, ``stream`` left at the pack."""
    first = stream.readline(64)
    if first not in BUNDLE_SIGNATURES:
        raise SyncError("refused: not a git bundle")
    refs: list[tuple[str, str]] = []
    prerequisites: list[str] = []
    used = len(first)
    while True:
        line = stream.readline(MAX_HEADER)
        used += len(line)
        if not line.endswith(b"\n") or used > MAX_HEADER:
            raise SyncError("refused: a malformed git bundle header")
        text = line[:-1].decode("ascii", "replace")
        if not text:
            return refs, prerequisites
        if text.startswith("@"):  # v3 capability: only sha1 is supported here
            if text.startswith("@object-format=") and text != "@object-format=sha1":
                raise SyncError(f"refused: a bundle of {text[1:]} objects")
            if text.startswith("@filter="):
                raise SyncError("refused: a partial (filtered) bundle")
            continue
        if text.startswith("-"):
            prerequisites.append(text[1:41])
            continue
        sha, _, name = text.partition(" ")
        if not _HEX.fullmatch(sha) or not name:
            raise SyncError("refused: a malformed git bundle header")
        refs.append((sha, name))


# -- packs ------------------------------------------------------------------------------------


class _Reader:
    """Bytes of ``stream`` in order, each passed to ``sink`` (git) once as it is read; to
    gitdb, a cursor on the pack whose window is the next ``_HEADER`` bytes."""

    def __init__(self, stream: BinaryIO, sink: Callable[[bytes], object]) -> None:
        self.stream, self.sink = stream, sink
        self.data, self.pos, self.offset = b"", 0, 0  # pos: in ``data``; offset: in the pack

    def fill(self, n: int = 1) -> bool:
        """At least ``n`` bytes buffered past ``pos`` (False: the pack ends first)."""
        while len(self.data) - self.pos < n:
            data = self.stream.read(_CHUNK)
            if not data:
                return False
            self.sink(data)
            self.data, self.pos = self.data[self.pos :] + data, 0
        return True

    def advance(self, n: int) -> None:
        self.pos += n
        self.offset += n

    def use_region(self, offset: int) -> _Reader:  # (gitdb asks at the object being read)
        return self

    def buffer(self) -> memoryview[bytes]:  # (format "c": gitdb reads a byte as ord(b"x"))
        return memoryview(self.data)[self.pos : self.pos + _HEADER].cast("c")


@dataclass
class PackScan:
    """How many objects a pack holds and the sum of their inflated sizes."""

    objects: int = 0
    inflated: int = 0


def scan_pack(stream: BinaryIO, sink: Callable[[bytes], object], caps: Caps) -> PackScan:
    """Read the pack on ``stream`` object by object into ``sink``: :class:`SyncError` as soon
    as the declared sizes pass ``caps``, before the object that would pass them inflates."""
    reader = _Reader(stream, sink)
    if not reader.fill(12):
        raise SyncError("refused: a truncated git pack")
    head = reader.data[:12]
    reader.advance(12)
    if head[:4] != b"PACK" or int.from_bytes(head[4:8], "big") not in (2, 3):
        raise SyncError("refused: not a git pack")
    count = int.from_bytes(head[8:12], "big")
    caps.check_total(0, count)
    scan = PackScan(objects=count)
    kinds: dict[int, int] = {}  # offset -> type, for ofs-deltas (result type = base type)

    def declare(n: int) -> None:
        caps.check_total(scan.inflated + n, count)

    for _ in range(count):
        start = reader.offset
        whole = reader.fill(_HEADER)
        try:
            end, info = pack_object_at(reader, start, False)
        except IndexError:  # (a header past the window: not one git writes)
            what = "a malformed object header in the" if whole else "a truncated"
            raise SyncError(f"refused: {what} git pack") from None
        kind = info.type_id
        if kind not in _KIND and kind not in (OFS_DELTA, REF_DELTA):
            raise SyncError(f"refused: an object of unknown type {kind} in the git pack")
        # the type it results in (a ref-delta's base may be here already: unknown)
        base = kinds.get(start - info.delta_info) if kind == OFS_DELTA else kind
        base = None if kind == REF_DELTA else base
        reader.advance(end - start)
        result = _inflate(reader, info.size, delta=kind in (OFS_DELTA, REF_DELTA), declare=declare)
        if base is not None:
            kinds[start] = base
            caps.check_object(_KIND.get(base, "blob"), result)
        scan.inflated += result
        caps.check_total(scan.inflated, count)
    while data := stream.read(_CHUNK):  # the rest (the pack's checksum): to git too
        sink(data)
    return scan


def _inflate(reader: _Reader, size: int, *, delta: bool, declare: Callable[[int], None]) -> int:
    """Inflate one object (output dropped) to find its end; its size (a delta's result's).
    zlib is fed only what the object can take: ``unused_data`` is a copy."""
    declare(size)
    inflater = zlib.decompressobj()
    produced = 0
    result = None if delta else size
    head = b""  # a delta's first bytes: its base's size, then its result's
    want = size + (size >> 10) + 64
    while not inflater.eof:
        if not reader.fill():
            raise SyncError("refused: a truncated git pack")
        start = reader.pos
        piece = reader.data[start : start + want]
        data = piece
        while data and not inflater.eof:
            try:
                out = inflater.decompress(data, _CHUNK)
            except zlib.error:  # (not a traceback: one line)
                raise SyncError("refused: an object in the git pack is not zlib data") from None
            data = inflater.unconsumed_tail
            produced += len(out)
            if produced > size:
                raise SyncError("refused: an object in the git pack is longer than it says")
            if result is None:
                head += out[:32]
                result = _delta_result(head)
                if result is not None:
                    declare(result)
        reader.advance(len(piece) - (len(inflater.unused_data) if inflater.eof else 0))
        want = max(want, _CHUNK)
    if produced != size or result is None:
        raise SyncError("refused: an object in the git pack is shorter than it says")
    return result


def _delta_result(head: bytes) -> int | None:
    """The result size a delta's first bytes declare: its second size (at most 10 bytes
    each); None: not enough bytes yet."""
    try:
        skip, _ = msb_size(head[:10])
        return msb_size(head[skip : skip + 10])[1]
    except AssertionError:  # (gitdb's word for no size's last byte in these)
        if len(head) >= 20:
            raise SyncError("refused: a malformed delta in the git pack") from None
        return None


def index_pack(repo: Path, pack: BinaryIO, caps: Caps) -> PackScan:
    """``git index-pack --strict`` the pack into the quarantine ``repo``, counted against
    ``caps`` as it streams (git stopped the moment they are passed)."""
    argv, env = git_command(repo, "index-pack", "--strict", "--fix-thin", "--stdin", sanitize=False)
    proc = subprocess.Popen(
        argv, cwd=repo, env=env, stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stderr is not None
    stdin = proc.stdin

    def feed(data: bytes) -> None:
        with suppress(BrokenPipeError):  # git stopped (it says why on stderr)
            stdin.write(data)

    try:
        scan = scan_pack(pack, feed, caps)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        with suppress(BrokenPipeError):
            stdin.close()
    said = proc.stderr.read()
    code = proc.wait()
    if code < 0:  # SIGXFSZ under `ulimit -f`, a kill…
        raise SyncError(f"git could not store it: {signal.strsignal(-code)}")
    if code != 0:
        fsck = b"error: object " in said or b"fsck" in said  # git's own check refused it
        what = "refused by git's object check" if fsck else "git could not store it"
        raise git_fail(what, subprocess.CompletedProcess(argv, code, b"", said))
    return scan


# -- the quarantine ----------------------------------------------------------------------------
SPARE = "openprogram-incoming"  # in a session's .git: an empty quarantine for its next pull
# a new repository's folders, and the one where a pull names what it borrows and what arrived
_NEW_DIRS = [f".git/{sub}" for sub in REPOSITORY_DIRS]
SKELETON = (".git", ".git/objects", ".git/refs", *_NEW_DIRS, ".git/refs/openprogram")
_FILES = {".git/HEAD": HEAD_CONTENT, ".git/config": canonical_config()}
_EXPECTED = {**dict.fromkeys(SKELETON, True), **dict.fromkeys(_FILES, False)}


def make(path: Path, local: Path | None) -> None:
    """An empty repository at ``path``: ``local``'s spare if exactly the skeleton, else new."""
    if local is not None:
        with suppress(OSError):  # none (or not movable): a new one
            os.rename(local / ".git" / SPARE, path)
        if is_skeleton(path):
            return
        if os.path.lexists(path):
            remove(path)  # a link is removed, never followed
    init_repository(path)
    os.mkdir(path / ".git" / "refs" / "openprogram")


def put_away(path: Path, local: Path | None) -> None:
    """Empty the quarantine back to the skeleton and keep it as ``local``'s spare, else
    delete it."""
    with suppress(OSError):
        if local and is_real_dir(local / ".git") and not os.path.lexists(local / ".git" / SPARE):
            _empty(path)
            if is_skeleton(path):
                os.rename(path, local / ".git" / SPARE)
                return
    shutil.rmtree(path, ignore_errors=True)


def _walk(path: Path) -> dict[str, bool]:
    """Every entry under ``path``: its relative path -> whether it is a real directory."""
    found = {}
    for where, dirs, files in os.walk(path):
        for name in dirs + files:
            rel = os.path.relpath(os.path.join(where, name), path)
            found[rel] = is_real_dir(path / rel)
    return found


def _empty(path: Path) -> None:
    """Remove everything under ``path`` but the skeleton's folders and files."""
    for rel, real_dir in _walk(path).items():
        if os.path.lexists(path / rel) and _EXPECTED.get(rel) != real_dir:
            remove(path / rel)


def is_skeleton(path: Path) -> bool:
    """Whether ``path`` is exactly the skeleton: real folders, ``HEAD``, the canonical
    ``config``, nothing else."""
    if not is_real_dir(path) or _walk(path) != _EXPECTED:
        return False
    return all(holds(path / rel, content) for rel, content in _FILES.items())


# -- how a fetch came -----------------------------------------------------------------------------
PACKETS = "openprogram-packets"  # in a quarantine's .git: the lines of git's protocol a fetch read


def traced(quarantine: Path) -> dict[str, str]:
    """The environment that has a fetch write the lines of git's protocol into ``quarantine``."""
    return {"GIT_TRACE_PACKET": os.path.abspath(quarantine / ".git" / PACKETS)}


def refuse_dumb(quarantine: Path, shown: str, *, spoken: bool) -> None:
    """:class:`SyncError` when a fetch came over git's dumb HTTP (plain files git never checks):
    loose objects (never adopted) or, ``spoken`` (not a path: a bundle), no protocol line read."""
    git_dir = quarantine / ".git"
    loose = any(any(fan.iterdir()) for fan in (git_dir / "objects").glob("[0-9a-f][0-9a-f]"))
    unheard = spoken  # (no trace written: none read)
    with suppress(OSError), (git_dir / PACKETS).open("rb") as trace:
        unheard = spoken and b" packet: " not in trace.read(1 << 12)
    if loose or unheard:
        raise SyncError(
            f"refused: {shown} serves plain files (git's dumb HTTP), whose objects git does not "
            "check; nothing pulled (serve it with git's smart HTTP, git http-backend, or ssh)"
        )


# -- the check of what arrived ------------------------------------------------------------------
NODE_NAME = re.compile(r"[0-9]{8,}-[a-z]-([A-Za-z0-9_-]{1,64})\.json")  # (the node id)
_ENTRY = re.compile(rb"([0-7]{1,7}) ([^\0]+)\0(.{20})", re.S)  # one tree entry
# the session layout, depth by depth: meta.json, .gitignore, history/<bucket>/index.json,
# history/<bucket>/<turn>/<seq>-<l>-<id>.json, nothing else: (mode, name pattern)
_LAYOUT = (
    ((BLOB_MODE, r"\.gitignore|meta\.json"), (TREE_MODE, "history")),
    ((TREE_MODE, BUCKET_NAME.pattern),),
    ((TREE_MODE, TURN_DIR_NAME.pattern), (BLOB_MODE, re.escape(BUCKET_INDEX))),
    ((BLOB_MODE, NODE_NAME.pattern),),
)
_WHOLE = [  # a tree wholly of the layout at its depth: one match
    re.compile(
        rb"(?:(?:"
        + rb"|".join(b"%o (?:" % m + p.encode() + b")" for m, p in depth)
        + rb")\0.{20})*",
        re.S,
    )
    for depth in _LAYOUT
]


def check_history(repo: Path, tip: str, session_id: str, caps: Caps) -> None:
    """What arrived (not borrowed) is under ``caps`` and has the session's layout, and
    ``tip`` is a commit whose ``meta.json`` names ``session_id``: ``cat-file --batch-check``,
    then ``--batch`` of its commits, trees and ``meta.json``."""
    kinds: dict[bytes, bytes] = {}
    sizes: dict[bytes, int] = {}
    fmt = "--batch-check=%(objectname) %(objecttype) %(objectsize)"
    for line in git(repo, "cat-file", fmt, input=_own_objects(repo)).stdout.splitlines():
        sha, kind, size = line.split(b" ")
        binsha = bytes.fromhex(sha.decode())
        kinds[binsha], sizes[binsha] = kind, int(size)
    if not _HEX.fullmatch(tip) or kinds.get(bytes.fromhex(tip), b"commit") != b"commit":
        raise SyncError(f"refused: its ref names no commit ({tip[:12]} is not one)")
    bad = {k.decode() for k in kinds.values()} - {"commit", "tree", "blob"}
    if bad:
        raise SyncError(f"refused: it holds git objects of type {', '.join(sorted(bad))}")
    caps.check_total(sum(sizes.values()), len(sizes))
    for sha, kind in kinds.items():
        caps.check_object(kind.decode(), sizes[sha])
    wanted = [s for s, k in kinds.items() if k != b"blob"]
    names = [s.hex().encode() for s in wanted] + [tip.encode(), f"{tip}:meta.json".encode()]
    *found, got_tip, meta = cat_file(repo, names, sanitize=False)  # (a tip borrowed: read too)
    if got_tip is None or got_tip[0] != b"commit":
        raise SyncError(f"refused: its ref names no commit ({tip[:12]} is not one)")
    trees: dict[bytes, bytes] = {}
    for sha, got in zip(wanted, found, strict=True):
        if got is None:
            raise SyncError(f"refused: git cannot read the object {sha.hex()} that arrived")
        if got[0] == b"tree":
            trees[sha] = got[1]
    roots = [bytes.fromhex(got[1][5:45].decode()) for got in found if got and got[0] == b"commit"]
    check_trees(trees, sizes, roots)  # (a commit, fsck'ed by git, begins "tree <sha>\n")
    if meta is None or meta[0] != b"blob":
        raise SyncError("refused: it has no meta.json (not a session)")
    try:
        data = orjson.loads(meta[1])  # nesting past 1,024 levels is an error, not a crash
    except ValueError as exc:
        raise SyncError(f"refused: its meta.json is not JSON ({exc})") from None
    named = data.get("id") if isinstance(data, dict) else None
    if named != session_id:
        raise SyncError(
            f"refused: it holds session {named!r}, not {session_id!r} "
            "(use --as NEW_ID to import it under another id)"
        )


def _own_objects(repo: Path) -> bytes:
    """The names (hex lines) of the objects in ``repo`` itself, not borrowed: what arrived."""
    objects = repo / ".git" / "objects"
    names: list[bytes] = []
    for idx in sorted((objects / "pack").glob("*.idx")):
        shown = git(repo, "show-index", input=idx.read_bytes()).stdout  # "<offset> <sha> (<crc>)"
        names.extend(line.split()[1] for line in shown.splitlines())
    for fan in sorted(objects.glob("[0-9a-f][0-9a-f]")):
        names.extend(f"{fan.name}{obj.name}".encode() for obj in fan.iterdir())
    return b"".join(n + b"\n" for n in names)


def check_trees(trees: dict[bytes, bytes], sizes: dict[bytes, int], roots: list[bytes]) -> None:
    """The trees that arrived (sha -> raw data), from the commits' ``roots``, have the
    session layout (each checked once at its depth), and no blob that arrived is over
    MAX_FILE_BYTES (the reader's rule: files.py)."""
    seen: set[tuple[bytes, int]] = set()

    def check(tree: bytes, depth: int, where: str) -> None:
        if (tree, depth) in seen or tree not in trees:
            return
        seen.add((tree, depth))
        entries = _ENTRY.findall(trees[tree])  # well-formed: git fsck'ed it
        if depth >= len(_WHOLE) or not _WHOLE[depth].fullmatch(trees[tree]):
            _refuse(entries, depth, where)
        for mode, name, sha in entries:  # (names of the layout: ASCII)
            if mode == b"40000":
                check(sha, depth + 1, f"{where}{name.decode()}/")
            elif sizes.get(sha, 0) > MAX_FILE_BYTES:
                raise SyncError(
                    f"refused: {where}{name.decode()} is {sizes[sha]} bytes, over the "
                    f"{MAX_FILE_BYTES >> 20} MiB a session file may be"
                )

    for root in roots:
        check(root, 0, "")


def _refuse(entries: list[tuple[bytes, bytes, bytes]], depth: int, where: str) -> NoReturn:
    """The first entry of a tree that is not of the layout at ``depth``, said in one line."""
    for raw_mode, raw_name, _ in entries:
        name, mode = raw_name.decode("utf-8", "surrogateescape"), int(raw_mode, 8)
        if mode == 0o120000:
            raise SyncError(f"refused: {where}{name} is a symbolic link")
        layout = _LAYOUT[depth] if depth < len(_LAYOUT) else ()
        if not any(raw_mode == b"%o" % m and re.fullmatch(p, name) for m, p in layout):
            what = {TREE_MODE: "folder", 0o160000: "submodule"}.get(mode, "file")
            raise SyncError(f"refused: unexpected {what} {where + name!r} in the session")
    raise SyncError(f"refused: a malformed tree {where!r} in the session")
