"""SessionStore speed and size (issue 2's targets), printed as tables.

    python benchmarks/bench_store.py [--quick] [--samples 30] [--keep DIR]

1. One turn's persistence (5 nodes appended + updated + one commit) at 0, 1,000 and 5,000
   prior turns (``--quick`` stops at 1,000), side by side with ``git add`` + ``git commit``
   through the git CLI on a copy of the same files at the same sizes.
   Target: ≤ 10 ms median, flat in session size.
2. Opening the largest session: cold (no ``.state/index.json``) and warm (cache).
   Target: ≤ 100 ms.
3. Size on disk of a 1,000-turn session written through the store, with nothing run by hand
   (maintenance is automatic).  Target: ≤ 15 MiB.

The big sessions are built by writing every turn through the store (~10 ms a turn), so a
full run takes a few minutes.  Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openprogram.context.nodes import COMPLETED, make_call
from openprogram.store.session.store import Session, SessionStore

TEXT = (
    "Summarise the findings of the survey in three sentences, keeping the numbers exact "
    "and naming each source; then list the open questions. "
)


def write_turn(session: Session, i: int) -> None:
    """One realistic turn: a cell, a function, two llm calls and a tool call (~0.5 KB each)."""
    turn = session.begin_turn()
    cell = make_call("turn", "cell", input={"code": f"survey({i})\n" + TEXT}, status="running")
    session.append(cell, turn=turn, advance_head=True)
    fn = make_call("function", "survey", input={"topic": TEXT, "i": i}, caller=cell.id, doc=TEXT)
    session.append(fn, turn=turn)
    for k in range(2):
        llm = make_call("llm", "test", input={"content": TEXT, "attempt": 1}, caller=fn.id)
        session.append(llm, turn=turn)
        llm.output = f"answer {k} of turn {i}: " + TEXT
        llm.metadata.update(status=COMPLETED, duration_ms=12.5, usage={"input_tokens": 120})
        session.update(llm)
    tool = make_call("tool", "search", input={"query": TEXT[:80]}, caller=fn.id)
    session.append(tool, turn=turn)
    tool.output = [TEXT[:60]] * 3
    tool.metadata["status"] = COMPLETED
    session.update(tool)
    for node in (fn, cell):
        node.output = "done: " + TEXT[:100]
        node.metadata["status"] = COMPLETED
        session.update(node)
    session.commit(f"turn {turn}: survey({i})")


def grow(session: Session, upto: int, label: str) -> None:
    done = session._counters()[1] - 1
    if done >= upto:
        return
    started = time.perf_counter()
    for i in range(done, upto):
        write_turn(session, i)
        if (i + 1) % 1000 == 0:
            rate = (time.perf_counter() - started) / (i + 1 - done) * 1000
            print(f"  [{label}] built {i + 1} turns ({rate:.1f} ms/turn)", flush=True)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_store_turns(session: Session, samples: int) -> tuple[list[float], list[float]]:
    """Wall and CPU ms of each turn (CPU: this process; the figure that does not depend on
    what else the machine is doing)."""
    wall, cpu = [], []
    base = session._counters()[1]
    for i in range(samples):
        started, cpu0 = time.perf_counter(), time.process_time()
        write_turn(session, base + i)
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - cpu0) * 1000)
    return wall, cpu


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL)


def time_git_cli_turns(
    source: Path, scratch: Path, samples: int
) -> tuple[list[float], list[float]]:
    """``git add`` + ``git commit`` of a turn's 5 files + meta.json on a copy of ``source``."""
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    # a clone checks every file out (the session leaves sealed buckets out of its own)
    _git(scratch.parent, "clone", "-q", str(source), str(scratch))
    _git(scratch, "config", "user.name", "bench")
    _git(scratch, "config", "user.email", "bench@localhost")
    _git(scratch, "config", "gc.auto", "0")
    payload = ("x" * 500).encode()
    wall, cpu = [], []
    for i in range(samples):
        started, cpu0 = time.perf_counter(), time.process_time() + children_cpu()
        turn_dir = scratch / "history" / "9999" / f"{i:06d}"
        turn_dir.mkdir(parents=True)
        for k in range(5):
            (turn_dir / f"{k:08d}-c-n_{i:05d}{k}.json").write_bytes(payload + str(i).encode())
        (scratch / "meta.json").write_text(f'{{"turns": {i}}}')
        _git(scratch, "add", "history", "meta.json")
        _git(scratch, "commit", "-q", "-m", f"turn {i}")
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() + children_cpu() - cpu0) * 1000)
    return wall, cpu


