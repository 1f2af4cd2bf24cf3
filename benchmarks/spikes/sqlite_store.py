"""Spike for issue 36 (not part of the package): a session's live state in SQLite (WAL),
its history in git through GitPython/gitdb, one commit per turn, no index, no work tree.

::

    <session>/.git/            history: one commit per turn (objects written in-process by
                               gitdb, trees by GitPython's ``tree_to_stream``)
    <session>/.state/live.db   live state: seq, turn, HEAD, node rows; never committed,
                               derived from git for every committed turn

A writer holds SQLite's write lock (``BEGIN IMMEDIATE``) for every state change: the seq
and turn allocation, the HEAD compare-and-swap, a node row, and the commit (trees, commit
object, ref, rows marked committed).  The kernel drops that lock when its owner dies, so
no lock file is ever left behind that a person must delete.  Git's own ref lock
(``refs/heads/main.lock``) is only ever taken while SQLite's write lock is held: a
``main.lock`` found then is a dead writer's, and is taken over at once.

Recovery at open, under the write lock: a ref that moved past the database's commit (a
writer killed between the ref and SQLite's COMMIT) or a missing database is re-derived from
git; ``running`` rows of dead owners become ``interrupted`` and their uncommitted rows are
committed (one statement, one commit).
"""

from __future__ import annotations

import io
import json
import os
import socket
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from git import Actor, Repo
from git.db import GitCmdObjectDB
from git.objects import Commit, Tree
from git.objects.fun import tree_entries_from_data, tree_to_stream
from gitdb import IStream
from gitdb.db import LooseObjectDB, MemoryDB
from gitdb.pack import PackEntity

REF = "refs/heads/main"
MODE_FILE, MODE_TREE = 0o100644, 0o40000
TURNS_PER_BUCKET = 100
ACTOR = Actor("OpenProgram", "openprogram@localhost")
# The fixed, minimal, hook-free configuration every git call of the session gets.
GIT_CONFIG = {
    "core.hooksPath": "/dev/null",
    "core.logAllRefUpdates": "false",
    "gc.auto": "0",
    "commit.gpgSign": "false",
    "core.fsmonitor": "false",
}
ROLE_LETTER = {"user": "u", "llm": "l", "code": "c"}
SCHEMA = """
CREATE TABLE IF NOT EXISTS state(k TEXT PRIMARY KEY, v);
CREATE TABLE IF NOT EXISTS nodes(
  seq INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, turn INTEGER NOT NULL, role TEXT,
  name TEXT, kind TEXT, status TEXT, caller TEXT, predecessor TEXT, created_at REAL,
  tokens_in INTEGER, tokens_out INTEGER, body BLOB,
  blob BLOB, dirty INTEGER NOT NULL DEFAULT 1, owner TEXT);
CREATE INDEX IF NOT EXISTS nodes_turn ON nodes(turn);
CREATE INDEX IF NOT EXISTS nodes_dirty ON nodes(dirty) WHERE dirty = 1;
CREATE TABLE IF NOT EXISTS trees(parent TEXT, name TEXT, sha BLOB, PRIMARY KEY(parent, name));
"""
# A test hook: pause holding git's ref lock until stdin gives a line (a kill lands there).
PAUSE_IN_REF_LOCK = "SPIKE_PAUSE_IN_REF_LOCK"


class StoreError(Exception):
    """A store operation failed; the session's committed history is intact."""


