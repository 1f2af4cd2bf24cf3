"""The live state in SQLite (``.state/live.db``): nothing memory-mapped by the package, a
full disk or ``ulimit -f`` mid-turn ending in one ``StoreError`` line with the process
alive, a ref lock left by a writer killed while holding it taken over at once, and the
live database deleted between turns rebuilt with the same answers."""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from openprogram import session_context
from openprogram.context.nodes import COMPLETED, make_call
from openprogram.store.session.live import LiveState
from openprogram.store.session.store import SessionStore
from tests.waiting import open_files

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "openprogram" / "store"
DEAD_OWNER = f"{socket.gethostname()}:0:0"  # pid 0 is never a writer: its rows are a dead one's


def plant_dead_rows(folder: Path, bodies: Iterable[bytes]) -> None:
    """Rows a writer that died left in a session's live database (a crafted folder's too)."""
    live = LiveState(folder / ".state")
    try:
        live.put_rows(((f"planted-{i}", body) for i, body in enumerate(bodies)), DEAD_OWNER)
    finally:
        live.close()


def row_owners(folder: Path) -> list[str]:
    """The owners of the rows in a session's live database (turns in flight)."""
    db = sqlite3.connect(folder / ".state" / "live.db")
    try:
        return [owner for (owner,) in db.execute("SELECT DISTINCT owner FROM rows")]
    finally:
        db.close()


def run_child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )


def git(path: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_store_maps_no_file_into_memory() -> None:
    """No memory-mapped write path (a full disk then kills the process with SIGBUS): the
    word does not occur in the store's source."""
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search("mmap", line, re.IGNORECASE)
    ]
    assert found == []


FILL_THE_DISK = """
import resource, sys
from openprogram.context.nodes import COMPLETED, RUNNING, make_call
from openprogram.errors import StoreError
from openprogram.store.session.store import SessionStore

store = SessionStore()
session = store.create_session("full")
ids = []
for t in range(2):  # two committed turns
    turn = session.begin_turn()
    top = session.append(make_call("turn", f"done-{t}", status=COMPLETED), turn=turn,
                         advance_head=True)
    ids.append(top.id)
    session.commit(f"turn {t}")
turn = session.begin_turn()
top = session.append(make_call("turn", "in flight", status=RUNNING), turn=turn, advance_head=True)
ids.append(top.id)
print(" ".join(ids), flush=True)
# from now on no file of this process may grow past its size now (as `ulimit -f`)
wal = session.path / ".state" / "live.db-wal"
resource.setrlimit(resource.RLIMIT_FSIZE, (wal.stat().st_size + 200_000,) * 2)
errors = []
for k in range(10_000):
    call = make_call("function", f"step-{k}", caller=top.id, status=RUNNING)
    call.output = "x" * 20_000
    try:
        session.append(call, turn=turn)
    except StoreError as exc:
        errors.append(exc)
        break
try:
    session.commit("the turn in flight")
except StoreError as exc:
    errors.append(exc)
for exc in errors:
    print(f"{type(exc).__name__}: {exc}", flush=True)
print("alive", flush=True)
"""


def test_a_full_disk_mid_turn_is_one_line_and_the_next_open_recovers_the_turn(
    op_home: Path,
) -> None:
    done = run_child(FILL_THE_DISK)
    assert done.returncode == 0, done.stderr
    first, *errors, last = done.stdout.splitlines()
    assert last == "alive"  # no SIGBUS, no SIGXFSZ: the process goes on
    assert errors and all(line.startswith("StoreError: session full") for line in errors)
    done_0, done_1, in_flight = first.split()

    path = op_home / "sessions" / "full"
    session = SessionStore(op_home).open("full")  # space freed: the limit was the child's
    by_id = {n.id: n for n in session.nodes()}
    assert by_id[done_0].status == by_id[done_1].status == COMPLETED  # committed turns intact
    assert by_id[in_flight].status == "interrupted"  # the turn in flight, recovered
    steps = [n for n in by_id.values() if n.name.startswith("step-")]
    assert steps and {n.status for n in steps} == {"interrupted"}
    assert git(path, "log", "-1", "--format=%s").startswith("recovery")
    assert git(path, "fsck", "--strict", "--no-progress") == ""
    assert row_owners(path) == []


HOLD_THE_REF_LOCK = """
import os, signal
from openprogram import session_context
from openprogram.context.nodes import COMPLETED, make_call

replace = os.replace

def killed(src, dst):  # main.lock made and written, the rename never comes
    if str(dst).endswith("refs/heads/main"):
        os.kill(os.getpid(), signal.SIGKILL)
    replace(src, dst)

with session_context("locked", message="turn 0") as h:
    h.writer.append(make_call("turn", "before", status=COMPLETED), turn_level=True)
os.replace = killed
with session_context("locked", message="turn 1") as h:
    h.writer.append(make_call("turn", "killed", status=COMPLETED), turn_level=True)
"""


