"""A session folder someone else wrote: nothing written or read outside it, nothing hangs.

Symlinks anywhere (where a bucket, a turn folder or a node file of an older version's
working tree was, ``meta.json``, ``.state``, the live database) are never followed; a
FIFO or a device planted where a node file was is never opened (nodes are read from git);
a 300 MB node file and deeply nested JSON committed to git are refused with
``CorruptedFile`` naming them, by an open that returns (checked in a child process with a
timeout and its peak memory); absurd numbers in a dead writer's rows or the counters are
reported and skipped; a session whose creation was killed leaves nothing ``sessions list``
shows nor anything in the way of creating it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from openprogram import session_context
from openprogram.cli import main
from openprogram.context.nodes import COMPLETED, RUNNING, make_call
from openprogram.errors import CorruptedFile, CorruptedFileWarning, RefusedFile, StoreError
from openprogram.store.session.files import dumps, read_bytes
from openprogram.store.session.index import TOTALS_TRIGGERS, keep_totals
from openprogram.store.session.live import LiveState, discard
from openprogram.store.session.safegit import run_git
from openprogram.store.session.store import SessionStore
from tests.test_live import DEAD_OWNER, plant_dead_rows

ROOT = Path(__file__).resolve().parent.parent
SID = "from_elsewhere"

pytestmark = pytest.mark.filterwarnings("ignore::openprogram.errors.CorruptedFileWarning")


def turn(home: Path, name: str, sid: str = SID) -> None:
    store = SessionStore(home)
    with session_context(sid, message=name, db=store) as h:
        top = h.writer.append(make_call("turn", name, status=COMPLETED), turn_level=True)
        h.writer.append(make_call("function", "plan", caller=top.id, status=COMPLETED))
    store.close()


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def node_files(folder: Path) -> list[Path]:
    """The node files of HEAD, as paths in the folder (a session has no working tree)."""
    listed = run_git(folder, "ls-tree", "-r", "--name-only", "HEAD", "history").stdout
    return sorted(folder / rel for rel in listed.decode().split() if rel.endswith(".json"))


def commit_file(folder: Path, rel: str, source: Path) -> None:
    """Commit ``source``'s content at ``rel`` with git's plumbing (a hand-made history)."""
    env = {**os.environ, "GIT_INDEX_FILE": str(folder / ".git" / "planted-index")}

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=folder, env=env, capture_output=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.decode().strip()

    sha = git("hash-object", "-w", str(source))
    git("read-tree", "HEAD")
    git("update-index", "--add", "--cacheinfo", f"100644,{sha},{rel}")
    tree = git("write-tree")
    ident = ("-c", "user.name=t", "-c", "user.email=t@localhost")
    commit = git(*ident, "commit-tree", tree, "-p", "HEAD", "-m", "planted")
    git("update-ref", "refs/heads/main", commit)
    os.unlink(env["GIT_INDEX_FILE"])


def open_fresh(home: Path) -> tuple[list[str], list[str]]:
    """Open the session in a fresh store: its problems and the names of its nodes."""
    store = SessionStore(home)
    try:
        session = store.open(SID)
        names = [n.name for n in session.nodes()]
        return list(session.problems), names
    finally:
        store.close()


def assert_healthy(home: Path) -> None:
    """The next turn commits and git finds the repository clean."""
    before = len(node_files(home / "sessions" / SID))
    turn(home, "after")
    folder = home / "sessions" / SID
    assert len(node_files(folder)) >= before + 2
    fsck = run_git(folder, "fsck", "--strict", "--no-progress", check=False)
    assert fsck.returncode == 0, fsck.stderr


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.json").write_text(json.dumps({"title": "read from outside"}))
    return path


def test_symlinks_in_a_session_are_never_followed(op_home: Path, outside: Path) -> None:
    turn(op_home, "first")
    turn(op_home, "second")
    folder = op_home / "sessions" / SID
    first_dir = node_files(folder)[1].parent  # the first turn's folder
    # a turn folder elsewhere, holding a copy of real nodes (would be listed if followed)
    (outside / "turn").mkdir()
    for node_file in node_files(folder)[1:3]:  # told apart from the committed nodes
        shown = run_git(folder, "show", f"HEAD:{node_file.relative_to(folder)}").stdout
        (outside / "turn" / node_file.name).write_bytes(shown.replace(b'"first"', b'"planted"'))
    first_dir.parent.mkdir(parents=True)
    first_dir.symlink_to(outside / "turn")
    # a node file of the second turn pointing at a file outside
    victim = node_files(folder)[-1]
    victim.parent.mkdir(parents=True)
    victim.symlink_to(outside / "secret.json")
    # future turn folders and bucket planted as links, for writes to go through
    (outside / "planted").mkdir()
    (folder / "history" / "0000" / "000003").symlink_to(outside / "planted")
    (folder / "history" / "0001").symlink_to(outside / "planted")
    # meta.json, .state, the index cache
    (folder / "meta.json").unlink()
    (folder / "meta.json").symlink_to(outside / "secret.json")
    shutil.rmtree(folder / ".state")
    (outside / "state").mkdir()
    (folder / ".state").symlink_to(outside / "state")
    before = snapshot(outside)

    problems, names = open_fresh(op_home)
    text = "\n".join(problems)
    assert str(first_dir) not in text and str(victim) not in text  # never even looked at
    assert f"{folder / 'meta.json'}: a symbolic link (not followed)" in text
    assert "planted" not in names  # the linked turn folder was not read...
    assert "first" in names  # ...its committed nodes were, from git
    assert_healthy(op_home)
    assert snapshot(outside) == before
    assert os.listdir(outside / "planted") == [] and os.listdir(outside / "state") == []
    meta = json.loads((folder / "meta.json").read_bytes())
    assert meta["title"] != "read from outside" and not (folder / "meta.json").is_symlink()
    assert (folder / ".state").is_dir() and not (folder / ".state").is_symlink()


def test_a_file_where_the_state_folder_belongs_is_named_as_a_file(op_home: Path) -> None:
    turn(op_home, "first")
    state = op_home / "sessions" / SID / ".state"
    shutil.rmtree(state)
    state.write_bytes(b"planted")
    store = SessionStore(op_home)
    try:
        with pytest.raises(RefusedFile) as refused:
            store.open(SID)
    finally:
        store.close()
    assert str(refused.value) == "a file, not a directory"
    assert refused.value.filename == str(state)
    assert state.read_bytes() == b"planted"  # refused, not replaced


def test_a_folder_where_meta_json_belongs_fails_the_commit_in_one_line(op_home: Path) -> None:
    """The commit's rename onto a folder fails: the error names ``meta.json`` (not a
    temporary file), and no temporary file is left in the session folder."""
    turn(op_home, "first")
    folder = op_home / "sessions" / SID
    (folder / "meta.json").unlink()
    (folder / "meta.json").mkdir()
    (folder / "meta.json" / "kept").write_bytes(b"someone's")
    with pytest.raises(StoreError) as failed:
        turn(op_home, "second")
    assert str(failed.value) == f"{folder / 'meta.json'}: cannot be replaced (Is a directory)"
    assert [name for name in os.listdir(folder) if name.endswith(".tmp")] == []
    assert (folder / "meta.json" / "kept").read_bytes() == b"someone's"


def test_links_inside_state_are_replaced_not_followed(op_home: Path, outside: Path) -> None:
    turn(op_home, "first")
    state = op_home / "sessions" / SID / ".state"
    for name in ("live.db", "live.db-wal", "live.db-shm", "index.json", "place"):
        (state / name).unlink(missing_ok=True)
        (state / name).symlink_to(outside / "secret.json")
    (outside / "journal").mkdir()
    (state / "live.db-journal").symlink_to(outside / "journal")
    before = snapshot(outside)
    open_fresh(op_home)
    assert_healthy(op_home)
    assert snapshot(outside) == before and os.listdir(outside / "journal") == []


def test_a_bound_under_64_kib_is_kept(op_home: Path, tmp_path: Path) -> None:
    """``read_bytes``'s bound holds below its first read's 64 KiB: the place file's 4,096
    bytes (``Session.note_place``) refuse a 10 KB file someone wrote there, unread."""
    small = tmp_path / "small"
    small.write_bytes(b"x" * 100)
    assert read_bytes(str(small), 100) == b"x" * 100
    with pytest.raises(RefusedFile, match="larger than the 99-byte bound"):
        read_bytes(str(small), 99)
    turn(op_home, "first")
    place = op_home / "sessions" / SID / ".state" / "place"
    place.write_bytes(b"notebook " + b"x" * 10_000)
    store = SessionStore(op_home)
    try:
        assert store.place(SID) == ""  # refused: unknown, not its first 4,096 bytes
        store.open(SID).note_place("notebook  a.ipynb")
        assert store.place(SID) == "notebook a.ipynb" and place.read_bytes() == b"notebook a.ipynb"
    finally:
        store.close()


OPEN_IN_CHILD = """
import sys, warnings
from openprogram.errors import CorruptedFile
from openprogram.store.session.store import SessionStore
warnings.simplefilter("ignore")
store = SessionStore(sys.argv[1])
session = store.open(sys.argv[2])
print("\\n".join(session.problems))
for node in session.index():
    try:
        session.get(node["id"])
    except CorruptedFile as exc:
        print("GET", exc)
