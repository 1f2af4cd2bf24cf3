"""A turn on the disk where ``OPENPROGRAM_HOME`` lives, beside git, and a long-lived writer
(issue 23's benchmarks, item 1 and 2), side by side in one run.

    python benchmarks/bench_store_disk.py [--sizes 100,5000,20000] [--big] [--samples 30]
                                          [--long 3000] [--cache DIR] [--tmpfs /dev/shm]
                                          [--repack on,off,geometric]

1. The disk: the folder the sessions are built in (default under ``~/.cache``, the disk of
   ``~/.openprogram``), its file system (``df -T``), and what creating a small file costs
   there (create + write 300 bytes + close, in fresh folders of 10), measured now.
2. Per size (sessions bulk-built with ``bench_views.build``'s ``git fast-import`` builder,
   cached; ``--big`` adds 100,000 turns): ``--samples`` times open + a turn of 5 nodes +
   commit + close (one ``SessionStore`` each, a fresh process for the series), median and
   p99 in ms, beside ``git add`` + ``git commit`` of the same 6 files (5 nodes and
   ``meta.json``) in a repository holding the session's tree (``read-tree``: an index of
   the same size) on the same disk; the files and folders a turn leaves (the folder
   diffed around one turn, ``.git`` included; temporary files renamed into place count
   once).  Then the same on tmpfs (``--tmpfs``) for reference.  Each series runs on a
   copy of the cached session.
3. A long-lived writer: one process, ``--long`` turns, each its own ``session_context``
   (a function calling four nested ones: 5 nodes), per-turn median and p99 over the 100
   turns up to turn 100 and over the last 100 (and over the last 1,000, whose p99 is not
   just the second-worst turn), once per ``--repack`` mode: ``on`` (the store's roll-up of
   the small packs beside the writer every ``history.REPACK_EVERY`` packs), ``off``, and
   ``geometric`` (git's ``repack -d --geometric=2`` in a child, the store's maintenance
   before decision 0065), with the packs left, their size and the CPU the writer's process
   and its children used.  Then, in the same process, 100 more turns of the
   long session alternating with the first 100 of a new one: both at the same moment of
   the disk (whose cost per file creation drifts 30-600 µs over minutes on these
   machines), so their ratio is what the long session itself adds.  The same writer on
   tmpfs for reference (no disk drift).

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
for entry in (str(ROOT), str(ROOT / "benchmarks")):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from bench_views import build, disk_of  # noqa: E402  (the fast-import builder)

CACHE = Path.home() / ".cache" / "openprogram-bench" / "store_disk"

TURNS_PROBE = r"""
import json, os, sys, time
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from bench_store import write_turn
from openprogram.store.session.store import SessionStore
path = os.path.join(HOME, "sessions", SID)
def tree():
    found = set()
    for top, dirs, files in os.walk(path):
        found.update(os.path.join(top, n) for n in dirs + files)
    return found
times = []
created = None
for i in range(SAMPLES):
    before = tree() if i == 1 else None
    t = time.perf_counter()
    store = SessionStore(HOME)
    session = store.open(SID)
    write_turn(session, 10**7 + i)
    store.close()
    times.append((time.perf_counter() - t) * 1000)
    if before is not None:
        new = sorted(p[len(path) + 1:] for p in tree() - before)
        created = {"count": len(new), "paths": new}
print("RESULT " + json.dumps({"times": times, "created": created}))
"""

LONG_PROBE = r"""
import json, os, sys, time
os.environ["OPENPROGRAM_HOME"] = HOME
from openprogram import agentic_function, create_runtime, session_context
from openprogram.providers.test import TestProvider
from openprogram.store.session import history
spawned = [0]
real_start = history.Repository._start_repack
def start(repo):
    spawned[0] += 1
    return real_start(repo)
history.Repository._start_repack = start
if MAINTAIN == "off":
    history.REPACK_EVERY = 10**9
