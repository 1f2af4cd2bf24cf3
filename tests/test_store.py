"""The SessionStore on disk: bad ids, damaged files, a stale git lock, automatic packing."""

from __future__ import annotations

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
from openprogram.errors import (
    CorruptedFile,
    CorruptedFileWarning,
    InvalidSessionId,
    SessionNotFound,
)
from openprogram.store.session.history import repack
from openprogram.store.session.store import Session, SessionStore
from tests.test_live import plant_dead_rows


def repack_now(session: Session) -> None:
    """Repack the session's objects now (what runs beside a writer every
    ``history.REPACK_EVERY`` packs), waiting for it."""
    session.git.wait_for_repack(settle=False)
    repack(session.path / ".git")
    session.git.forget()


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


def commit_garbage(path: Path, node_id: str, data: bytes) -> str:
    """Commit ``data`` over the file of node ``node_id`` (a damaged history); its path."""
    from openprogram.store.session.history import Repository

    listed = git_out(path, "ls-tree", "-r", "--name-only", "HEAD", "history").split()
    rel = next(p for p in listed if p.endswith(f"-{node_id}.json"))
    repo = Repository(path)
    repo.commit({rel: data}, "damaged")
    repo.close()
    return rel


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
    victim = session_path / commit_garbage(session_path, first[1].id, b"\x00\xffnot json at all")

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
    victim = Path(commit_garbage(op_home / "sessions" / "garbled", made[0].id, b"{truncated"))
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
    repack_now(session)  # (git's index is never used: a session has no working tree)
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
    repack_now(store.open("busy"))
    store.close()
    assert lock.exists()
    assert "turn 2" in git_out(path, "log", "--format=%s", "-1")


def packed_counts(path: Path) -> dict[str, str]:
    """``git count-objects -v`` once a background maintenance (if any) has finished: it
    holds ``.state/maintain.lock`` while it runs; waiting on it runs nothing."""
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


def test_delete_right_after_turns_removes_the_folder_whole(op_home: Path) -> None:
    """Nothing a session started runs after its close (its repack is ended with it), so
    deleting it right away removes the folder whole."""
    store = SessionStore(op_home)
    for i in range(3):
        add_turn(store, "busy_delete", f"t{i}")
    path = op_home / "sessions" / "busy_delete"
    repack_now(store.open("busy_delete"))
    store.delete_session("busy_delete")
    assert not path.exists() and sessions_listing(op_home) == []
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
def test_a_dead_writers_row_with_a_path_in_its_id_writes_nothing_outside(op_home: Path) -> None:
    """A copied session folder can carry a crafted live database: recovery refuses an id
    that is not a short name instead of writing ``history/…/<id>.json`` outside."""
    store = SessionStore(op_home)
    add_turn(store, "s_journal", "first")
    store.close()
    evil = make_call("function", "evil").to_dict()
    evil.update(id="x/../../../../../../ESCAPED", seq=99, turn=1)
    plant_dead_rows(op_home / "sessions" / "s_journal", [json.dumps(evil).encode()])
    session = SessionStore(op_home).open("s_journal")
    assert "x/../../../../../../ESCAPED" not in {e["id"] for e in session.index()}
    assert [p for p in op_home.rglob("ESCAPED*")] == []


def test_the_live_database_is_data_not_code(op_home: Path) -> None:
    """The live database is SQLite: a damaged or foreign one is replaced and rebuilt."""
    store = SessionStore(op_home)
    add_turn(store, "s_cache", "first")
    store.close()
    cache = op_home / "sessions" / "s_cache" / ".state" / "live.db"
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


# -- reads are copies --------------------------------------------------------------------------
def edit_every_field(node: Any) -> None:
    """What a careless reader might do to a node it was handed."""
    node.name = "edited"
    node.output = "edited"
    node.input["text"] = "edited"
    node.metadata["status"] = "error"
    node.metadata.setdefault("usage", {})["input_tokens"] = -1


def test_a_node_a_reader_edits_stays_as_stored_in_every_read(op_home: Path) -> None:
    store = SessionStore(op_home)
    turn, fn = add_turn(store, "s_reads", "first")
    session = store.open("s_reads")
    fn_id = fn.id
    readers = [
        lambda: session.get(turn.id),
        lambda: next(n for n in session.nodes() if n.id == turn.id),
        lambda: session.get_many([turn.id])[turn.id],
        lambda: session.chain(turn.id, 1)[0],
    ]
    for read in readers:
        edit_every_field(read())
        again = session.get(turn.id)
        assert (again.name, again.output, again.input, again.status) == (
            "cell", "first done", {"text": "first"}, "completed"
        )  # fmt: skip
        assert "usage" not in again.metadata
    session.commit("nothing of the readers' edits")
    store.close()
    fresh = SessionStore(op_home).open("s_reads")  # the files say the same
    assert fresh.get(turn.id).output == "first done" and fresh.get(fn_id).name == "f0"


