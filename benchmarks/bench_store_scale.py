"""The session store from 100 to 100,000 turns (issue 14's targets), printed as tables.

    python benchmarks/bench_store_scale.py [--sizes 100,1000,5000,20000] [--big] [--samples 40]
                                           [--cache DIR] [--rebuild]

Sessions of each size are built once through the store (5 nodes + one commit a turn,
``write_turn`` of ``bench_store.py``; above 5,000 turns a commit holds 10 turns so a
build stays in minutes) and cached under ``benchmarks/.cache/store_scale/`` (gitignored;
``--cache`` elsewhere, ``--rebuild`` starts over).  ``--big`` adds the 100,000-turn session
(~10-20 minutes to build the first time).  Each measurement runs in a fresh process:

1. turn (5 nodes + commit), ms: median / p99 / max over ``--samples`` turns, beside
   ``git add`` + ``git commit`` of the same 5 files + ``meta.json`` in a clone of the
   same session.  Targets: ≤ 5 ms median, ≤ 25 ms p99, flat.
2. open + first turn, ms (median of 5 fresh processes), from the session folder and from
   a fresh ``git clone`` of it, beside ``git log -1``; RSS the open and one turn added.
   Targets: ≤ 50 ms; ≤ 30 MiB.
3. whole-session views: ``session.index()``, ``session.nodes()`` (every node read whole:
   what ``%openprogram dag`` drew from before it used the index), ``openprogram sessions
   show`` in a fresh process (Python start included), and ``%openprogram dag`` in a fresh
   process with the extension imported (open, layout, widget, the display bundle as JSON:
   median and range of 3), with the node files each read.  Target ≤ 1 s.
   ``--views`` measures only this table.
4. ``du`` and bytes of the folder.  Target: ≤ 10 MiB at 1,000 turns, ≤ 2.5x bytes.
5. two writers: turn times while a second process appends a turn every 20 ms, beside the
   single-writer figures.  Target: ≤ 2 ms extra.
6. RSS an IPython shell (what a kernel runs) keeps per cell from cell 100 to ``--cells``:
   ``%%openprogram`` cells beside the same code in plain cells.  Target: ≤ 5 KB more.

Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CACHE = ROOT / "benchmarks" / ".cache" / "store_scale"
LAYOUT = "v3"  # bump when the on-disk layout changes (cached sessions are rebuilt)

# Runs in a fresh process: open the session, take turns, report times and RSS.
PROBE = r"""
import json, os, sys, time
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
from bench_store import write_turn
from openprogram.store.session.store import SessionStore
before = rss()
t0 = time.perf_counter()
store = SessionStore(HOME)
session = store.open(SID)
t1 = time.perf_counter()
write_turn(session, 10**7)
t2 = time.perf_counter()
out = {"open": (t1 - t0) * 1000, "first": (t2 - t1) * 1000, "rss": rss() - before}
turns, cpu = [], []
for i in range(SAMPLES):
    s, c = time.perf_counter(), time.process_time()
    write_turn(session, 10**7 + 1 + i)
    turns.append((time.perf_counter() - s) * 1000)
    cpu.append((time.process_time() - c) * 1000)
out["turns"], out["cpu"] = turns, cpu
if VIEWS:
    t = time.perf_counter()
    n = len(session.index())
    out["index"] = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    nodes = [c.to_dict() for c in session.nodes()]
    out["dag"] = (time.perf_counter() - t) * 1000
    out["nodes"] = len(nodes)
store.close()
print("RESULT " + json.dumps(out))
"""

# `%openprogram dag` as a kernel runs it (anywidget and the extension already imported):
# open the session, show_dag, the display bundle as the kernel sends it; node reads counted.
DAG_PROBE = r"""
import json, os, sys, time
os.environ["OPENPROGRAM_HOME"] = HOME
from openprogram.store.session.session import Session
from openprogram_magics.widget import SavedDag, show_dag
reads = set()
real_get, real_get_many = Session.get, Session.get_many
def get(self, node_id):
    reads.add(node_id)
    return real_get(self, node_id)
def get_many(self, node_ids):
    node_ids = list(node_ids)
    reads.update(node_ids)
    return real_get_many(self, node_ids)