store.close()
# the peak RSS of this process image (ru_maxrss would include the forking parent's)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print("MAXRSS", hwm)
"""


def make_bad(kind: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero
        except PermissionError:
            pytest.skip("making a device node needs root")
    elif kind == "300 MB":
        with open(path, "wb") as fh:  # sparse: no disk used
            fh.truncate(300 << 20)
    elif kind == "deep JSON":
        path.write_bytes(b"[" * 200_000 + b"]" * 200_000)


@pytest.mark.parametrize("kind", ["fifo", "device", "300 MB", "deep JSON"])
def test_special_and_huge_node_files_are_refused_within_bounds(
    op_home: Path, kind: str, tmp_path: Path
) -> None:
    turn(op_home, "first")
    folder = op_home / "sessions" / SID
    victim = node_files(folder)[-1]
    node_id = victim.name.split("-", 2)[2].removesuffix(".json")
    store = SessionStore(op_home)
    session = store.open(SID)  # lists the node, has not read it
    if kind in ("fifo", "device"):  # where an older version's checkout had the file:
        make_bad(kind, victim)  # never opened, the node is git's
        other = SessionStore(op_home)
        assert other.open(SID).get(node_id).id == node_id
        other.close()
        victim.unlink()
        make_bad(kind, tmp_path / "special")  # git stores no such file: a copy of its bytes
        planted = tmp_path / "special.bytes"
        planted.write_bytes(b"\x00not a node" if kind == "device" else b"")
    else:
        make_bad(kind, tmp_path / "bad.json")
        planted = tmp_path / "bad.json"
    commit_file(folder, str(victim.relative_to(folder)), planted)
    with pytest.raises(CorruptedFile, match=str(victim)):
        session.get(node_id)
    store.close()
    result = subprocess.run(  # the bound: an open that hangs fails the test here
        [sys.executable, "-c", OPEN_IN_CHILD, str(op_home), SID],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    assert f"corrupted session file {victim}" in result.stdout
    maxrss_kib = int(result.stdout.rsplit("MAXRSS", 1)[1])
    assert maxrss_kib < 200 * 1024  # the 300 MB file was never read into memory
    assert_healthy(op_home)


def test_absurd_numbers_in_rows_index_and_counters_are_reported_and_skipped(
    op_home: Path,
) -> None:
    turn(op_home, "first")
    folder = op_home / "sessions" / SID
    state = folder / ".state"
    good = make_call("function", "stuck", status=RUNNING)
    good.seq, good.turn = 50, 7
    records = [dumps(good.to_dict())]
    for seq, turn_number in ((10**300, 1), (-3, 1), ("7", 1), (60, 10**16), (61, True)):
        bad = make_call("function", "bad", status=RUNNING).to_dict()
        bad["seq"], bad["turn"] = seq, turn_number
        records.append(json.dumps(bad).encode())
    records.append(b'{"id": "x", "role": "code", "name": "n", "seq": 62, "metadata": 5}')
    records.append(b"[1, 2]")
    plant_dead_rows(folder, records)
    live = LiveState(state)
    live.write(-(2**40), 2, None)  # next seq: negative
    live.close()

    with pytest.warns(CorruptedFileWarning) as caught:
        problems, names = open_fresh(op_home)
    text = "\n".join(problems)
    assert f"{DEAD_OWNER}): 7 record(s) skipped" in text
    assert "stuck" in names and "bad" not in names  # the good record was recovered
    assert caught
    assert_healthy(op_home)
    store = SessionStore(op_home)
    seqs = [n.seq for n in store.open(SID).nodes()]
    store.close()
    assert min(seqs) >= 0 and len(set(seqs)) == len(seqs)


def test_a_row_whose_owner_is_not_text_leaves_the_session_openable(op_home: Path) -> None:
    """A crafted live.db row with a BLOB owner (SQLite keeps it a BLOB in a TEXT column)."""
    turn(op_home, "first")
    db = sqlite3.connect(op_home / "sessions" / SID / ".state" / "live.db")
    with db:
        db.execute("INSERT INTO rows VALUES ('planted', x'00ff3a313a32', x'7b7d')")
    db.close()
    _problems, names = open_fresh(op_home)
    assert "first" in names
    assert_healthy(op_home)


def test_a_planted_path_in_the_index_is_never_committed(op_home: Path) -> None:
    """A crafted live.db names, for a dead writer's node, the file ``history``: its
    recovery commits it at its own file, never over the session's history."""
    turn(op_home, "first")
    folder = op_home / "sessions" / SID
    node = make_call("function", "planted", status=RUNNING)
    node.seq, node.turn = 90, 9
    plant_dead_rows(folder, [dumps(node.to_dict())])
    db = sqlite3.connect(folder / ".state" / "live.db")
    keep_totals(db)  # (the totals' triggers call its functions)
    with db:
        db.execute(
            "INSERT INTO nodes (id, seq, turn, role, name, kind, status, path)"
            " VALUES (?, 90, 9, 'code', 'planted', 'function', 'running', 'history')",
            (node.id,),
        )
    db.close()
    discard(folder / ".state")  # (this process's kept connection: the next open makes one)
    _problems, names = open_fresh(op_home)
    assert {"first", "plan", "planted"} <= set(names)
    top = run_git(folder, "ls-tree", "HEAD").stdout.decode()
    assert "tree" in next(line for line in top.splitlines() if line.endswith("\thistory"))
    assert_healthy(op_home)