def test_a_node_read_while_its_call_runs_does_not_change_when_the_call_ends(
    op_home: Path,
) -> None:
    from openprogram import agentic_function
    from openprogram.agentic_programming import current_node

    seen: list[Any] = []

    @agentic_function
    def plan(topic: str) -> str:
        """Plan the topic."""
        seen.append(current_node())
        edit_every_field(seen[-1])  # the caller's copy, not the node being written
        return f"plan for {topic}"

    with session_context("s_live", message="plan") as s:
        assert plan("tea") == "plan for tea"
        (during,) = seen
        after = s.writer.get(during.id)
    assert (during.status, during.output) == ("error", "edited")  # as the reader left it
    assert (after.status, after.output, after.name) == ("completed", "plan for tea", "plan")
    assert after.input == {"topic": "tea"} and "usage" not in after.metadata


def test_a_worker_view_hands_out_copies_too() -> None:
    """What ``_store`` is on a map's worker: its reads are copies like a session's."""
    from openprogram.store.memory import MemoryRecorder

    recorder = MemoryRecorder("s_worker", 3, [], None)
    node = recorder.append(make_call("function", "f", input={"text": "x"}, status=COMPLETED))
    edit_every_field(recorder.get(node.id))
    again = recorder.get(node.id)
    assert (again.name, again.input, again.status) == ("f", {"text": "x"}, "completed")
    assert recorder.written == [node] and node.name == "f"


def test_a_batch_of_nested_nodes_gets_consecutive_seqs_and_survives_a_reopen(
    op_home: Path,
) -> None:
    """``append_many`` (what a map uses for the nodes its workers send back): the nodes get
    consecutive seqs in the given order, HEAD stays on the turn, and they are committed and
    read back like nodes appended one by one."""
    store = SessionStore(op_home)
    with session_context("s_batch", db=store, message="batch") as s:
        cell = s.writer.append(make_call("turn", "cell"), turn_level=True)
        batch = [make_call("function", f"item{i}", caller=cell.id) for i in range(5)]
        for node in batch:
            node.metadata["status"] = COMPLETED
        s.writer.append_many(batch)
        assert [n.seq for n in batch] == list(range(cell.seq + 1, cell.seq + 6))
        assert s.writer.head_id == cell.id
    store.close()
    again = SessionStore(op_home).open("s_batch")
    assert [n.name for n in again.nodes()][2:] == [f"item{i}" for i in range(5)]
    assert again.children(cell.id) == [n.id for n in batch]


# -- the one index, derived from git (cold opens) ---------------------------------------------
SEALED_SID = "s_sealed"


