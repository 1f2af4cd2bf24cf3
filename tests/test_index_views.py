"""Views of a long session from its index (issue 23 items 3-4): ``sessions show`` lists the
newest rows and the whole session's counts, reading no node file it does not print;
``sessions usage`` and a session budget's first check read the totals the index keeps."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openprogram.context.nodes import COMPLETED, make_call
from openprogram.store.session import queries
from openprogram.store.session.history import Repository
from openprogram.store.session.index import usage_of
from openprogram.store.session.store import SessionStore

SID = "s_long"
TURNS = 250  # buckets 0000, 0001 and 0002 (turns 200-249)
NODE_FILE = re.compile(r"/history/[0-9]{4,}/[0-9]{6,}/")


def complete_turn(session: Any, turn: int, *nodes: Any) -> None:
    """Mark ``nodes`` (a turn's function and cell) completed and commit the turn."""
    for node in nodes:
        node.metadata["status"] = COMPLETED
        session.update(node)
    session.commit(f"turn {turn}")


@pytest.fixture(scope="module")
def long_session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 250-turn session: a cell, a function and an llm call (100 + 20 tokens, $0.001)."""
    home = tmp_path_factory.mktemp("long") / "home"
    store = SessionStore(home)
    session = store.create_session(SID)
    for i in range(TURNS):
        turn = session.begin_turn()
        cell = session.append(make_call("turn", f"cell {i}"), turn=turn, advance_head=True)
        fn = session.append(make_call("function", f"f{i}", caller=cell.id), turn=turn)
        llm = make_call("llm", "test", caller=fn.id, status=COMPLETED)
        llm.metadata.update(usage={"input_tokens": 100, "output_tokens": 20}, cost=0.001)
        llm.output = f"reply {i}"
        session.append(llm, turn=turn)
        complete_turn(session, turn, fn, cell)
    store.close()
    return home / "sessions" / SID


@pytest.fixture
def session_home(long_session: Path, op_home: Path) -> Path:
    target = op_home / "sessions" / SID
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", str(long_session), str(target.parent)], check=True)
    return op_home


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The node files this process reads from here on: opened on disk (every ``os.open``
    is seen) or read from git (``/<path>``)."""
    paths: list[str] = []
    real = os.open
    blob_at, read_paths = Repository.blob_at, queries.read_paths

    def spy(path: Any, *args: Any, **kwargs: Any) -> int:
        if NODE_FILE.search(os.fsdecode(path)):
            paths.append(os.fsdecode(path))
        return real(path, *args, **kwargs)

    def spy_blob(self: Repository, rel: str, *args: Any) -> bytes:
        paths.append(f"/{rel}")
        return blob_at(self, rel, *args)

    def spy_paths(repo: Repository, rels: list[str]) -> dict[str, bytes]:
        paths.extend(f"/{rel}" for rel in rels)
        return read_paths(repo, rels)

    monkeypatch.setattr(os, "open", spy)
    monkeypatch.setattr(Repository, "blob_at", spy_blob)
    monkeypatch.setattr(queries, "read_paths", spy_paths)
    yield paths


def test_show_lists_the_newest_rows_and_counts_every_node(
    session_home: Path, opened: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from openprogram.cli import main

    assert main(["sessions", "show", SID, "--last", "3"]) == 0
    out = capsys.readouterr().out
    nodes = 1 + 3 * TURNS
    assert f"nodes    {nodes}: function {TURNS}, llm {TURNS}, root 1, turn {TURNS}" in out
    assert f"session DAG: {nodes} nodes" in out
    assert out.rstrip().splitlines()[-1].endswith(f"reply {TURNS - 1}")  # the newest row last
    assert f"turns    {TURNS}" in out


def test_the_newest_window_reads_no_node_file_of_older_buckets(
    session_home: Path, opened: list[str]
) -> None:
    """A page of 20 rows of a 250-turn session: only the newest bucket's rows are laid
    out, node files read only for the printed rows, and the tree says what it left out."""
    from openprogram.cli import whole_tree

    session = SessionStore(session_home).open(SID)
    text = whole_tree(session, last_turns=3, max_lines=20)
    older = 1 + 3 * 199  # buckets 0000 (the root, turns 1-99) and 0001: not loaded
    assert f"and {older} older nodes not shown (--page 2)" in text
    assert f"session DAG: {1 + 3 * TURNS} nodes" in text
    assert "← HEAD" in text and f"reply {TURNS - 1}" in text
    assert not [p for p in opened if "/history/0000/" in p or "/history/0001/" in p]
    newest = {f"{t:06d}" for t in range(TURNS - 20, TURNS + 1)}
    assert {Path(p).parent.name for p in opened} <= newest
    assert session.problems == []


def test_page_two_shows_the_rows_before_the_first(session_home: Path) -> None:
    from openprogram.cli import whole_tree

    session = SessionStore(session_home).open(SID)
    first = whole_tree(session, last_turns=0, max_lines=20)
    second = whole_tree(session, last_turns=0, max_lines=20, page=2)
    assert "cell 249" in first and "cell 230" in first and "cell 229" not in first
    assert "cell 229" in second and "cell 210" in second and "cell 230" not in second
    assert "… 20 newer rows (--page 1)" in second


def test_usage_comes_from_the_index_and_matches_the_nodes(
    session_home: Path, opened: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from openprogram.cli import main
    from openprogram.usage.totals import usage_table

    assert main(["sessions", "usage", SID]) == 0
    out = capsys.readouterr().out
    assert opened == []  # the index's usage columns: no node file
    total = re.search(r"^session .*$", out, re.M)
    assert total is not None
    assert total.group().split()[1:5] == ["250", "25000", "5000", "30000"]
    assert "$0.2500" in total.group()
    assert "  … 200 older turns not shown (--turns all)" in out
    nodes = SessionStore(session_home).open(SID).nodes()
    table = usage_table(nodes).strip().splitlines()  # the table the nodes give
    shown = out.strip().splitlines()
    turn_rows = [line for line in shown if line.startswith("  turn ")]
    assert turn_rows == [line for line in table if line.startswith("  turn ")][-50:]
    assert [line for line in shown if not line.startswith("  turn ") and "…" not in line] == [
        line for line in table if not line.startswith("  turn ")
    ]  # every function, the session: the same lines
    opened.clear()
    assert main(["sessions", "usage", SID, "--turns", "all"]) == 0
    assert capsys.readouterr().out.strip() == "\n".join(table)
    assert opened == []  # every index entry, still no node file


def test_a_budgets_first_check_reads_the_index_totals(
    session_home: Path, opened: list[str]
) -> None:
    """A session budget starts from what was recorded — from the index totals, no node
    file read — and a turn written since counts in the next process's first check."""
    from openprogram.store.session import SessionNodeWriter
    from openprogram.usage.budget import Budget

    store = SessionStore(session_home)
    spent = Budget(tokens=10**9).spent(SessionNodeWriter(store, SID))
    assert (spent.tokens, round(spent.cost, 6)) == (TURNS * 120, 0.25)
    assert opened == []
    session = store.open(SID)
    turn = session.begin_turn()
    llm = make_call("llm", "test", status=COMPLETED)
    llm.metadata.update(usage={"input_tokens": 7, "output_tokens": 3}, cost=0.5)
    session.append(llm, turn=turn, advance_head=True)
    session.commit("one more")
    store.close()
    again = Budget(tokens=10**9).spent(SessionNodeWriter(SessionStore(session_home), SID))
    assert (again.tokens, round(again.cost, 6)) == (TURNS * 120 + 10, 0.75)


def test_totals_are_rebuilt_with_the_index(session_home: Path) -> None:
    path = session_home / "sessions" / SID
    first = SessionStore(session_home).open(SID).totals()
    assert (path / ".state" / "live.db").exists()
    for name in ("live.db", "live.db-wal", "live.db-shm"):
        (path / ".state" / name).unlink(missing_ok=True)
    rebuilt = SessionStore(session_home).open(SID).totals()
    assert rebuilt == first
    assert (first["nodes"], first["turns"], first["calls"]) == (1 + 3 * TURNS, TURNS, TURNS)


def test_an_index_with_impossible_usage_is_not_taken() -> None:
    """A node comes from wherever the session came from: negative tokens or a NaN cost
    are not taken into the index's usage columns."""
    assert usage_of({"usage": {"input_tokens": 5, "output_tokens": 1}, "cost": 0.5}) == (
        5, 1, 0.5,
    )  # fmt: skip
    assert usage_of({"usage": {"input_tokens": -1, "output_tokens": 1}})[0] == 0
    assert usage_of({"usage": {"input_tokens": 5, "output_tokens": "5"}})[1] == 0
    assert usage_of({"usage": {"input_tokens": 5}, "cost": float("nan")})[2] is None
    assert usage_of({}) == (None, 0, None)