Session.get, Session.get_many = get, get_many
t = time.perf_counter()
data, _ = SavedDag(show_dag(SID, last_turns=50))._repr_mimebundle_()
size = len(json.dumps(data))
out = {"ms": (time.perf_counter() - t) * 1000, "reads": len(reads), "bytes": size}
print("RESULT " + json.dumps(out))
"""

# An IPython shell as a kernel holds it: RSS after 100 and after CELLS cells, %%openprogram
# cells (one agentic call each, test provider) or the same code in plain cells.
CELLS_PROBE = r"""
import contextlib, gc, json, os, sys
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
from bench_magics import AGENT
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
config = Config()
config.HistoryManager.hist_file = ":memory:"
ip = InteractiveShell.instance(config=config)
ip.display_pub.publish = lambda *args, **kwargs: None  # outputs go nowhere, as to a frontend
quiet = open(os.devnull, "w")
marks = {}
with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
    ip.run_line_magic("load_ext", "openprogram_magics")
    ip.run_line_magic("openprogram", "provider test")
    os.environ["OPENPROGRAM_PROVIDER"] = "test"
    ip.run_cell(AGENT)
    for i in range(CELLS):
        code = f'triage("ticket {i}")'
        ip.run_cell(("%%openprogram\n" if MAGIC else "") + code, store_history=True)
        if i + 1 in (100, CELLS):
            gc.collect()
            marks[i + 1] = rss()
print("RESULT " + json.dumps(marks))
"""

# A second writer: one turn every 20 ms until the stop file appears.
WRITER = r"""
import os, sys, time
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from bench_store import write_turn
from openprogram.store.session.store import SessionStore
store = SessionStore(HOME)
session = store.open(SID)
i = 0
print("ready", flush=True)
while not os.path.exists(STOP):
    session.sync()
    write_turn(session, 2 * 10**7 + i)
    i += 1
    time.sleep(0.02)
store.close()
"""


def python(code: str, **values: Any) -> str:
    header = "".join(f"{k} = {v!r}\n" for k, v in {"ROOT": str(ROOT), **values}.items())
    return header + code


def probe(home: Path, sid: str, samples: int, views: bool = False) -> dict[str, Any]:
    code = python(PROBE, HOME=str(home), SID=sid, SAMPLES=samples, VIEWS=views)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])  # type: ignore[no-any-return]
    raise RuntimeError(f"probe failed:\n{out.stdout}\n{out.stderr}")


def build(size: int, cache: Path, rebuild: bool) -> tuple[Path, str]:
    """The cached session of ``size`` turns (built through the store when missing)."""
    home = cache / LAYOUT / str(size)
    sid = f"scale{size}"
    path = home / "sessions" / sid
    done = home / "built"
    if rebuild and home.exists():
        shutil.rmtree(home)
    if done.exists():
        return home, sid
    from bench_store import write_turn

    from openprogram.store.session.store import SessionStore

    store = SessionStore(home)
    session = store.create_session(sid) if not path.exists() else store.open(sid)
    every = 1 if size <= 5000 else 10
    started = time.perf_counter()
    first = session.live.read()[1] - 1  # type: ignore[index]
    for i in range(first, size):
        write_turn(session, i) if every == 1 else write_turn_batched(session, i, every)
        if (i + 1) % 2000 == 0:
            rate = (time.perf_counter() - started) / (i + 1 - first) * 1000
            print(f"  [build {size}] {i + 1} turns ({rate:.1f} ms/turn)", flush=True)
    session.commit("built")
    store.close()
    done.write_text(str(size))
    return home, sid


def write_turn_batched(session: Any, i: int, every: int) -> None:
    """``write_turn`` committing only every ``every``-th turn (faster builds)."""
    commit = session.commit
    if (i + 1) % every:
        session.commit = lambda message: None
    try:
        from bench_store import write_turn

        write_turn(session, i)
    finally:
        session.commit = commit


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "gc.auto=0", *args], cwd=cwd, check=True, capture_output=True)


def git_cli_turns(session_path: Path, scratch: Path, samples: int) -> list[float]:
    """``git add`` + ``git commit`` of a turn's 5 files + meta.json, in a clone of the session."""
    clone = scratch / "gitcli"
    shutil.rmtree(clone, ignore_errors=True)
    git(scratch, "clone", "-q", str(session_path), str(clone))
    git(clone, "config", "user.name", "bench")
    git(clone, "config", "user.email", "bench@localhost")
    payload = b'{"kind":"llm","input":"' + b"x" * 480 + b'"}'
    times = []
    for i in range(samples):
        started = time.perf_counter()
        turn_dir = clone / "history" / "9999" / f"{i:06d}"
        turn_dir.mkdir(parents=True)
        for k in range(5):
            (turn_dir / f"{k:08d}-c-n_{i:05d}{k}.json").write_bytes(payload + str(i).encode())
        (clone / "meta.json").write_text(f'{{"turns": {i}}}')
        git(clone, "add", "history/9999", "meta.json")
        git(clone, "commit", "-q", "-m", f"turn {i}")
        times.append((time.perf_counter() - started) * 1000)
    shutil.rmtree(clone, ignore_errors=True)
    return times


