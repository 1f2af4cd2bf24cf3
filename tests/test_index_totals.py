"""The totals the live database keeps (``index.keep_totals``, issue 36 item 5): whatever
order the rows come in and however they change — a call put before its caller, a caller
renamed or removed, a call's usage or kind changed, rows following a commit — the totals
are the ones counted again from the rows, and those a scan of every node gives; a
database made without them is counted when opened; reading them costs the same in a
session ten times larger."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from openprogram.context.nodes import COMPLETED, make_call
from openprogram.errors import StoreError
from openprogram.store.session.index import RECOUNT, TOTALS_TRIGGERS, Row, noting_ctrl_c
from openprogram.store.session.live import LiveState, discard
from openprogram.store.session.store import SessionStore
from openprogram.store.session.sync import export_bundle, import_bundle
from openprogram.usage.totals import usage_rows
from tests.test_index_views import complete_turn

TABLES = ("counts", "usage", "llm_turns")


def kept(db: sqlite3.Connection) -> dict[str, Any]:
    """The totals tables, the cost partials as the float they add up to."""
    out: dict[str, Any] = {}
    for table in TABLES:
        rows = sorted(db.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
        if table == "usage":
            rows = [(*r[:5], sum_parts(r[5])) for r in rows]
        out[table] = rows
    return out


def sum_parts(blob: bytes | None) -> float:
    import math
    from array import array

    return math.fsum(array("d", blob or b""))


def recounted(db: sqlite3.Connection) -> dict[str, Any]:
    """The totals counted again from the rows (and put back as they were kept)."""
    before = kept(db)
    db.execute("SAVEPOINT again")
    for statement in RECOUNT:
        db.execute(statement)
    found = kept(db)
    db.execute("ROLLBACK TO again")
    db.execute("RELEASE again")
    assert kept(db) == before
    return found


def row(node_id: str, turn: int, kind: str, name: str, caller: str | None, **used: Any) -> Row:
    cost = used.get("cost")
    return (
        node_id, turn * 10, turn, "call", name, kind, used.get("status", "running"), caller,
        None, 0.0, used.get("tokens_in"), used.get("tokens_out", 0), cost, None,
    )  # fmt: skip


def test_the_kept_totals_are_the_recounted_ones_through_every_change(tmp_path: Path) -> None:
    rng = random.Random(36)
    live = LiveState(tmp_path, "t")
    db = live._db
    names = ("plan", "search", "(top level)", "write")
    ids = [f"n{i}" for i in range(40)]
    for step in range(400):
        node_id = rng.choice(ids)
        caller = rng.choice([*ids[:12], None, "gone"])
        kind = rng.choice(["llm", "llm", "function", "turn"])
        used = {
            "tokens_in": rng.choice([None, rng.randrange(900)]),
            "tokens_out": rng.randrange(50),
            "cost": rng.choice([None, 0.1, 3.0, 1e-9, rng.uniform(0, 0.01)]),
            "status": rng.choice(["running", COMPLETED]),
        }
        new = row(node_id, step // 10, kind, rng.choice(names), caller, **used)
        action = rng.random()
        if action < 0.6:  # a node in flight put, or its new state (a rename, a new kind)
            live.put_index([new])
        elif action < 0.8:  # rows following a commit, some removed
            gone = rng.sample(ids, 3)
            live.follow(f"c{step}", [new], gone)
        else:  # a caller's row removed before or after its callees'
            live.follow(f"c{step}", [], [node_id])
        if step % 50 == 49:
            assert kept(db) == recounted(db), step
    assert kept(db) == recounted(db)
    calls = db.execute("SELECT count(*) FROM nodes WHERE kind = 'llm'").fetchone()[0]
    assert calls and sum(r[1] for r in kept(db)["usage"]) == calls
    live.close()


def test_a_call_put_before_its_caller_counts_under_the_callers_name(tmp_path: Path) -> None:
    live = LiveState(tmp_path, "t")
    live.put_index([row("l1", 1, "llm", "m", "f1", tokens_in=5, cost=0.5)])
    assert kept(live._db)["usage"] == [("(top level)", 1, 5, 0, 0, 0.5)]
    live.put_index([row("f1", 1, "function", "plan", None)])
    assert kept(live._db)["usage"] == [("plan", 1, 5, 0, 0, 0.5)]
    live.put_index([row("f1", 1, "function", "write", None)])  # renamed
    assert kept(live._db)["usage"] == [("write", 1, 5, 0, 0, 0.5)]
    live.follow("c", [], ["f1"])  # the caller removed
    assert kept(live._db)["usage"] == [("(top level)", 1, 5, 0, 0, 0.5)]
    live.follow("c2", [], ["l1"])
    assert kept(live._db) == {"counts": [], "usage": [], "llm_turns": []}
    live.close()


def build(home: Path, sid: str, turns: int) -> SessionStore:
    """A session of ``turns`` turns: functions, top-level calls, calls without a price."""
    store = SessionStore(home)
    session = store.create_session(sid)
    rng = random.Random(turns)
    for i in range(turns):
        turn = session.begin_turn()
        cell = session.append(make_call("turn", f"cell {i}"), turn=turn, advance_head=True)
        fn = session.append(make_call("function", f"f{i % 3}", caller=cell.id), turn=turn)
        for caller in (fn.id, None) if i % 4 == 0 else (fn.id,):
            llm = make_call("llm", "test", caller=caller, status=COMPLETED)
            llm.metadata["usage"] = {"input_tokens": rng.randrange(900), "output_tokens": i}
            if i % 5:
                llm.metadata["cost"] = rng.uniform(0, 0.01)
            session.append(llm, turn=turn)
        complete_turn(session, turn, fn, cell)
    return store


def scanned(session: Any) -> tuple[Any, ...]:
    """What a scan of every node gives (``usage.totals.usage_rows``)."""
    report = usage_rows(session.nodes())
    return (
        report.session.calls,
        report.session.cost,
        {name: (t.calls, t.input_tokens, t.output_tokens) for name, t in report.functions.items()},
    )


def from_totals(totals: dict[str, Any]) -> tuple[Any, ...]:
    return (
        totals["calls"],
        totals["cost"],
        {name: tuple(used[:3]) for name, used in totals["functions"].items()},
    )


def test_a_database_made_without_the_totals_counts_them_when_opened(op_home: Path) -> None:
    store = build(op_home, "old", 12)
    session = store.open("old")
    before = session.totals()
    assert from_totals(before) == scanned(session)
    store.close()
    db = sqlite3.connect(op_home / "sessions" / "old" / ".state" / "live.db")
    for statement in TOTALS_TRIGGERS:
        db.execute(f"DROP TRIGGER {statement.split()[5]}")
    for table in TABLES:
        db.execute(f"DROP TABLE {table}")
    db.commit()
    db.close()
    discard(op_home / "sessions" / "old" / ".state")  # opened as a new process opens it
    store = SessionStore(op_home)
    assert store.open("old").totals() == before
    store.close()


@pytest.mark.parametrize("turns", [8])
def test_reading_the_totals_costs_the_same_in_a_session_ten_times_larger(
    op_home: Path, turns: int
) -> None:
    steps = []
    for size in (turns, turns * 10):
        store = build(op_home, f"s{size}", size)
        session = store.open(f"s{size}")
        assert from_totals(session.totals()) == scanned(session)
        count = [0]

        def tick(count: list[int] = count) -> int:
            count[0] += 1
            return 0

        session.live._db.set_progress_handler(tick, 100)  # every 100 SQLite VM steps
        session.totals()
        session.live._db.set_progress_handler(None, 0)
        steps.append(count[0])
        store.close()
    assert steps[1] <= steps[0] + 2, steps


def test_writing_a_turn_costs_the_same_in_a_session_ten_times_larger(op_home: Path) -> None:
    """The triggers that keep the totals find a new node's callees by the caller index:
    a write that read every llm row of the session took 25-50 ms a node at 20,000 turns
    and grew with every turn (issue 36: a long writer's last turns as fast as its first)."""
    steps = []
    for size in (8, 80):
        store = build(op_home, f"w{size}", size)
        session = store.open(f"w{size}")
        count = [0]

        def tick(count: list[int] = count) -> int:
            count[0] += 1
            return 0

        session.live._db.set_progress_handler(tick, 10)  # every 10 SQLite VM steps
        turn = session.begin_turn()
        cell = session.append(make_call("turn", "one more"), turn=turn, advance_head=True)
        fn = session.append(make_call("function", "f0", caller=cell.id), turn=turn)
        session.append(make_call("llm", "test", caller=fn.id, status=COMPLETED), turn=turn)
        complete_turn(session, turn, fn, cell)
        session.live._db.set_progress_handler(None, 0)
        steps.append(count[0])
        store.close()
    assert steps[1] <= steps[0] * 1.2 + 5, steps


def test_a_database_with_the_first_triggers_gets_the_new_ones_and_the_same_totals(
    op_home: Path,
) -> None:
    """A ``live.db`` made by the version whose triggers read every llm row: opened, its
    triggers are made again (``PRAGMA user_version``) and its totals are the same."""
    store = build(op_home, "v1", 12)
    before = store.open("v1").totals()
    store.close()
    db = sqlite3.connect(op_home / "sessions" / "v1" / ".state" / "live.db")
    old = [t.replace("+kind", "kind") for t in TOTALS_TRIGGERS]
    for statement in (*(f"DROP TRIGGER {t.split()[5]}" for t in old), *old):
        db.execute(statement)
    db.execute("PRAGMA user_version = 0")
    db.commit()
    db.close()
    discard(op_home / "sessions" / "v1" / ".state")  # opened as a new process opens it
    store = SessionStore(op_home)
    session = store.open("v1")
    assert session.totals() == before
    made = session.live.query("SELECT sql FROM sqlite_master WHERE name = 'totals_put_caller'")
    assert "+kind" in made[0][0]
    store.close()


def views(session: Any) -> tuple[Any, ...]:
    return session.totals(), session.light_window(5), session.usage_window(3), session.index()


def test_an_import_and_a_deleted_live_db_give_the_same_totals_and_windows(
    op_home: Path, tmp_path: Path
) -> None:
    store = build(op_home, "orig", 30)
    session = store.open("orig")
    before = views(session)
    assert from_totals(before[0]) == scanned(session)
    store.close()
    clone_home = tmp_path / "elsewhere"
    bundle = export_bundle(SessionStore(op_home), "orig", tmp_path / "orig.bundle")
    import_bundle(SessionStore(clone_home), bundle)
    clone = SessionStore(clone_home)
    assert views(clone.open("orig")) == before
    clone.close()
    for name in ("live.db", "live.db-wal", "live.db-shm"):
        (op_home / "sessions" / "orig" / ".state" / name).unlink(missing_ok=True)
    store = SessionStore(op_home)
    assert views(store.open("orig")) == before
    store.close()


def test_a_ctrl_c_in_a_totals_function_is_a_keyboard_interrupt_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """SQLite turns an exception in a trigger's Python function into "user-defined function
    raised exception"; a Ctrl-C that lands there stays a Ctrl-C (the process stops as for
    any other), and the row it was writing is not half kept."""
    live = LiveState(tmp_path, "t")

    def interrupted(cost: float | None, sign: int) -> bytes:
        raise KeyboardInterrupt  # where a Ctrl-C's handler runs when it lands mid-statement

    live._db.create_function("parts_of", 2, noting_ctrl_c(interrupted))  # as registered
    with pytest.raises(KeyboardInterrupt):
        live.put_index([row("l1", 1, "llm", "m", None, tokens_in=5, cost=0.5)])
    assert live.query("SELECT count(*) FROM nodes") == [(0,)]
    assert kept(live._db) == {"counts": [], "usage": [], "llm_turns": []}
    live.close(keep=False)  # (not kept for the next open: its function was replaced)
    live = LiveState(tmp_path, "t")  # the functions registered again: the next write counts
    live.put_index([row("l1", 1, "llm", "m", None, tokens_in=5, cost=0.5)])
    assert kept(live._db)["usage"] == [("(top level)", 1, 5, 0, 0, 0.5)]
    live.close()


def test_a_damaged_totals_row_is_no_ctrl_c_and_the_next_write_lands(tmp_path: Path) -> None:
    """A ``usage`` row whose cost partials are not a blob (a damaged ``live.db``): the
    trigger's function reads no partials from it (it never raises: an exception there would
    be taken for a Ctrl-C) and the next node's write and its totals land."""
    live = LiveState(tmp_path, "t")
    live.put_index([row("l1", 1, "llm", "m", None, tokens_in=5, cost=0.5)])
    other = sqlite3.connect(tmp_path / "live.db")
    other.execute("UPDATE usage SET parts = 'not partials'")
    other.commit()
    other.close()
    live.put_index([row("l2", 2, "llm", "m", None, tokens_in=7, cost=0.25)])
    assert live.query("SELECT count(*) FROM nodes") == [(2,)]
    assert kept(live._db)["usage"] == [("(top level)", 2, 12, 0, 0, 0.25)]
    live.close(keep=False)


def test_an_error_in_a_totals_function_is_a_store_error_not_a_ctrl_c(tmp_path: Path) -> None:
    """Only a Ctrl-C that landed in a trigger's function is a KeyboardInterrupt: any other
    failure there (a damaged database, a bug) is a one-line error naming the live state, the
    row is not half kept, and the next write (the function whole again) lands."""
    live = LiveState(tmp_path, "t")

    def broken(cost: float | None, sign: int) -> bytes:
        raise ValueError("not partials")

    live._db.create_function("parts_of", 2, noting_ctrl_c(broken))
    with pytest.raises(StoreError, match="live state"):
        live.put_index([row("l1", 1, "llm", "m", None, tokens_in=5, cost=0.5)])
    assert live.query("SELECT count(*) FROM nodes") == [(0,)]
    live.close(keep=False)
    live = LiveState(tmp_path, "t")
    live.put_index([row("l1", 1, "llm", "m", None, tokens_in=5, cost=0.5)])
    assert kept(live._db)["usage"] == [("(top level)", 1, 5, 0, 0, 0.5)]
    live.close()