@pytest.fixture(scope="module")
def sealed_session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 250-turn session (three buckets of turns in its commits), built once per module."""
    home = tmp_path_factory.mktemp("sealed") / "home"
    store = SessionStore(home)
    session = store.create_session(SEALED_SID)
    for i in range(250):
        turn = session.begin_turn()
        cell = session.append(
            make_call("turn", "cell", input={"i": i}), turn=turn, advance_head=True
        )
        fn = session.append(make_call("function", f"f{i}", caller=cell.id), turn=turn)
        for node in (fn, cell):
            node.metadata["status"] = COMPLETED
            session.update(node)
        session.commit(f"turn {turn}")
    store.close()
    path = home / "sessions" / SEALED_SID
    return path


def copy_sealed(sealed_session: Path, op_home: Path) -> Path:
    target = op_home / "sessions" / SEALED_SID
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", str(sealed_session), str(target.parent)], check=True)
    return target


def open_cold(op_home: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, set[str]]:
    """Open the copied session without its live database (rebuilt from git); returns it
    and the buckets whose node files were read from git."""
    from openprogram.store.session import session as session_module

    for name in ("live.db", "live.db-wal", "live.db-shm"):
        (op_home / "sessions" / SEALED_SID / ".state" / name).unlink(missing_ok=True)
    return open_spied(op_home, monkeypatch, session_module)


def open_spied(op_home: Path, monkeypatch: pytest.MonkeyPatch, module: Any) -> tuple[Any, set[str]]:
    scanned: set[str] = set()
    derive = module.derive

    def spy(*args: Any) -> Any:
        rows, removed = derive(*args)
        scanned.update(f"{row[2] // 100:04d}" for row in rows)
        return rows, removed

    monkeypatch.setattr(module, "derive", spy)
    session = SessionStore(op_home).open(SEALED_SID)
    session.index()
    monkeypatch.setattr(module, "derive", derive)
    return session, scanned


def test_no_commit_writes_a_bucket_index_and_git_shows_no_file_deleted(
    sealed_session: Path,
) -> None:
    """The ``nodes`` table is the one index: no commit adds a bucket index, the folder
    has no working tree to show as deleted, and git is whole."""
    tree = git_out(sealed_session, "ls-tree", "-r", "--name-only", "HEAD", "history")
    assert [p for p in tree.splitlines() if p.endswith("/index.json")] == []
    assert len(tree.splitlines()) == 1 + 2 * 250
    status = subprocess.run(["git", "status"], cwd=sealed_session, capture_output=True)
    assert b"deleted" not in status.stdout + status.stderr
    assert not (sealed_session / "history").exists()


def test_no_node_is_on_disk_and_ordinary_git_still_shows_every_node(
    sealed_session: Path,
) -> None:
    """The session reads every node back from git; ``git show``/``git log -p``/``git grep
    HEAD`` give them too."""
    assert not (sealed_session / "history").exists()
    store = SessionStore(sealed_session.parent.parent)
    try:
        session = store.open(SEALED_SID)
        entries = session.index()
        nodes = session.nodes()
        assert [n.id for n in nodes] == [e["id"] for e in entries]
        assert len(nodes) == 1 + 2 * 250 and session.problems == []
        old = next(e for e in entries if e["turn"] == 5 and e["kind"] == "function")
        assert session.get(old["id"]).name == "f4"
    finally:
        store.close()
    shown = json.loads(git_out(sealed_session, "show", f"HEAD:{old['path']}"))
    assert shown["id"] == old["id"] and shown["name"] == "f4"
    assert old["id"] in git_out(sealed_session, "log", "-p", "--format=%s", "--", old["path"])
    found = git_out(sealed_session, "grep", "-l", old["id"], "HEAD", "--", "history")
    assert found.split() == [f"HEAD:{old['path']}"]
    fsck = subprocess.run(
        ["git", "fsck", "--strict", "--no-dangling"], cwd=sealed_session,
        capture_output=True, text=True,
    )  # fmt: skip
    assert fsck.returncode == 0 and fsck.stdout == "", fsck.stdout + fsck.stderr


def test_a_cold_open_rebuilds_the_index_from_git_and_matches_a_warm_open(
    sealed_session: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from openprogram.store.session import session as session_module

    copy_sealed(sealed_session, op_home)
    warm, scanned = open_spied(op_home, monkeypatch, session_module)
    assert scanned == set()  # its live database follows HEAD: nothing read from git
    expected = warm.index()
    assert len(expected) == 1 + 2 * 250
    cold, scanned = open_cold(op_home, monkeypatch)
    assert scanned == {"0000", "0001", "0002"}
    assert cold.index() == expected
    assert cold.problems == []
    later = cold.get(expected[-1]["id"])  # node content read from git on demand
    assert later.id == expected[-1]["id"]
    cold.refresh()  # nothing changed
    assert cold.index() == expected


@pytest.mark.parametrize("tamper", ["malformed JSON", "a path in an id"])
def test_a_committed_bucket_index_of_an_older_version_is_ignored(
    sealed_session: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch, tamper: str
) -> None:
    """``history/<bucket>/index.json`` (committed by earlier versions, or planted) is not a
    node: whatever it holds, the index comes from the node files."""
    from openprogram.store.session.history import Repository

    path = copy_sealed(sealed_session, op_home)
    expected = SessionStore(op_home).open(SEALED_SID).index()
    rel = "history/0000/index.json"
    data = b'{"v": 1, "tree": \x80 garbage'
    if tamper == "a path in an id":
        data = json.dumps([["../../../../etc/passwd"], [1]]).encode()
    Repository(path).commit({rel: data}, "tampered")
    cold, scanned = open_cold(op_home, monkeypatch)
    assert scanned == {"0000", "0001", "0002"}
    assert cold.index() == expected
    assert cold.problems == []


def test_a_rewritten_old_node_is_seen_by_a_cold_open(
    sealed_session: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recovery (or any commit) that rewrites a node of an old bucket: git has the new
    state, and so has every open, warm or cold."""
    path = copy_sealed(sealed_session, op_home)
    store = SessionStore(op_home)
    session = store.open(SEALED_SID)
    old = next(e for e in session.index() if e["turn"] == 5 and e["kind"] == "function")
    node = session.get(old["id"])
    node.metadata["status"] = "interrupted"
    session.update(node)
    session.commit("rewrite an old node")
    store.close()

    assert not (path / "history" / "0000").exists()  # the rewritten node went to git only
    committed = json.loads(git_out(path, "show", f"HEAD:{old['path']}"))
    assert committed["metadata"]["status"] == "interrupted"
    warm = SessionStore(op_home).open(SEALED_SID)
    assert {e["id"]: e for e in warm.index()}[old["id"]]["status"] == "interrupted"
    cold, scanned = open_cold(op_home, monkeypatch)
    assert "0000" in scanned
    assert {e["id"]: e for e in cold.index()}[old["id"]]["status"] == "interrupted"
    assert cold.get(old["id"]).status == "interrupted"
    assert git_out(path, "fsck", "--strict", "--no-progress") == ""