def installed_env(**extra: str) -> dict[str, str]:
    """The environment of a fresh process that runs as an installed package does: modules
    imported from their cached bytecode (a sandbox's ``PYTHONDONTWRITEBYTECODE`` made every
    start compile ~150 ms of source; the first of the three runs writes the cache)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def sessions_show_ms(home: Path, sid: str) -> float:
    """``openprogram sessions show`` in a fresh process, wall ms (Python start included)."""
    code = f"from openprogram.cli import main; main(['sessions', 'show', {sid!r}])"
    env = installed_env(OPENPROGRAM_HOME=str(home))
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
    return (time.perf_counter() - started) * 1000


def dag_view(home: Path, sid: str, repeats: int = 3) -> dict[str, Any]:
    """``%openprogram dag`` in fresh processes: ms of each, node reads, bundle bytes."""
    runs = []
    for _ in range(repeats):
        code = python(DAG_PROBE, HOME=str(home), SID=sid)
        env = installed_env()
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        got = [json.loads(x[7:]) for x in out.stdout.splitlines() if x.startswith("RESULT ")]
        if not got:
            raise RuntimeError(f"dag probe failed:\n{out.stdout}\n{out.stderr}")
        runs.append(got[0])
    return {"ms": [r["ms"] for r in runs], "reads": runs[0]["reads"], "bytes": runs[0]["bytes"]}


def git_log_ms(path: Path, repeats: int = 5) -> list[float]:
    out = []
    for _ in range(repeats):
        started = time.perf_counter()
        git(path, "log", "-1", "--format=%H %s")
        out.append((time.perf_counter() - started) * 1000)
    return out


def du(path: Path, *, apparent: bool = False) -> float:
    """MiB as ``du`` counts them (blocks, folders included), or the bytes in files."""
    total = 0
    for root, dirs, files in os.walk(path):
        for name in files + ([] if apparent else dirs):
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            total += st.st_size if apparent else st.st_blocks * 512
    return total / (1 << 20)


def two_writers(home: Path, sid: str, samples: int, scratch: Path) -> list[float]:
    stop = scratch / "stop"
    stop.unlink(missing_ok=True)
    code = python(WRITER, HOME=str(home), SID=sid, STOP=str(stop))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
    try:
        assert writer.stdout is not None
        writer.stdout.readline()  # ready
        return probe(home, sid, samples)["turns"]  # type: ignore[no-any-return]
    finally:
        stop.write_text("stop")
        writer.wait(timeout=120)


def cells_kib_per_cell(cells: int, magic: bool, home: Path) -> float:
    """KiB of RSS each cell keeps, from cell 100 to cell ``cells``, in a fresh process."""
    code = python(CELLS_PROBE, CELLS=cells, MAGIC=magic)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENPROGRAM_HOME": str(home)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            marks = json.loads(line[7:])
            return (marks[str(cells)] - marks["100"]) * 1024 / (cells - 100)
    raise RuntimeError(f"cells probe failed:\n{out.stdout}\n{out.stderr}")


def stats(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(len(ordered) * 0.99))]
    return f"{statistics.median(ordered):7.1f} {p99:7.1f} {ordered[-1]:7.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_store_scale", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,5000,20000", help="turns, comma-separated")
    parser.add_argument("--big", action="store_true", help="also the 100,000-turn session")
    parser.add_argument("--samples", type=int, default=40, help="turns timed per size")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where built sessions live")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the cached sessions")
    parser.add_argument("--cells", type=int, default=1000, help="cells for (6); 0 skips it")
    parser.add_argument("--views", action="store_true", help="only (3), whole-session views")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] + ([100_000] if args.big else [])
    sys.path.insert(0, str(ROOT / "benchmarks"))
    scratch = Path(tempfile.mkdtemp(prefix="bench_scale_"))
    rows: list[dict[str, Any]] = []
    try:
        for size in sizes:
            home, sid = build(size, args.cache, args.rebuild)
            path = home / "sessions" / sid
            row: dict[str, Any] = {"size": size}
            first = probe(home, sid, 0 if args.views else args.samples, views=True)
            row["turns"], row["cpu"] = first["turns"], first["cpu"]
            row["index"], row["dag"] = first["index"], first["dag"]
            row["nodes"] = first["nodes"]
            sessions_show_ms(home, sid)  # (writes the bytecode cache, as an install has it)
            row["show"] = [sessions_show_ms(home, sid) for _ in range(3)]
            row["dag_view"] = dag_view(home, sid)
            if args.views:
                rows.append(row)
                print(f"  measured {size} turns", flush=True)
                continue
            opens = [first] + [probe(home, sid, 0) for _ in range(4)]
            row["open"] = [o["open"] for o in opens]
            row["first"] = [o["open"] + o["first"] for o in opens]
            row["rss"] = statistics.median(o["rss"] for o in opens)
            clone_home = scratch / "clone"
            shutil.rmtree(clone_home, ignore_errors=True)
            (clone_home / "sessions").mkdir(parents=True)
            git(scratch, "clone", "-q", str(path), str(clone_home / "sessions" / sid))
            cold = [probe(clone_home, sid, 0)]
            row["clone_first"] = [o["open"] + o["first"] for o in cold]
            shutil.rmtree(clone_home, ignore_errors=True)
            row["git_turns"] = git_cli_turns(path, scratch, min(args.samples, 20))
            row["git_log"] = git_log_ms(path)
            row["two"] = two_writers(home, sid, args.samples, scratch)
            row["du"], row["bytes"] = du(path), du(path, apparent=True)
            rows.append(row)
            print(f"  measured {size} turns", flush=True)
        kept = {}
        if args.cells > 100 and not args.views:
            for magic in (True, False):
                kept[magic] = cells_kib_per_cell(args.cells, magic, scratch / f"cells{magic}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.views:
        report_views(rows)
        return
    report(rows)
    if kept:
        print(
            f"\n(6) RSS kept per cell, KiB, cells 100 to {args.cells} (IPython shell as a kernel)"
        )
        print(f"  %%openprogram cells (one agentic call each)  {kept[True]:6.1f}")
        print(f"  plain cells, same code                      {kept[False]:6.1f}")


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.0f} ({min(values):.0f}-{max(values):.0f})"


def report_views(rows: list[dict[str, Any]], load: bool = True) -> None:
    if load:
        print(f"\nmachine load average: {os.getloadavg()[0]:.1f}")
    print(
        "\n(3) whole-session views, ms     index()  nodes() (every node)"
        "   `sessions show` process   `%openprogram dag` (node reads, bundle KiB)"
    )
    for r in rows:
        dag = r["dag_view"]
        print(
            f"  {r['size']:6d} turns ({r['nodes']} nodes) {r['index']:8.0f} {r['dag']:10.0f}"
            f"             {spread(r['show']):>20}      {spread(dag['ms']):>20}"
            f" ({dag['reads']} reads, {dag['bytes'] / 1024:.0f} KiB)"
        )


def report(rows: list[dict[str, Any]]) -> None:
    print(f"\nmachine load average: {os.getloadavg()[0]:.1f}")
    print("(1) one turn (5 nodes + commit), ms        median     p99     max   CPU median")
    for r in rows:
        cpu = statistics.median(r["cpu"])
        print(f"  store   at {r['size']:6d} turns            {stats(r['turns'])}  {cpu:8.1f}")
        print(f"  git CLI at {r['size']:6d} turns            {stats(r['git_turns'])}")
    print("\n(2) open, ms (fresh process; 5 runs)     median     p99     max   RSS MiB")
    for r in rows:
        print(f"  open            {r['size']:6d} turns    {stats(r['open'])}")
        print(f"  open+1st turn   {r['size']:6d} turns    {stats(r['first'])}  {r['rss']:6.1f}")
        print(f"  clone open+1st  {r['size']:6d} turns    {stats(r['clone_first'])}")
        print(f"  git log -1      {r['size']:6d} turns    {stats(r['git_log'])}")
    report_views(rows, load=False)
    print("\n(4) size on disk                  du MiB   bytes MiB   du/bytes")
    for r in rows:
        ratio = r["du"] / r["bytes"] if r["bytes"] else 0
        print(
            f"  {r['size']:6d} turns              {r['du']:8.1f}  {r['bytes']:10.1f}  {ratio:9.2f}"
        )
    print("\n(5) two writers, turn ms              median     p99     max   extra median")
    for r in rows:
        extra = statistics.median(r["two"]) - statistics.median(r["turns"])
        print(f"  {r['size']:6d} turns, 2nd writer       {stats(r['two'])}  {extra:+8.1f}")


if __name__ == "__main__":
    main()
