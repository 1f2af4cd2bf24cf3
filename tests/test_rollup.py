"""The roll-up of a writer's small packs (``store/session/rollup.py``, decision 0065) as a
user meets it: the packs stay few while a writer keeps committing, every commit stays
readable from another process that listed the packs before they were rolled up, and git
finds the repository clean."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openprogram.store.session import history
from openprogram.store.session.history import Repository
from openprogram.store.session.safegit import init_repository
from tests.waiting import running_in

ROOT = Path(__file__).resolve().parent.parent

READER = """
import sys
from pathlib import Path
from openprogram.store.session.history import Repository
repo = Repository(Path(sys.argv[1]))
for line in sys.stdin:  # "n": read turns 0..n-1
    turns = range(int(line))
    got = [repo.blob_at(f"history/0000/{i:06d}/node.json") for i in turns]
    ok = all(data == b"node %d" % i for i, data in zip(turns, got))
    print("ok" if ok else f"wrong {got!r}", flush=True)
"""


def git(path: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=path, capture_output=True, text=True, check=True)
    return done.stdout


def test_another_process_reads_every_commit_while_the_packs_roll_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer commits 120 turns (a pack each, rolled up beside it every ten); a reader
    in another process reads every turn so far after each commit (its packs rolled up
    meanwhile) and, once the roll-ups have removed the packs it listed first, every turn
    again; the packs left are a handful and fsck is clean."""
    monkeypatch.setattr(history, "REPACK_EVERY", 10)
    init_repository(tmp_path)
    repo = Repository(tmp_path)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(tmp_path)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert reader.stdin is not None and reader.stdout is not None
    try:
        listed_first: set[str] = set()
        for i in range(120):
            files = {f"history/0000/{i:06d}/node.json": b"node %d" % i, "meta.json": b"%d" % i}
            repo.commit(files, f"turn {i}")
            reader.stdin.write(f"{i + 1}\n")
            reader.stdin.flush()
            assert reader.stdout.readline().strip() == "ok"  # (the reply: no clock)
            if i == 0:
                listed_first = packs(tmp_path)
        repo.wait_for_repack()  # every roll-up started has ended, and one more
        assert listed_first.isdisjoint(packs(tmp_path))  # the reader's first packs: gone
        reader.stdin.write("120\n")
        reader.stdin.flush()
        assert reader.stdout.readline().strip() == "ok"
    finally:
        reader.stdin.close()
        reader.wait()
        reader.stdout.close()
    assert reader.returncode == 0
    assert len(packs(tmp_path)) <= 8  # geometric: logarithmic in the objects, not 120
    assert not [n for n in os.listdir(tmp_path / ".git/objects/pack") if n.startswith("tmp_")]
    log = git(tmp_path, "log", "--format=%s").splitlines()
    assert log == [f"turn {i}" for i in reversed(range(120))]
    assert git(tmp_path, "fsck", "--strict", "--no-progress", "--no-dangling") == ""
    repo.close()
    assert running_in(tmp_path) == []


def packs(path: Path) -> set[str]:
    return {n for n in os.listdir(path / ".git" / "objects" / "pack") if n.endswith(".pack")}