def test_a_ref_lock_left_by_a_killed_writer_is_taken_over_at_once(op_home: Path) -> None:
    """A writer SIGKILLed while it holds ``main.lock``: the next writer takes it over (the
    session's write lock, which every writer holds around the ref, died with it) instead
    of failing with ``RefLocked`` for the next 60 s."""
    done = run_child(HOLD_THE_REF_LOCK)
    assert done.returncode == -signal.SIGKILL, done.stderr
    path = op_home / "sessions" / "locked"
    assert (path / ".git" / "refs" / "heads" / "main.lock").exists()
    with session_context("locked", db=SessionStore(op_home), message="after") as h:
        after = h.writer.append(make_call("turn", "after", status=COMPLETED), turn_level=True)
    assert not (path / ".git" / "refs" / "heads" / "main.lock").exists()
    session = SessionStore(op_home).open("locked")
    names = [n.name for n in session.nodes()]
    assert "killed" in names and "after" in names  # the killed turn recovered, then ours
    assert session.head_id == after.id
    fsck = git(path, "fsck", "--strict", "--no-progress").splitlines()
    assert [line for line in fsck if not line.startswith("dangling commit")] == []


def answers(home: Path, sid: str) -> dict[str, object]:
    store = SessionStore(home)
    session = store.open(sid)
    found = {
        "index": session.index(),
        "head": session.head_id,
        "totals": session.totals(),
        "nodes": [(n.id, n.seq, n.turn, n.status) for n in session.nodes()],
        "light": session.light_nodes(),
        "window": session.light_window(2),
        "usage": session.usage_window(1),
        "links": session.links(),
        "children": {n["id"]: session.children(n["id"]) for n in session.index()},
        "chain": [n.id for n in session.chain(session.head_id, 10)],
    }
    store.close()
    return found


def test_the_live_database_deleted_between_turns_is_rebuilt_with_the_same_answers(
    op_home: Path,
) -> None:
    for t in range(3):
        with session_context("rebuilt", message=f"turn {t}") as h:
            top = h.writer.append(make_call("turn", f"t{t}", status=COMPLETED), turn_level=True)
            h.writer.append(make_call("function", "f", caller=top.id, status=COMPLETED))
    path = op_home / "sessions" / "rebuilt"
    before = answers(op_home, "rebuilt")
    for name in ("live.db", "live.db-wal", "live.db-shm"):
        (path / ".state" / name).unlink(missing_ok=True)
    assert answers(op_home, "rebuilt") == before
    with session_context("rebuilt", message="next") as h:
        nxt = h.writer.append(make_call("turn", "next", status=COMPLETED), turn_level=True)
    assert nxt.predecessor == before["head"]
    nodes = before["nodes"]
    assert isinstance(nodes, list)
    assert nxt.turn == 4 and nxt.seq > max(seq for _id, seq, _turn, _status in nodes)


def test_sessions_show_names_a_running_process_from_its_rows(op_home: Path) -> None:
    """``running_elsewhere`` reads the rows of a live writer (not committed yet)."""
    from openprogram.cli import running_elsewhere

    with session_context("watched", message="first") as h:
        h.writer.append(make_call("turn", "first", status=COMPLETED), turn_level=True)
    path = op_home / "sessions" / "watched"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys
                from openprogram.context.nodes import RUNNING, make_call
                from openprogram.store.session.store import SessionStore
                session = SessionStore().open("watched")
                turn = session.begin_turn()
                session.append(make_call("turn", "busy", status=RUNNING), turn=turn,
                               advance_head=True)
                print("ready", flush=True)
                sys.stdin.readline()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        lines = running_elsewhere(path)
        assert lines[0] == f"running  in process {child.pid}, not committed yet:"
        assert "turn busy · running" in lines[1]
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    assert running_elsewhere(path) == []  # it closed its turn at exit


# -- the connection a process keeps across opens (decision 0061) ----------------------------
def one_turn(session_id: str, name: str) -> None:
    store = SessionStore()
    session = (
        store.open(session_id) if store.exists(session_id) else store.create_session(session_id)
    )
    turn = session.begin_turn()
    session.append(make_call("turn", name, status=COMPLETED), turn=turn, advance_head=True)
    session.commit(name)
    store.close()


def turn_names(session_id: str) -> list[str]:
    store = SessionStore()
    try:
        session = store.open(session_id)
        return [n["name"] for n in session.index() if n["kind"] == "turn"]
    finally:
        store.close()