elif MAINTAIN == "geometric":  # the store's repack before decision 0065, for comparison
    import subprocess
    from openprogram.store.session import safegit
    def real_start(repo):
        if repo._repacking is not None and repo._repacking.poll() is None:
            return
        repo._packs = 0
        argv, env = safegit.git_command(repo.worktree, "repack", "-d", "-q", "--geometric=2")
        repo._repacking = subprocess.Popen(
            argv, cwd=repo.worktree, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
@agentic_function
def leaf(x):
    "A nested step."
    return x
@agentic_function
def step(x):
    "A turn of five nodes."
    return [leaf(x + k) for k in range(4)]
runtime = create_runtime(TestProvider())
def turn(sid, i):
    t = time.perf_counter()
    with session_context(sid, runtime=runtime):
        step(i)
    return (time.perf_counter() - t) * 1000
times = [turn(SID, i) for i in range(TURNS)]
pairs = [(turn(SID, TURNS + i), turn(SID + "_new", i)) for i in range(100)]
folder = os.path.join(HOME, "sessions", SID, ".git", "objects", "pack")
packs = []
for name in os.listdir(folder):  # (a repack may remove one meanwhile)
    if name.endswith(".pack") and os.path.exists(os.path.join(folder, name)):
        packs.append(os.path.getsize(os.path.join(folder, name)))
cpu = os.times()
got = {"times": times, "spawned": spawned[0], "pairs": pairs, "packs": [len(packs), sum(packs)]}
got["cpu"] = [cpu.user + cpu.system, cpu.children_user + cpu.children_system]
print("RESULT " + json.dumps(got))
"""


def run_probe(code: str, **values: Any) -> dict[str, Any]:
    header = "".join(f"{k} = {v!r}\n" for k, v in {"ROOT": str(ROOT), **values}.items())
    done = subprocess.run(
        [sys.executable, "-c", header + code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])  # type: ignore[no-any-return]
    raise RuntimeError(f"probe failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")


def file_creation_us(where: Path, count: int = 400) -> float:
    """Median µs to create, write and close a 300-byte file, 10 to a fresh folder."""
    scratch = Path(tempfile.mkdtemp(prefix="create_", dir=where))
    data = b"x" * 300
    times = []
    try:
        for i in range(count):
            folder = scratch / f"{i // 10:04d}"
            folder.mkdir(exist_ok=True)
            started = time.perf_counter_ns()
            fd = os.open(folder / f"{i}.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, data)
            os.close(fd)
            times.append((time.perf_counter_ns() - started) / 1000)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return statistics.median(times)


def replace_us(where: Path, count: int = 300) -> tuple[float, float]:
    """Median µs to replace a 41-byte file by rename (a ref's update): ``os.replace`` vs
    :func:`files.replace` (the old file freed by a thread), alternating."""
    from openprogram.store.session.files import replace, wait_closed

    scratch = Path(tempfile.mkdtemp(prefix="replace_", dir=where))
    times: dict[bool, list[float]] = {False: [], True: []}
    try:
        for i in range(count):
            deferred = bool(i % 2)
            target, tmp = scratch / f"ref{int(deferred)}", scratch / f"ref{int(deferred)}.lock"
            tmp.write_bytes(b"%040d\n" % i)
            started = time.perf_counter_ns()
            (replace if deferred else os.replace)(tmp, target)
            times[deferred].append((time.perf_counter_ns() - started) / 1000)
            time.sleep(0.002)  # (a commit's pace: the thread's close is not measured)
        wait_closed()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return statistics.median(times[False]), statistics.median(times[True])


def git_turns(session_path: Path, scratch: Path, samples: int) -> list[float]:
    """``git add`` + ``git commit`` of 6 new files in a repository whose index holds the
    session's whole tree (as a repository of that size has)."""
    repo = scratch / "git"
    quiet = {"capture_output": True, "check": True}
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(session_path), str(repo)], **quiet)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@b",
        "GIT_COMMITTER_NAME": "b",
    }
    env["GIT_COMMITTER_EMAIL"] = "b@b"
    subprocess.run(["git", "read-tree", "HEAD"], cwd=repo, **quiet)
    times = []
    for i in range(samples):
        folder = repo / "history" / "9999" / f"{i:06d}"
        folder.mkdir(parents=True)
        started = time.perf_counter()
        names = []
        for k in range(5):
            (folder / f"{k:08d}-c-n_{i:05d}{k}.json").write_bytes(b'{"node": %d}' % (i * 5 + k))
            names.append(str((folder / f"{k:08d}-c-n_{i:05d}{k}.json").relative_to(repo)))
        (repo / "meta.json").write_text(json.dumps({"turns": i}))
        subprocess.run(["git", "add", "--", *names, "meta.json"], cwd=repo, env=env, **quiet)
        subprocess.run(["git", "commit", "-q", "-m", f"turn {i}"], cwd=repo, env=env, **quiet)
        times.append((time.perf_counter() - started) * 1000)
    return times


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def med(values: list[float]) -> str:
    return f"{statistics.median(values):6.1f} (p99 {p99(values):6.1f})"


