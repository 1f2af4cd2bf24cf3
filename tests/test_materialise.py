"""A new turn's node files come to disk whole, after its commit (issue 23 item 2).

A commit writes the turn to git only (one pack); the closing session's maintenance puts its
folder on disk, staged and renamed in under the session lock, never a file at a time; a
folder whose tree HEAD no longer has is left in git.  ``git status`` is clean throughout.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from openprogram.context.nodes import COMPLETED, make_call
from openprogram.store.session import maintenance
from openprogram.store.session.history import REPACK_EVERY
from openprogram.store.session.index import TURNS_PER_BUCKET
from openprogram.store.session.indexcache import CACHE_DIR
from openprogram.store.session.materialise import materialise
from openprogram.store.session.safegit import run_git
from openprogram.store.session.store import SessionStore


def git(path: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=path, capture_output=True, text=True, check=True
    ).stdout


def add_turn(store: SessionStore, sid: str, name: str) -> None:
    session = store.open(sid)
    turn = session.begin_turn()
    top = session.append(make_call("turn", name, status=COMPLETED), turn=turn, advance_head=True)
    session.append(make_call("function", "f", caller=top.id, status=COMPLETED), turn=turn)
    session.commit(f"turn {turn}")


def test_a_turn_reaches_the_disk_whole_after_its_commit(op_home: Path) -> None:
    store = SessionStore(op_home)
    store.create_session("m")
    add_turn(store, "m", "one")
    path = op_home / "sessions" / "m"
    assert not (path / "history" / "0000" / "000001").exists()  # in git only, for now
    assert git(path, "ls-tree", "--name-only", "HEAD:history/0000/000001").count(".json") == 2
    store.close()
    maintenance.wait_for(path)
    folder = path / "history" / "0000" / "000001"
    names = sorted(os.listdir(folder))
    assert len(names) == 2
    for name in names:
        shown = git(path, "show", f"HEAD:history/0000/000001/{name}")
        assert (folder / name).read_text() == shown
    assert git(path, "status", "--porcelain") == ""
    assert git(path, "fsck", "--strict", "--no-progress") == ""
    assert not any(n.startswith("materialise-") for n in os.listdir(path / ".state"))


def test_a_folder_whose_tree_moved_since_is_left_in_git(op_home: Path) -> None:
    store = SessionStore(op_home)
    store.create_session("moved")
    add_turn(store, "moved", "one")
    path = op_home / "sessions" / "moved"
    old = bytes.fromhex(git(path, "rev-parse", "HEAD").strip())
    session = store.open("moved")
    node = next(n for n in session.nodes() if n.name == "one")
    node.output = "changed"
    session.update(node)
    session.commit("the turn's node rewritten")  # the folder's tree moves

    def run(args: list[str], data: bytes | None) -> bytes:
        return run_git(path, *args, input=data).stdout

    assert materialise(str(path), run, old.hex(), ["history/0000/000001"]) == []
    assert not (path / "history" / "0000" / "000001").exists()
    head = git(path, "rev-parse", "HEAD").strip()
    assert materialise(str(path), run, head, ["history/0000/000001"]) == ["history/0000/000001"]
    assert session.get(node.id).output == "changed"
    assert b"changed" in b"".join(p.read_bytes() for p in (path / "history/0000/000001").iterdir())
    store.close()


def test_a_busy_writer_asks_for_maintenance_only_after_the_last_ones_spacing(
    op_home: Path,
) -> None:
    """A maintenance costs O(the session): a writer asks for the next one (past the count,
    or opening a bucket) only once ``SPACING`` times the last one's duration has passed (it
    writes when), so a writer that commits faster than maintenances run does not keep one
    running back to back — and its packs stay few meanwhile: git repacks them beside it."""
    store = SessionStore(op_home)
    store.create_session("busy")
    path = op_home / "sessions" / "busy"
    spacing = path / ".state" / maintenance.NEXT_FILE
    spacing.write_text(f"{time.time() + 3600:.3f}")  # as if the last one had taken 400 s
    turns = TURNS_PER_BUCKET + 10  # past the count, and into a second bucket
    for i in range(turns):
        add_turn(store, "busy", f"busy {i}")
    maintenance.wait_for(path)
    on_disk = [n for n in os.listdir(path / "history" / "0000") if n.isdigit() and int(n) > 0]
    assert on_disk == []  # no maintenance was asked for: every turn is in git only
    assert not (path / "history" / "0001").exists()
    assert "index.json" not in git(path, "ls-tree", "--name-only", "HEAD:history/0000")
    store.open("busy").git.wait_for_repack()  # (git's repack runs beside the writer)
    packs = [n for n in os.listdir(path / ".git" / "objects" / "pack") if n.endswith(".pack")]
    assert len(packs) <= 2 * REPACK_EVERY  # not one a commit: git repacked them beside it
    newest = path / "history" / "0001" / f"{turns:06d}"

    spacing.write_text("0")  # its time has passed; a new process reads it
    started = time.time()
    later = SessionStore(op_home)
    add_turn(later, "busy", "later")  # the count is past due: this commit asks for one
    maintenance.wait_for(path)
    assert newest.is_dir()  # the maintenance put the newest turns on disk
    assert maintenance.next_due(path) >= started  # and said when the next may be asked
    assert git(path, "status", "--porcelain") == ""
    later.close()
    store.close()


def test_a_reader_sees_a_checked_out_turn_as_its_commit_unless_a_file_there_differs(
    op_home: Path,
) -> None:
    """A turn a reader read from git alone, since checked out by a maintenance: the reader
    still has what it read, and a file there that is not the commit's (an uncommitted
    write) is what it sees after the next refresh."""
    writer = SessionStore(op_home)
    writer.create_session("seen")
    add_turn(writer, "seen", "one")
    add_turn(writer, "seen", "two")
    path = op_home / "sessions" / "seen"
    reader = SessionStore(op_home).open("seen")  # both turns read from git: not on disk yet
    before = len(reader.index())
    names = {e["name"]: e for e in reader.index()}
    assert names["one"]["status"] == "completed" and names["two"]["status"] == "completed"
    writer.close()
    maintenance.wait_for(path)
    assert (path / "history" / "0000" / "000001").is_dir()  # checked out since
    two = path / "history" / "0000" / "000002"
    node_file = next(p for p in two.iterdir() if '"two"' in p.read_text())
    node_file.write_text(node_file.read_text().replace('"completed"', '"failed"', 1))
    add_turn(SessionStore(op_home), "seen", "three")  # the bucket's tree moves: a refresh
    reader.refresh()
    now = {e["name"]: e for e in reader.index()}
    assert now["one"]["status"] == "completed" and now["three"]["status"] == "completed"
    assert now["two"]["status"] == "failed"  # the file on disk, not the commit's copy
    assert len(reader.index()) == before + 2


def test_a_writer_that_stays_open_saves_few_caches_and_a_cold_reader_still_sees_every_turn(
    op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn that starts a maintenance saves the local index cache of the newest two
    buckets only (~20 ms a long writer's turn spent saving every bucket it wrote since the
    last one; the older ones are sealed by the maintenances, or saved at close): while the
    writer stays open, a cold reader finds every turn all the same."""
    store = SessionStore(op_home)
    store.create_session("long")
    path = op_home / "sessions" / "long"
    cache = path / ".state" / CACHE_DIR
    started: list[Path] = []
    monkeypatch.setattr(maintenance, "spawn", lambda root, **_kw: started.append(root) or False)
    turns = 4 * TURNS_PER_BUCKET + 5
    for i in range(turns):  # no maintenance starts: every bucket stays unsaved
        add_turn(store, "long", f"t{i}")
    assert started and not cache.exists()
    # the next one that is asked for starts (as if detached; none runs, so nothing is sealed)
    monkeypatch.setattr(maintenance, "spawn", lambda root, **_kw: started.append(root) or True)
    store.open("long")._bucket_opened = True  # its commit asks for one
    add_turn(store, "long", "the turn that starts a maintenance")
    assert sorted(p.stem for p in cache.glob("*.json")) == ["0003", "0004"]
    cold = SessionStore(op_home).open("long")
    names = [n.name for n in cold.nodes() if n.metadata.get("kind") == "turn"]
    assert names == [f"t{i}" for i in range(turns)] + ["the turn that starts a maintenance"]
    store.close()  # the others at close
    assert sorted(p.stem for p in cache.glob("*.json")) == ["0000", "0001", "0002", "0003", "0004"]