class HeadMoved(StoreError):
    """HEAD was not the expected node (another writer moved it)."""


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def me() -> str:
    """This process, named so that a later process can tell whether it is still alive."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def alive(owner: str) -> bool:
    host, pid, started = owner.rsplit(":", 2)
    if host != socket.gethostname():
        return True  # another machine's: never ours to end
    return _start_time(int(pid)) == started


def relpath(turn: int, seq: int, role: str, node_id: str) -> tuple[str, str]:
    """(turn folder, file name) of a node: ``history/<bucket>/<turn>`` (two levels)."""
    letter = ROLE_LETTER.get(role, "x")
    return (
        f"history/{turn // TURNS_PER_BUCKET:04d}/{turn:06d}",
        f"{seq:08d}-{letter}-{node_id}.json",
    )


def init_git(path: Path) -> None:
    repo = Repo.init(path, initial_branch="main")
    with repo.config_writer() as cw:
        for key, value in GIT_CONFIG.items():
            section, option = key.split(".")
            cw.set_value(section, option, value)
    repo.close()


class SpikeSession:
    """One open session (one process may open it several times, one handle each)."""

    def __init__(
        self, path: str | os.PathLike[str], session_id: str = "s", *, keep: bool = False,
        pack: bool = True,
    ) -> None:  # fmt: skip
        """``keep``: the process keeps the SQLite connection (and the Repo) after
        :meth:`close` for the next open; otherwise the last close checkpoints the WAL.
        ``pack``: a commit's objects are one pack (gitdb's ``write_pack``: two files a
        turn), else a loose file each (~10 a turn)."""
        self.pack = pack
        self._mem: MemoryDB | None = None
        self.path = Path(path)
        self.id = session_id
        self.git_dir = self.path / ".git"
        if not (self.git_dir / "HEAD").exists():
            self.path.mkdir(parents=True, exist_ok=True)
            init_git(self.path)
        (self.path / ".state").mkdir(exist_ok=True)
        self.owner = me()
        self.keep = keep
        handle = _kept.pop(str(self.path), None) if keep else None
        if handle is None:
            handle = _open_handle(self.path)
        self.db, self.repo, self.objects = handle
        self.takeovers = 0
        self.recover()

    # -- transactions -----------------------------------------------------------------
    def _write(self) -> sqlite3.Connection:
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"session {self.id}: {exc}") from exc
        return self.db

    def _get(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT v FROM state WHERE k = ?", (key,)).fetchone()
        return default if row is None else row[0]

    def _set(self, key: str, value: Any) -> None:
        self.db.execute("INSERT OR REPLACE INTO state(k, v) VALUES (?, ?)", (key, value))

    def _run(self, fn: Any, *args: Any) -> Any:
        """``fn`` inside one write transaction; any failure rolls it back, one line."""
        self._write()
        try:
            result = fn(*args)
            self.db.execute("COMMIT")
            return result
        except BaseException as exc:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            if isinstance(exc, (sqlite3.Error, OSError)):
                raise StoreError(f"session {self.id}: {exc}") from exc
            raise

    # -- the write path ---------------------------------------------------------------
    def begin_turn(self) -> int:
        def take() -> int:
            turn = int(self._get("turn", 0)) + 1
            self._set("turn", turn)
            return turn

        return int(self._run(take))

    def head_id(self) -> str | None:
        return self._get("head")  # type: ignore[no-any-return]

    def append(
        self, node: dict[str, Any], *, turn: int, advance_head: bool = False,
        expected_head: str | bool | None = False,
    ) -> dict[str, Any]:  # fmt: skip
        """Give ``node`` its seq (and, moving HEAD, its predecessor) and write its row."""

        def put() -> dict[str, Any]:
            seq = int(self._get("seq", 0)) + 1
            self._set("seq", seq)
            node.update(seq=seq, turn=turn)
            if advance_head:
                head = self._get("head")
                if expected_head is not False and head != expected_head:
                    raise HeadMoved(f"HEAD is {head}, not {expected_head}")
                node["predecessor"] = head
                self._set("head", node["id"])
            self._row(node)
            return node

        return self._run(put)  # type: ignore[no-any-return]

    def update(self, node: dict[str, Any]) -> None:
        self._run(self._row, node)

    def _row(self, node: dict[str, Any]) -> None:
        meta = node.get("metadata", {})
        usage = meta.get("usage") or {}
        self.db.execute(
            "INSERT OR REPLACE INTO nodes(id, seq, turn, role, name, kind, status, caller,"
            " predecessor, created_at, tokens_in, tokens_out, body, blob, dirty, owner)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,"
            "  (SELECT blob FROM nodes WHERE id = ?), 1, ?)",
            (
                node["id"], node["seq"], node["turn"], node.get("role"), node.get("name"),
                meta.get("kind"), meta.get("status"), node.get("caller"),
                node.get("predecessor"), node.get("created_at"), usage.get("input_tokens"),
                usage.get("output_tokens"), json.dumps(node, sort_keys=True).encode(),
                node["id"], self.owner,
            ),
        )  # fmt: skip

    def commit(self, message: str) -> str | None:
        """One commit of this process's changed rows: blobs outside the lock, the trees,
        the commit, the ref and the rows under it."""
        mine = self.db.execute(
            "SELECT id, body FROM nodes WHERE dirty = 1 AND owner = ?", (self.owner,)
        ).fetchall()
        if not mine:
            return None
        self._mem = None
        try:
            blobs = {nid: self._store(b"blob", body) for nid, body in mine}
        except OSError as exc:
            raise StoreError(f"session {self.id}: {exc}") from exc
        try:
            return self._run(self._commit_locked, blobs, message)  # type: ignore[no-any-return]
        finally:
            self._mem = None

    def _store(self, kind: bytes, data: bytes) -> bytes:
        if self.pack:
            if self._mem is None:
                self._mem = MemoryDB()
            return self._mem.store(IStream(kind, len(data), io.BytesIO(data))).binsha  # type: ignore[no-any-return]
        return self.objects.store(IStream(kind, len(data), io.BytesIO(data))).binsha  # type: ignore[no-any-return]

    def _tree(self, entries: Iterable[tuple[bytes, int, str]]) -> bytes:
        # git's order: a tree's name sorts as if it ended in "/"
        ordered = sorted(entries, key=lambda e: e[2] + ("/" if e[1] == MODE_TREE else ""))
        out = io.BytesIO()
        tree_to_stream(ordered, out.write)
        return self._store(b"tree", out.getvalue())

    def _commit_locked(self, blobs: dict[str, bytes], message: str) -> str:
        db = self.db
        parent = self._get("commit")
        for nid, sha in blobs.items():  # a terminal node's content is git's from now on
            db.execute(
                "UPDATE nodes SET blob = ?, dirty = 0, body = CASE WHEN status IN"
                " ('running', 'awaiting') THEN body END WHERE id = ?",
                (sha, nid),
            )
        q = ",".join("?" * len(blobs))
        turns = [r[0] for r in db.execute(
            f"SELECT DISTINCT turn FROM nodes WHERE id IN ({q})", list(blobs))]  # fmt: skip
        changed: set[str] = set()
        for turn in turns:
            entries = []
            for seq, role, nid, sha in db.execute(
                "SELECT seq, role, id, blob FROM nodes WHERE turn = ? AND blob IS NOT NULL",
                (turn,),
            ):
                folder, name = relpath(turn, seq, role, nid)
                entries.append((sha, MODE_FILE, name))
            bucket, leaf = folder.rsplit("/", 1)
            self._put_tree(bucket, leaf, self._tree(entries))
            changed.add(bucket)
        for bucket in sorted(changed):
            top, name = bucket.rsplit("/", 1)
            self._put_tree(top, name, self._tree(self._children(bucket)))
        history = self._tree(self._children("history"))
        meta = {
            "v": 1, "id": self.id, "head_id": self._get("head"),
            "turns": int(self._get("committed_turns", 0)) + len(turns),
            "updated_at": time.time(),
        }  # fmt: skip
        self._set("committed_turns", meta["turns"])
        meta_sha = self._store(b"blob", json.dumps(meta, indent=1).encode())
        root = self._tree([(history, MODE_TREE, "history"), (meta_sha, MODE_FILE, "meta.json")])
        parents = [Commit(self.repo, bytes.fromhex(parent))] if parent else []
        # Commit.create_from_tree, without its config read per commit (author given)
        now, offset = int(time.time()), time.altzone if time.daylight else time.timezone
        commit = Commit(
            self.repo, Commit.NULL_BIN_SHA, Tree(self.repo, root), ACTOR, now, offset,
            ACTOR, now, offset, message, parents, "UTF-8",
        )  # fmt: skip
        out = io.BytesIO()
        commit._serialize(out)
        sha = self._store(b"commit", out.getvalue()).hex()
        if self._mem is not None:
            self._write_pack(self._mem)
        self._move_ref(parent, sha)
        self._set("commit", sha)
        return sha

    def _write_pack(self, mem: MemoryDB) -> None:
        """The commit's objects as one pack and its index (gitdb writes both formats);
        renamed into place pack first, so git never sees an index without its pack."""
        folder = self.git_dir / "objects" / "pack"
        folder.mkdir(exist_ok=True)
        shas = list(mem.sha_iter())
        fds: list[int] = []
        tmps: list[str] = []
        try:
            for prefix in ("tmp_pack_", "tmp_idx_"):
                fd, tmp = tempfile.mkstemp(prefix=prefix, dir=folder)
                fds.append(fd)
                tmps.append(tmp)
            pack_sha, _ = PackEntity.write_pack(
                (mem.stream(s) for s in shas),
                lambda d: os.write(fds[0], d),
                lambda d: os.write(fds[1], d),
                len(shas),
            )
            for fd in fds:
                os.close(fd)
            fds.clear()
            name = f"pack-{pack_sha.hex()}"
            os.replace(tmps[0], folder / f"{name}.pack")
            os.replace(tmps[1], folder / f"{name}.idx")
        except BaseException:
            for fd in fds:
                os.close(fd)
            for tmp in tmps:
                Path(tmp).unlink(missing_ok=True)
            raise

    def _children(self, parent: str) -> list[tuple[bytes, int, str]]:
        rows = self.db.execute("SELECT name, sha FROM trees WHERE parent = ?", (parent,))
        return [(sha, MODE_TREE, name) for name, sha in rows]

    def _put_tree(self, parent: str, name: str, sha: bytes) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO trees(parent, name, sha) VALUES (?, ?, ?)",
            (parent, name, sha),
        )

    def _move_ref(self, old: str | None, new: str) -> None:
        """Git's lockfile protocol, in-process, under SQLite's write lock (so a
        ``main.lock`` found here is a dead writer's: taken over at once)."""
        ref = self.git_dir / REF
        lock = ref.with_name(ref.name + ".lock")
        ref.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            self.takeovers += 1
            os.unlink(lock)
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if os.environ.get(PAUSE_IN_REF_LOCK):
                print("holding-ref-lock", flush=True)
                input()
            current = self._read_ref()
            if current != old:
                raise StoreError(f"{REF} is {current}, the live state says {old}")
            os.write(fd, new.encode() + b"\n")
            os.close(fd)
            fd = -1
            os.replace(lock, ref)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            lock.unlink(missing_ok=True)
            raise

    def _read_ref(self) -> str | None:
        try:
            return (self.git_dir / REF).read_text().strip() or None
        except FileNotFoundError:
            packed = self.git_dir / "packed-refs"
            if packed.exists():
                for line in packed.read_text().splitlines():
                    if line.endswith(" " + REF):
                        return line.split()[0]
            return None

    # -- recovery ---------------------------------------------------------------------
    def recover(self) -> None:
        """At open: re-derive from git what the ref has and the database lacks; then end
        dead owners' running nodes and commit what they left uncommitted."""
        if self._get("commit") != self._read_ref():
            self._run(self._derive_from_git)
        dead = [o for (o,) in self.db.execute(
            "SELECT DISTINCT owner FROM nodes WHERE dirty = 1 OR status = 'running'"
        ) if o != self.owner and not alive(o)]  # fmt: skip
        if not dead:
            return
        q = ",".join("?" * len(dead))

        def end() -> None:
            for (body,) in self.db.execute(
                f"SELECT body FROM nodes WHERE status = 'running' AND owner IN ({q})", dead
            ).fetchall():
                node = json.loads(body)
                node["metadata"]["status"] = "interrupted"
                self._row(node)  # (owner becomes this process: committed below)
            self.db.execute(
                f"UPDATE nodes SET owner = ? WHERE dirty = 1 AND owner IN ({q})",
                [self.owner, *dead],
            )

        self._run(end)
        self.commit("recover: interrupted turn")

    def _derive_from_git(self) -> None:
        """Rebuild trees and rows from the ref's commit (what a deleted or lagging
        database lacks); rows of the turn in flight are kept."""
        head = self._read_ref()
        db = self.db
        db.execute("DELETE FROM trees")
        db.execute("DELETE FROM state WHERE k IN ('commit', 'committed_turns')")
        if head is None:
            return
        # git's own reader (one `git cat-file --batch` process): a session's hundreds of
        # unmerged packs make gitdb's pure-Python lookups slow
        odb = GitCmdObjectDB(str(self.git_dir / "objects"), self.repo.git)

        def entries(sha: bytes) -> list[tuple[bytes, int, str]]:
            return tree_entries_from_data(odb.stream(sha).read())  # type: ignore[no-any-return]

        root = dict((n, s) for s, _m, n in entries(
            _commit_tree(odb.stream(bytes.fromhex(head)).read())))  # fmt: skip
        meta = json.loads(odb.stream(root["meta.json"]).read())
        max_seq = max_turn = 0
        for bsha, _m, bucket in entries(root["history"]):
            self._put_tree("history", bucket, bsha)
            for tsha, _m2, turn in entries(bsha):
                self._put_tree(f"history/{bucket}", turn, tsha)
                max_turn = max(max_turn, int(turn))
                for fsha, _m3, name in entries(tsha):
                    nid = name[:-5].split("-", 2)[2]
                    row = db.execute("SELECT blob FROM nodes WHERE id = ?", (nid,)).fetchone()
                    if row is not None and row[0] == fsha:
                        max_seq = max(max_seq, int(name[:8]))
                        continue
                    node = json.loads(odb.stream(fsha).read())
                    self._row(node)
                    db.execute(
                        "UPDATE nodes SET blob = ?, dirty = 0, owner = NULL, body = CASE"
                        " WHEN status IN ('running', 'awaiting') THEN body END WHERE id = ?",
                        (fsha, nid),
                    )  # fmt: skip
                    max_seq = max(max_seq, node["seq"])
        self._set("commit", head)
        self._set("committed_turns", meta.get("turns", 0))
        self._set("head", self._get("head") or meta.get("head_id"))
        self._set("seq", max(max_seq, int(self._get("seq", 0))))
        self._set("turn", max(max_turn, int(self._get("turn", 0))))

    def close(self) -> None:
        if self.keep:
            _kept[str(self.path)] = (self.db, self.repo, self.objects)
        else:
            self.db.close()
            self.repo.close()


Handle = tuple[sqlite3.Connection, Repo, LooseObjectDB]
_kept: dict[str, Handle] = {}


def _open_handle(path: Path) -> Handle:
    db = sqlite3.connect(path / ".state" / "live.db", isolation_level=None)
    db.execute("PRAGMA busy_timeout = 30000")
    if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")  # WAL: durable across a kill
    # a turn writes ~65 WAL pages (11 transactions; checkpoints every ~15 turns, the
    # default 1,000 pages); the WAL file is cut back to 4 MiB after a checkpoint
    db.execute("PRAGMA journal_size_limit = 4194304")
    db.executescript(SCHEMA)
    # (objects are written through gitdb directly; the Repo's own odb, which runs `git
    # hash-object` per stored object, serves reads only)
    repo = Repo(path)
    return db, repo, LooseObjectDB(str(path / ".git" / "objects"))


def _commit_tree(data: bytes) -> bytes:
    first = data.split(b"\n", 1)[0]
    assert first.startswith(b"tree ")
    return bytes.fromhex(first[5:].decode())


def repack_in_background(path: Path) -> subprocess.Popen[bytes]:
    """git's own packing, detached from the writer (it waits for nothing)."""
    args = ["git"]
    for key, value in GIT_CONFIG.items():
        args += ["-c", f"{key}={value}"]
    return subprocess.Popen(
        [*args, "-C", str(path), "repack", "-d", "-q", "--geometric=2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