def summary(values: list[float], cpu: list[float] | None = None) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    line = f"{statistics.median(ordered):7.1f} {p90:7.1f} {ordered[-1]:7.1f}"
    return line + (f" {statistics.median(cpu):7.1f}" if cpu is not None else "")


def du(path: Path, *, apparent: bool = False) -> float:
    """MiB used like ``du`` (blocks, directories included), or the bytes in files."""
    total = 0
    for root, dirs, files in os.walk(path):
        for name in files + ([] if apparent else dirs):
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            total += st.st_size if apparent else st.st_blocks * 512
    return total / (1 << 20)


def sizes_line(path: Path, turns: int) -> str:
    files = sum(  # node files (not the committed bucket indexes)
        sum(name != "index.json" for name in f) for _r, _d, f in os.walk(path / "history")
    )
    return (
        f"  {turns}-turn session: .git {du(path / '.git'):.1f} MiB, whole folder "
        f"{du(path):.1f} MiB (bytes in files {du(path, apparent=True):.1f} MiB; "
        f"history/ {du(path / 'history'):.1f} MiB for {files} node files); "
        f"{count_objects(path)}"
    )


def count_objects(path: Path) -> str:
    out = subprocess.run(
        ["git", "count-objects", "-v"], cwd=path, capture_output=True, text=True
    ).stdout
    fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    get = fields.get
    return f"loose={get('count')} packs={get('packs')} in-pack={get('in-pack')}"


def time_open(home: Path, sid: str, *, cold: bool, repeats: int = 5) -> list[float]:
    out = []
    for _ in range(repeats):
        if cold:
            (home / "sessions" / sid / ".state" / "index.json").unlink(missing_ok=True)
        store = SessionStore(home)
        started = time.perf_counter()
        session = store.open(sid)
        out.append((time.perf_counter() - started) * 1000)
        n = len(session.index())
        store.close()  # saves the index cache
        assert n > 0
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_store", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="stop at 1,000 prior turns")
    parser.add_argument("--samples", type=int, default=30, help="turns timed per size")
    parser.add_argument("--keep", type=Path, help="build under DIR and keep it")
    args = parser.parse_args(argv)
    sizes = [0, 1000] if args.quick else [0, 1000, 5000]

    root = args.keep or Path(tempfile.mkdtemp(prefix="bench_store_"))
    root.mkdir(parents=True, exist_ok=True)
    home = root / "home"
    store = SessionStore(home)
    sid = "bench_main"
    session = store.create_session(sid)
    rows = []
    size_row = ""
    try:
        print(f"one turn = 5 nodes appended/updated + one commit; {args.samples} samples a size")
        for size in sizes:
            grow(session, size, sid)
            if size == 1000 or (size >= 1000 and not size_row):
                size_row = measure_size(store, session, home, sid)
            ours = time_store_turns(session, args.samples)
            theirs = time_git_cli_turns(session.path, root / f"gitcli_{size}", args.samples)
            rows.append((size, ours, theirs))
            shutil.rmtree(root / f"gitcli_{size}", ignore_errors=True)
        store.close()

        print(f"\nmachine load average before the figures: {os.getloadavg()[0]:.1f}")
        print("(1) one turn's persistence, ms        median     p90     max  median CPU")
        for size, ours, theirs in rows:
            print(f"  store   at {size:5d} prior turns     {summary(*ours)}")
            print(f"  git CLI at {size:5d} prior turns     {summary(*theirs)}")

        largest = sizes[-1] + args.samples * len(sizes)
        cold = time_open(home, sid, cold=True)
        warm = time_open(home, sid, cold=False)
        print(f"\n(2) opening a {largest}-turn session, ms  median     p90     max")
        print(f"  cold (no index cache)            {summary(cold)}")
        print(f"  warm (index cache)               {summary(warm)}")

        print("\n(3) size on disk")
        print(size_row)
        path = home / "sessions" / sid
        print(sizes_line(path, largest))
        status = subprocess.run(
            ["git", "status", "--porcelain"], cwd=path, capture_output=True, text=True
        ).stdout
        print(f"  git status after close: {len(status.splitlines())} entries")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


def measure_size(store: SessionStore, session: Session, home: Path, sid: str) -> str:
    return sizes_line(home / "sessions" / sid, session._counters()[1] - 1)


if __name__ == "__main__":
    main()