def test_a_session_closed_and_opened_again_sees_what_another_process_committed_meanwhile(
    op_home: Path,
) -> None:
    one_turn("shared", "mine")
    path = op_home / "sessions" / "shared"
    assert any(f.endswith("live.db") for f in open_files(path))  # kept across the close
    done = run_child(
        "from tests.test_live import one_turn\none_turn('shared', 'theirs')\nprint('ok')"
    )
    assert done.stdout.strip() == "ok", done.stderr
    assert turn_names("shared") == ["mine", "theirs"]
    one_turn("shared", "mine again")
    store = SessionStore()
    session = store.open("shared")
    chain = [n.name for n in session.chain(session.head_id, 3)]
    store.close()
    assert chain == ["mine", "theirs", "mine again"]


def test_a_deleted_session_leaves_no_file_open(op_home: Path) -> None:
    for session_id in ("open", "closed"):
        one_turn(session_id, "first")
    store = SessionStore()
    store.open("open")  # open in the store that deletes it; "closed" only kept since
    for session_id in ("open", "closed"):
        store.delete_session(session_id)
        assert open_files(op_home / "sessions" / session_id) == []
    store.close()


def test_a_session_replaced_by_another_process_is_read_from_its_new_files(
    op_home: Path,
) -> None:
    one_turn("again", "old")
    done = run_child(
        """
        from openprogram.store.session.store import SessionStore
        from tests.test_live import one_turn
        SessionStore().delete_session("again")
        one_turn("again", "new")
        print("ok")
        """
    )
    assert done.stdout.strip() == "ok", done.stderr
    assert turn_names("again") == ["new"]
    one_turn("again", "next")
    done = run_child("from tests.test_live import turn_names\nprint(turn_names('again'))")
    assert done.stdout.strip() == "['new', 'next']", done.stderr


def forked_turn(home: str, ready: Any, go: Any) -> None:
    """(In a forked child.)  A turn of two nodes in session "forked", the second recorded
    after the parent is told ``ready`` and answers ``go``."""
    os.environ["OPENPROGRAM_HOME"] = home
    store = SessionStore(home)
    session = store.open("forked")
    turn = session.begin_turn()
    top = session.append(make_call("turn", "child", status=COMPLETED), turn=turn,
                         advance_head=True)  # fmt: skip
    ready.set()
    if not go.wait(60):
        raise SystemExit(3)
    session.append(make_call("function", "step", caller=top.id, status=COMPLETED), turn=turn)
    session.commit("the child's turn")
    store.close()


def test_a_forked_child_opening_the_session_works_beside_its_parent(op_home: Path) -> None:
    """The parent's kept connection is never the child's: the parent closing it while
    the child writes (at its exit, or more sessions kept than ``live.MAX_IDLE``) loses
    nothing of the child's turn (no ``recovery`` commit for it at the next open)."""
    import multiprocessing

    from openprogram.store.session.live import discard

    one_turn("forked", "parent")
    context = multiprocessing.get_context("fork")
    ready, go = context.Event(), context.Event()
    child = context.Process(target=forked_turn, args=(str(op_home), ready, go))
    child.start()
    try:
        assert ready.wait(60)
        discard(op_home / "sessions" / "forked" / ".state")
        go.set()
    finally:
        child.join(60)
    assert child.exitcode == 0
    one_turn("forked", "parent again")
    assert turn_names("forked") == ["parent", "child", "parent again"]
    log = git(op_home / "sessions" / "forked", "log", "--format=%s").split("\n")
    assert log[:3] == ["parent again", "the child's turn", "parent"], log
    db = sqlite3.connect(op_home / "sessions" / "forked" / ".state" / "live.db")
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        db.close()


def test_sessions_show_after_the_session_was_replaced_reads_its_new_files(op_home: Path) -> None:
    """A read of the live database kept open (``sessions show`` in a long-lived process)
    follows a session deleted and made again by another process."""
    from openprogram.cli import running_elsewhere

    one_turn("renewed", "old")
    path = op_home / "sessions" / "renewed"
    assert running_elsewhere(path) == []
    code = """
        import sys
        from openprogram.context.nodes import RUNNING, make_call
        from openprogram.store.session.store import SessionStore
        from tests.test_live import one_turn
        SessionStore().delete_session("renewed")
        one_turn("renewed", "new")
        session = SessionStore().open("renewed")
        turn = session.begin_turn()
        session.append(make_call("turn", "busy", status=RUNNING), turn=turn, advance_head=True)
        print("ready", flush=True)
        sys.stdin.readline()
        """
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        lines = running_elsewhere(path)
        assert lines[:1] == [f"running  in process {child.pid}, not committed yet:"]
    finally:
        child.stdin.close()
        child.wait(timeout=60)