def series(home: Path, sid: str, where: Path, samples: int) -> dict[str, Any]:
    """open + turn + commit + close and git, on a copy of the session under ``where``."""
    scratch = Path(tempfile.mkdtemp(prefix="disk_", dir=where))
    try:
        copy = scratch / "home"
        shutil.copytree(home, copy, symlinks=True)
        got = run_probe(TURNS_PROBE, HOME=str(copy), SID=sid, SAMPLES=samples)
        got["git"] = git_turns(copy / "sessions" / sid, scratch, samples)
        return got
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        os.sync()  # the next series starts on a quiet disk, not beside this one's writeback


def long_writer(where: Path, turns: int, maintain: str) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="long_", dir=where))
    try:
        got = run_probe(LONG_PROBE, HOME=str(scratch), SID="long", TURNS=turns, MAINTAIN=maintain)
        return got
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        os.sync()  # the next series starts on a quiet disk, not beside this one's writeback


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,5000,20000")
    parser.add_argument("--big", action="store_true", help="add the 100,000-turn session")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--long", type=int, default=3000, help="turns of the long writer")
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--tmpfs", type=Path, default=Path("/dev/shm"))
    parser.add_argument(
        "--repack",
        default="on,off",
        help="the long writer's runs on the disk: on (the store's roll-up), off, geometric "
        "(git's repack --geometric=2 in a child, the store's before decision 0065)",
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] + ([100_000] if args.big else [])
    args.cache.mkdir(parents=True, exist_ok=True)
    places = [("disk", args.cache)] + ([("tmpfs", args.tmpfs)] if args.tmpfs.is_dir() else [])
    print(f"load {os.getloadavg()[0]:.1f}; {args.samples} samples per series")
    for label, where in places:
        plain, deferred = replace_us(where)
        print(
            f"{label}: {disk_of(where)} ({where}); a file created: "
            f"{file_creation_us(where):.0f} µs median; a replace: {plain:.0f} µs, "
            f"{deferred:.0f} µs with the old file freed by a thread"
        )
    print(
        f"\n{'turns':>7} {'where':>6} {'open+turn+commit+close ms':>26} "
        f"{'git add+commit ms':>22} {'ratio':>6} {'files/turn':>10}"
    )
    created: list[str] = []
    for size in sizes:
        home, sid = build(size, args.cache / "sessions")
        for label, where in places:
            got = series(home, sid, where, args.samples)
            ratio = statistics.median(got["times"]) / statistics.median(got["git"])
            count = got["created"]["count"] if got["created"] else "?"
            print(
                f"{size:>7} {label:>6} {med(got['times']):>26} {med(got['git']):>22} "
                f"{ratio:6.2f} {count:>10}",
                flush=True,
            )
            if got["created"] and not created:
                created = got["created"]["paths"]
    if created:
        print("  a turn's new paths: " + ", ".join(created))
    if args.long:
        print(f"\nlong-lived writer, {args.long} turns in one process (5 nodes each)")
        runs = [("disk", args.cache, mode) for mode in args.repack.split(",")]
        runs += [(label, where, "on") for label, where in places[1:]]
        for label, where, maintain in runs:
            got = long_writer(where, args.long, maintain)
            times = got["times"]
            first, last, tail = times[:100], times[-100:], times[-1000:]
            growth = statistics.median(last) / statistics.median(first)
            spread = p99(tail) / statistics.median(tail)
            longer, new = zip(*got["pairs"], strict=True)
            alongside = statistics.median(longer) / statistics.median(new)
            print(
                f"  {label:>5}, repack {maintain}: turns 1-100 "
                f"{med(first)} ms, last 100 {med(last)} ms, last/first {growth:.2f}"
                f" ({got['spawned']} repacks started); then alternating with a new"
                f" session: {med(list(longer))} vs {med(list(new))} ms, {alongside:.2f};"
                f" last 1,000 turns {med(tail)} ms, p99/median {spread:.2f};"
                f" {got['packs'][0]} packs, {got['packs'][1] / 2**20:.1f} MiB"
                f"; CPU s: writer {got['cpu'][0]:.1f}, its children {got['cpu'][1]:.1f}"
                f" (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
