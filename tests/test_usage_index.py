"""``sessions usage`` from the totals the index keeps (issue 23 item 4): by function and for
the session exactly what a scan of every node gives, the newest turns by turn and a line
saying how many older ones are left out; ``--turns all`` lists each."""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import pytest

from openprogram.context.nodes import COMPLETED, make_call
from openprogram.store.session.store import SessionStore
from tests.test_index_views import complete_turn

SID = "s_mixed"
TURNS = 130  # buckets 0000 (turns 1-99) and 0001
FUNCTIONS = ("plan", "search", "write")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Several functions, costs that do not add up the same in every order, calls without a
    price or without usage, a call at top level, and one made in turn 120 by a function of
    turn 5 (its caller in another bucket, as a background run's)."""
    home = tmp_path_factory.mktemp("mixed") / "home"
    store = SessionStore(home)
    session = store.create_session(SID)
    rng = random.Random(23)
    early_fn = ""
    for i in range(TURNS):
        turn = session.begin_turn()
        cell = session.append(make_call("turn", f"cell {i}"), turn=turn, advance_head=True)
        fn = session.append(make_call("function", FUNCTIONS[i % 3], caller=cell.id), turn=turn)
        if i == 5:
            early_fn = fn.id
        callers = [fn.id] + ([early_fn] if i == 120 else []) + ([None] if i % 17 == 0 else [])
        if i % 13 == 4:  # a turn without a call
            callers = []
        for caller in callers:
            llm = make_call("llm", "test", caller=caller, status=COMPLETED)
            if i % 11 != 3:  # else: no usage recorded at all
                llm.metadata["usage"] = {"input_tokens": rng.randrange(900), "output_tokens": i}
            if i % 7 != 2:  # else: no price
                llm.metadata["cost"] = rng.choice([rng.uniform(0, 0.01), 0.1, 3.0, 1e-9])
            session.append(llm, turn=turn)
        complete_turn(session, turn, fn, cell)
    store.close()
    return home


@pytest.fixture
def home(built: Path, op_home: Path) -> Path:
    target = op_home / "sessions"
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", str(built / "sessions" / SID), str(target)], check=True)
    return op_home


def _usage(capsys: pytest.CaptureFixture[str], *flags: str) -> list[str]:
    from openprogram.cli import main

    assert main(["sessions", "usage", SID, *flags]) == 0
    return capsys.readouterr().out.rstrip("\n").splitlines()


def test_the_kept_totals_equal_a_scan_of_every_node(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from openprogram.usage.totals import usage_rows, usage_table

    nodes = SessionStore(home).open(SID).nodes()
    table = usage_table(nodes).splitlines()
    (session,) = [line for line in table if line.startswith("session ")]
    assert "  (top level)" in "\n".join(table) and "+" in session  # some unpriced calls
    assert _usage(capsys, "--turns", "all") == table  # each entry of the index
    assert _usage(capsys, "--turns", "1000") == table  # the kept totals, every turn listed
    totals = SessionStore(home).open(SID).totals()
    scanned = usage_rows(nodes)
    assert totals["cost"] == scanned.session.cost  # the same float, not just when printed
    assert totals["calls"] == scanned.session.calls == sum(1 for n in nodes if n.kind == "llm")
    state = home / "sessions" / SID / ".state"
    assert (state / "live.db").is_file()  # the totals are SQL over the index
    assert _usage(capsys, "--turns", "1000") == table
    for name in ("live.db", "live.db-wal", "live.db-shm"):  # rebuilt from git: the same table
        (state / name).unlink(missing_ok=True)
    assert _usage(capsys, "--turns", "1000") == table


def test_the_newest_turns_are_listed_and_the_older_ones_counted(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    every = _usage(capsys, "--turns", "all")
    newest = _usage(capsys)
    rows = [line for line in every if line.startswith("  turn ")]
    assert [line for line in newest if line.startswith("  turn ")] == rows[-50:]
    assert f"  … {len(rows) - 50} older turns not shown (--turns all)" in newest
    assert [x for x in newest if not x.startswith("  turn ") and "…" not in x] == [
        x for x in every if not x.startswith("  turn ")
    ]  # by function and the session: the same
    three = _usage(capsys, "--turns", "3")
    assert [line for line in three if line.startswith("  turn ")] == rows[-3:]
    assert re.search(rf"… {len(rows) - 3} older turns", "\n".join(three))


@pytest.mark.parametrize("bad", ["0", "-2", "some", ""])
def test_a_bad_turns_flag_is_one_line(
    home: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    from openprogram.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["sessions", "usage", SID, "--turns", bad])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --turns: a number of turns or 'all', not {bad!r}" in err