def test_a_file_planted_on_disk_where_a_node_was_is_never_read(
    sealed_session: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """There is no working tree: a node file on disk (an older version's checkout, or
    planted) is not the node; git's is read, and nothing complains."""
    path = copy_sealed(sealed_session, op_home)
    expected = SessionStore(op_home).open(SEALED_SID).index()
    victim_entry = next(e for e in expected if e["turn"] == 7)
    victim = path / victim_entry["path"]
    victim.parent.mkdir(parents=True)
    victim.write_bytes(b"\x00\xffnot json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cold, _scanned = open_cold(op_home, monkeypatch)
    assert cold.index() == expected
    assert cold.get(victim_entry["id"]).id == victim_entry["id"]
    assert len(cold.nodes()) == len(expected)
    assert cold.problems == []


def test_a_git_clone_of_a_session_opens_with_its_full_index(
    sealed_session: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = SessionStore(sealed_session.parent.parent).open(SEALED_SID).index()
    (op_home / "sessions").mkdir(parents=True)
    target = op_home / "sessions" / SEALED_SID
    subprocess.run(
        ["git", "clone", "-q", str(sealed_session), str(target)], check=True, capture_output=True
    )
    assert not (target / ".state").exists()
    # a clone is complete: git checks every node file out (the store reads git's)
    node_files = [p for p in (target / "history").rglob("*.json") if p.name != "index.json"]
    assert len(node_files) == len(expected)
    cold, scanned = open_cold(op_home, monkeypatch)
    assert scanned == {"0000", "0001", "0002"}
    assert cold.index() == expected
    assert cold.head_id == expected[-2]["id"]  # rebuilt counters: HEAD from meta.json
    turn = cold.begin_turn()
    assert turn == 251
    cold.append(make_call("turn", "next"), turn=turn, advance_head=True)
    cold.commit("turn 251")
    assert len(cold.index()) == len(expected) + 1


def test_after_a_cold_open_refresh_sees_another_writer_rewrite_an_old_bucket(
    sealed_session: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_sealed(sealed_session, op_home)
    cold, _scanned = open_cold(op_home, monkeypatch)
    for turn in (150, 50):
        old = next(e for e in cold.index() if e["turn"] == turn and e["kind"] == "function")
        other_store = SessionStore(op_home)  # another view, as another process would have
        other = other_store.open(SEALED_SID)
        assert other is not cold
        node = other.get(old["id"])
        node.metadata["status"] = "interrupted"
        other.update(node)
        other.commit("rewrite an old node")
        other_store.close()
        cold.refresh()
        assert {e["id"]: e for e in cold.index()}[old["id"]]["status"] == "interrupted"
        assert cold.get(old["id"]).status == "interrupted"
        warm = SessionStore(op_home).open(SEALED_SID)
        assert {e["id"]: e for e in warm.index()}[old["id"]]["status"] == "interrupted"


def test_the_whole_tree_is_laid_out_from_the_index_reading_only_the_rows_it_prints(
    sealed_session: Path, op_home: Path
) -> None:
    """``openprogram sessions show`` of a long session: the layout comes from the index,
    node content only for printed rows, and nothing complains."""
    from openprogram.cli import whole_tree

    copy_sealed(sealed_session, op_home)
    session = SessionStore(op_home).open(SEALED_SID)
    read: list[str] = []
    blob_at = session.git.blob_at
    session.git.blob_at = lambda rel, *a: read.append(rel) or blob_at(rel, *a)  # type: ignore[method-assign]
    text = whole_tree(session, last_turns=3, max_lines=20)
    assert text.startswith(f"session DAG: {1 + 2 * 250} nodes")
    assert "← HEAD" in text
    assert session.problems == []
    assert len(read) <= 20


def test_another_writers_turn_is_seen_without_reading_git(
    sealed_session: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second process appending to the session: the next turn here sees its turn from
    the shared ``nodes`` rows — nothing is read from git to see it."""
    from openprogram.store.session import session as session_module

    copy_sealed(sealed_session, op_home)
    mine = SessionStore(op_home).open(SEALED_SID)
    other_store = SessionStore(op_home)  # another view, as another process would have
    other = other_store.open(SEALED_SID)
    assert other is not mine
    turn = other.begin_turn()
    theirs = other.append(make_call("turn", "theirs"), turn=turn, advance_head=True)
    other.commit("their turn")
    other_store.close()

    derived: list[Any] = []
    monkeypatch.setattr(session_module, "derive", lambda *a: derived.append(a) or ([], []))
    mine.sync()
    assert derived == []
    assert mine.head_id == theirs.id and mine.get(theirs.id).name == "theirs"
