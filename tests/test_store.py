"""The SessionStore on disk: bad ids, damaged files, a stale git lock, automatic packing."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

import git
import pytest

from openprogram import session_context
from openprogram.context.nodes import COMPLETED, make_call
from openprogram.errors import CorruptedFile, InvalidSessionId, SessionNotFound
from openprogram.store.session.store import CorruptedFileWarning, SessionStore


def sessions_listing(home: Path) -> list[str]:
    root = home / "sessions"
    return sorted(os.listdir(root)) if root.is_dir() else []


def add_turn(store: SessionStore, sid: str, text: str, nodes: int = 2) -> list[Any]:
    """One committed turn of ``nodes`` finished nodes; returns them."""
    with session_context(sid, db=store, message=text) as s:
        made = [s.writer.append(make_call("turn", "cell", input={"text": text}), turn_level=True)]
        for i in range(nodes - 1):
            made.append(s.writer.append(make_call("function", f"f{i}", caller=made[0].id)))
        for node in made:
            node.metadata["status"] = COMPLETED
            node.output = f"{text} done"
            s.writer.update(node)
    return made


def git_out(path: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=path, capture_output=True, text=True, check=True
    ).stdout


# -- bad session ids ---------------------------------------------------------------------------
BAD_IDS: list[Any] = [
    *("../x", "a/b", ".git", "..", "", "x" * 10_240, "a b", "-x", "a\\b", "é", "x\n"),
    *(123, b"x", ["a"]),
]


@pytest.mark.parametrize("bad", BAD_IDS, ids=lambda v: repr(v)[:20])
def test_a_bad_session_id_is_one_clear_error_and_creates_nothing(op_home: Path, bad: Any) -> None:
    before = sessions_listing(op_home)
    with pytest.raises(InvalidSessionId) as info, session_context(bad):
        pytest.fail("the body must not run")
    message = str(info.value)
    assert "\n" not in message and len(message) < 300
    assert "session id" in message
    assert sessions_listing(op_home) == before
    assert not (op_home.parent / "x").exists()  # "../x" did not escape either
    store = SessionStore(op_home)
    for action in (store.create_session, store.open, store.delete_session, store.exists):
        with pytest.raises(InvalidSessionId):
            action(bad)
    assert sessions_listing(op_home) == before


def test_opening_a_session_that_does_not_exist_says_how_to_find_one(op_home: Path) -> None:
    with pytest.raises(SessionNotFound, match="sessions list"):
        SessionStore(op_home).open("nope")
    assert sessions_listing(op_home) == []


# -- damaged files -----------------------------------------------------------------------------
def test_a_corrupted_node_file_is_named_and_the_rest_of_the_session_still_works(
    op_home: Path,
) -> None:
    store = SessionStore(op_home)
    first = add_turn(store, "damaged", "one")
    second = add_turn(store, "damaged", "two")
    store.close()
    session_path = op_home / "sessions" / "damaged"
    victim = next(session_path.glob(f"history/*/*/*-{first[1].id}.json"))
    victim.write_bytes(b"\x00\xffnot json at all")  # in place: the index cache still lists it

    fresh = SessionStore(op_home)
    session = fresh.open("damaged")
    with pytest.raises(CorruptedFile) as info:
        session.get(first[1].id)
    assert info.value.path == str(victim)
    assert str(victim) in str(info.value)
    readable = {n.id for n in session.nodes()}
    assert {first[0].id, second[0].id, second[1].id} <= readable
    assert first[1].id not in readable
    assert any(str(victim) in p for p in session.problems)

    third = add_turn(fresh, "damaged", "three")  # a new turn can still be written
    assert session.get(third[0].id).predecessor == second[0].id
    assert str(git.Repo(session_path).head.commit.message).startswith("turn 3")
    fresh.close()


def test_a_node_file_replaced_by_garbage_warns_on_open_naming_the_file(op_home: Path) -> None:
    store = SessionStore(op_home)
    made = add_turn(store, "garbled", "one")
    store.close()
    victim = next((op_home / "sessions" / "garbled").glob(f"history/*/*/*-{made[0].id}.json"))
    tmp = victim.with_name("replacement")
    tmp.write_bytes(b"{truncated")
    os.replace(tmp, victim)  # the folder changed: the index is rebuilt from the files
    with pytest.warns(CorruptedFileWarning, match=victim.name):
        session = SessionStore(op_home).open("garbled")
    assert any(victim.name in p for p in session.problems)
    assert [n.kind for n in session.nodes()] == ["root", "function"]


def test_a_corrupted_meta_json_warns_and_the_session_still_works(op_home: Path) -> None:
    store = SessionStore(op_home)
    made = add_turn(store, "badmeta", "one")
    store.close()
    meta_path = op_home / "sessions" / "badmeta" / "meta.json"
    meta_path.write_bytes(b"\x89PNG garbage")

    listed = {m["id"]: m for m in SessionStore(op_home).list_sessions()}
    assert "meta.json" in listed["badmeta"]["problem"]

    fresh = SessionStore(op_home)
    with pytest.warns(CorruptedFileWarning, match="meta.json"):
        session = fresh.open("badmeta")
    assert any(str(meta_path) in p for p in session.problems)
    assert made[0].id in {n.id for n in session.nodes()}
    later = add_turn(fresh, "badmeta", "two")
    assert later[0].predecessor == made[0].id
    meta = json.loads(meta_path.read_bytes())  # rewritten whole by the next commit
    assert meta["id"] == "badmeta" and meta["head_id"] == later[0].id
    fresh.close()


# -- a stale git lock --------------------------------------------------------------------------
def test_a_stale_index_lock_left_by_a_dead_process_does_not_wedge_the_session(
    op_home: Path,
) -> None:
    store = SessionStore(op_home)
    add_turn(store, "locked", "one")
    path = op_home / "sessions" / "locked"
    lock = path / ".git" / "index.lock"
    lock.write_bytes(b"")
    old = time.time() - 3600
    os.utime(lock, (old, old))

    made = add_turn(store, "locked", "two")  # commits do not need git's index
    assert str(git.Repo(path).head.commit.message).startswith("turn 2")
    session = store.open("locked")
    session.maintain()
    assert not lock.exists()
    assert git_out(path, "status", "--porcelain") == ""
    assert git_out(path, "fsck", "--strict", "--no-progress") == ""
    assert session.get(made[0].id).output == "two done"
    store.close()


def test_a_fresh_foreign_index_lock_is_left_alone_and_turns_still_commit(op_home: Path) -> None:
    store = SessionStore(op_home)
    add_turn(store, "busy", "one")
    path = op_home / "sessions" / "busy"
    lock = path / ".git" / "index.lock"
    lock.write_bytes(b"")  # e.g. the user running `git status` right now
    add_turn(store, "busy", "two")
    store.open("busy").maintain()
    store.close()
    assert lock.exists()
    assert "turn 2" in git_out(path, "log", "--format=%s", "-1")


def packed_counts(path: Path) -> dict[str, str]:
    """``git count-objects -v`` once a background maintenance (if any) has finished: it
    holds ``.state/maintain.lock`` while it runs; waiting on it runs nothing."""
    fd = os.open(path / ".state" / "maintain.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    finally:
        os.close(fd)
    out = git_out(path, "count-objects", "-v")
    return dict(line.split(": ", 1) for line in out.splitlines())


# -- size --------------------------------------------------------------------------------------
def test_maintenance_packs_objects_without_the_user_running_anything(op_home: Path) -> None:
    store = SessionStore(op_home)
    add_turn(store, "long", "first")
    for i in range(64):
        add_turn(store, "long", f"turn {i}", nodes=3)
    path = op_home / "sessions" / "long"
    counts = packed_counts(path)
    assert int(counts["packs"]) >= 1
    assert int(counts["in-pack"]) > int(counts["count"])  # most objects are packed
    assert len(git_out(path, "log", "--format=%s").splitlines()) == 66
    store.close()


def test_turns_written_by_short_lived_processes_still_get_packed(op_home: Path) -> None:
    """Maintenance cadence is the session's, not one process's: a fresh store per turn."""
    for i in range(60):
        store = SessionStore(op_home)
        add_turn(store, "many_procs", f"turn {i}", nodes=2)
        store.close()
    counts = packed_counts(op_home / "sessions" / "many_procs")
    assert int(counts["packs"]) >= 1


# -- create / list / delete --------------------------------------------------------------------
def test_list_shows_sessions_newest_first_and_delete_removes_one(op_home: Path) -> None:
    store = SessionStore(op_home)
    add_turn(store, "older", "a")
    time.sleep(0.01)
    add_turn(store, "newer", "b")
    assert [m["id"] for m in store.list_sessions()] == ["newer", "older"]
    store.delete_session("older")
    assert [m["id"] for m in store.list_sessions()] == ["newer"]
    assert sessions_listing(op_home) == ["newer"]
    with pytest.raises(SessionNotFound):
        store.delete_session("older")
    store.close()


def test_creating_an_existing_session_keeps_its_history(op_home: Path) -> None:
    store = SessionStore(op_home)
    made = add_turn(store, "keep", "a")
    again = store.create_session("keep")
    assert made[0].id in {n.id for n in again.nodes()}
    store.close()


def test_stray_warnings_do_not_leak_from_a_healthy_session(op_home: Path) -> None:
    store = SessionStore(op_home)
    add_turn(store, "healthy", "a")
    store.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        session = SessionStore(op_home).open("healthy")
    assert session.problems == []


# -- files someone else wrote --------------------------------------------------------------
def test_a_journal_line_with_a_path_in_its_id_writes_nothing_outside(op_home: Path) -> None:
    """A copied or synced session folder can carry a crafted journal: recovery refuses an
    id that is not a short name instead of writing ``history/…/<id>.json`` outside."""
    store = SessionStore(op_home)
    add_turn(store, "s_journal", "first")
    store.close()
    journal = op_home / "sessions" / "s_journal" / ".state" / "journal"
    journal.mkdir(parents=True, exist_ok=True)
    evil = make_call("function", "evil").to_dict()
    evil.update(id="x/../../../../../../ESCAPED", seq=99, turn=1)
    (journal / "999-dead.jsonl").write_text(json.dumps(evil) + "\n")
    session = SessionStore(op_home).open("s_journal")
    assert "x/../../../../../../ESCAPED" not in {e["id"] for e in session.index()}
    assert [p for p in op_home.rglob("ESCAPED*")] == []


def test_the_index_cache_is_data_not_code(op_home: Path) -> None:
    """The index cache is JSON: a damaged or foreign one is ignored and rebuilt."""
    store = SessionStore(op_home)
    add_turn(store, "s_cache", "first")
    store.close()
    cache = op_home / "sessions" / "s_cache" / ".state" / "index.json"
    assert cache.is_file()
    cache.write_bytes(b"\x80\x04cos\nsystem\n(S'echo PWNED'\ntR.")  # a pickle payload
    session = SessionStore(op_home).open("s_cache")
    assert [e["kind"] for e in session.index()] == ["root", "turn", "function"]


def test_a_turn_chained_after_an_old_turn_records_the_fork_atomically(op_home: Path) -> None:
    """Two copies of a notebook both chain after the turn they last saw: the first moves
    HEAD normally, the second is recorded as a branch (decided under the session lock)."""
    store = SessionStore(op_home)
    (base,) = add_turn(store, "s_fork", "base", nodes=1)
    session = store.open("s_fork")
    turn = session.begin_turn()
    copy_a = session.append(
        make_call("turn", "a", predecessor=base.id), turn=turn, advance_head=True
    )
    copy_b = session.append(
        make_call("turn", "b", predecessor=base.id), turn=turn, advance_head=True
    )
    assert "forked_from_head" not in copy_a.metadata
    assert copy_b.metadata["forked_from_head"] == copy_a.id
    assert copy_b.predecessor == base.id and session.head_id == copy_b.id