def test_triggers_planted_in_the_live_database_are_dropped(op_home: Path) -> None:
    """A crafted live.db with a trigger of its own (it deletes every row in flight as it is
    written: a SIGKILL would lose the turn) and one of the totals' triggers changed: both
    replaced by the store's own at the first open, the totals counted again."""
    turn(op_home, "first")
    folder = op_home / "sessions" / SID
    db = sqlite3.connect(folder / ".state" / "live.db")
    with db:
        db.execute("CREATE TRIGGER evil AFTER INSERT ON rows BEGIN DELETE FROM rows; END")
        db.execute("DROP TRIGGER totals_put")
        db.execute("CREATE TRIGGER totals_put AFTER INSERT ON nodes BEGIN SELECT 1; END")
    db.close()
    discard(folder / ".state")
    store = SessionStore(op_home)
    try:
        session = store.open(SID)
        node = make_call("function", "in flight", status=RUNNING)
        session.live.put_rows([(node.id, dumps(node.to_dict()))], DEAD_OWNER)
        assert session.live.query("SELECT count(*) FROM rows")[0][0] == 1
        session.live.drop_owners([DEAD_OWNER])
        kept = session.live.query("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
        assert {name for name, _sql in kept} == {t.split()[5] for t in TOTALS_TRIGGERS}
        assert "SELECT 1" not in " ".join(sql for _name, sql in kept)
        totals = session.totals()
    finally:
        store.close()
    assert totals["nodes"] == 3 and totals["kinds"] == {"root": 1, "turn": 1, "function": 1}
    assert_healthy(op_home)


KILLED_WHILE_CREATING = """
import os, signal, sys
import openprogram.store.session.store as store_mod
def die(*_a, **_k):
    os.kill(os.getpid(), signal.SIGKILL)
store_mod.opened = die  # after init and the first commit, before the rename
store_mod.SessionStore(sys.argv[1]).create_session(sys.argv[2])
"""


def test_a_killed_creation_leaves_nothing_in_the_way(
    op_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", KILLED_WHILE_CREATING, str(op_home), SID],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert result.returncode == -signal.SIGKILL
    debris = list((op_home / "sessions").glob(".creating-*"))
    assert len(debris) == 1
    assert main(["sessions", "list"]) == 0
    assert SID not in capsys.readouterr().out
    turn(op_home, "first")  # creating it again works, and clears the dead one's debris
    assert not list((op_home / "sessions").glob(".creating-*"))
    assert main(["sessions", "list"]) == 0
    assert SID in capsys.readouterr().out
