"""Spike for issue 36: the current store beside SQLite (WAL) + git through GitPython, beside
``git add`` + ``git commit``, side by side in one run, on the disk of ``OPENPROGRAM_HOME``.

    python benchmarks/spike_store_sqlite.py [--turns 2000] [--work DIR] [--kills 50]
                                            [--no-faults] [--no-current-lock]

The prototype is ``benchmarks/spikes/sqlite_store.py`` (not part of the package).

1. The disk: the folder measured (default ``~/.cache/openprogram-bench/spike_store``, which
   must be on the file system of ``OPENPROGRAM_HOME``, default ``~/.openprogram``; never
   /tmp), ``df -T`` and ``stat -f``, and what creating a small file costs there now.
2. One long writer per variant, ``--turns`` turns each, the variants interleaved turn by
   turn (each at the same moment of the disk).  Every turn is open + 5 nodes (5 appends,
   5 updates: ``bench_store.write_turn``'s shape) + commit + close:

   - ``current``: ``SessionStore(home).open(sid)``, ``write_turn``, ``store.close()``;
   - ``sqlite+pack``: the prototype, a commit's objects as one pack (gitdb), the process
     keeping its SQLite connection across open/close (a kernel's store would);
   - ``sqlite+pack, reconnect``: the same, connecting and disconnecting SQLite each turn
     (the last close checkpoints the WAL: an fsync);
   - ``sqlite+loose``: the prototype, one loose object file per git object;
   - ``git``: write the 5 node files + ``meta.json``, ``git add`` them, ``git commit``.

   The prototype runs ``git repack -d --geometric=2`` in the background every 200 commits
   (detached: the writer never waits for it).  Median, p10, p90, p99 of turns 1-100 (a
   100-turn session) and of the last 100 (a ``--turns`` session), last/first (the long
   writer's drift), p99 of the last 1,000, and each figure / git's.
3. Faults (``--no-faults`` skips): a disk that fills (a ``tmpfs`` of 2 MiB, mounted as
   root), the prototype beside the current store; two prototype writers on one session;
   the live database deleted between turns; a writer SIGKILLed while it holds git's ref
   lock (and the current store's ``main.lock`` left behind); one writer SIGKILLed
   ``--kills`` times while another writes.

Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for entry in (str(ROOT), str(ROOT / "benchmarks")):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from bench_store import TEXT, write_turn  # noqa: E402
from spikes.sqlite_store import (  # noqa: E402
    GIT_CONFIG,
    SpikeSession,
    StoreError,
    repack_in_background,
)

from openprogram.context.nodes import COMPLETED, make_call  # noqa: E402

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@b",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@b",
}
GIT = ["git"] + [arg for k, v in GIT_CONFIG.items() for arg in ("-c", f"{k}={v}")]


# -- one turn of each variant ----------------------------------------------------------------
def spike_turn(session: SpikeSession, i: int) -> None:
    """``bench_store.write_turn`` through the prototype: the same nodes, the same order."""
    turn = session.begin_turn()
    cell = make_call("turn", "cell", input={"code": f"survey({i})\n" + TEXT}, status="running")
    c = session.append(cell.to_dict(), turn=turn, advance_head=True)
    fn = make_call("function", "survey", input={"topic": TEXT, "i": i}, caller=cell.id, doc=TEXT)
    f = session.append(fn.to_dict(), turn=turn)
    for k in range(2):
        llm = make_call("llm", "test", input={"content": TEXT, "attempt": 1}, caller=fn.id)
        n = session.append(llm.to_dict(), turn=turn)
        n["output"] = f"answer {k} of turn {i}: " + TEXT
        n["metadata"].update(status=COMPLETED, duration_ms=12.5, usage={"input_tokens": 120})
        session.update(n)
    tool = make_call("tool", "search", input={"query": TEXT[:80]}, caller=fn.id)
    t = session.append(tool.to_dict(), turn=turn)
    t["output"] = [TEXT[:60]] * 3
    t["metadata"]["status"] = COMPLETED
    session.update(t)
    for node in (f, c):
        node["output"] = "done: " + TEXT[:100]
        node["metadata"]["status"] = COMPLETED
        session.update(node)
    session.commit(f"turn {turn}: survey({i})")


class Current:
    name = "current"

    def __init__(self, work: Path) -> None:
        from openprogram.store.session.store import SessionStore

        self.home = work / "current"
        self.store_class = SessionStore
        store = SessionStore(self.home)
        store.create_session(session_id="s")
        store.close()

    def turn(self, i: int) -> None:
        store = self.store_class(self.home)
        write_turn(store.open("s"), i)
        store.close()


class Spike:
    def __init__(self, work: Path, name: str, *, keep: bool, pack: bool) -> None:
        self.name = name
        self.path = work / name.replace(" ", "").replace(",", "_").replace("+", "_")
        self.keep, self.pack = keep, pack
        self.repack: subprocess.Popen[bytes] | None = None
        self.commits = 0

    def turn(self, i: int) -> None:
        session = SpikeSession(self.path, keep=self.keep, pack=self.pack)
        spike_turn(session, i)
        session.close()
        self.commits += 1
        if self.repack is not None and self.repack.poll() is not None:
            self.repack = None
        if self.commits % 200 == 0 and self.repack is None:
            self.repack = repack_in_background(self.path)


class Git:
    name = "git add+commit"

    def __init__(self, work: Path) -> None:
        self.repo = work / "git"
        self.repo.mkdir()
        subprocess.run([*GIT, "init", "-q", "-b", "main", str(self.repo)], check=True)

    def turn(self, i: int) -> None:
        folder = self.repo / "history" / f"{i // 100:04d}" / f"{i:06d}"
        folder.mkdir(parents=True, exist_ok=True)
        names = []
        for k in range(5):
            node = make_call("llm", "test", input={"content": TEXT, "turn": i, "k": k})
            path = folder / f"{i * 5 + k:08d}-l-{node.id}.json"
            path.write_text(json.dumps(node.to_dict(), indent=1))
            names.append(str(path.relative_to(self.repo)))
        (self.repo / "meta.json").write_text(json.dumps({"turns": i, "head_id": names[0]}))
        quiet: dict[str, Any] = {"cwd": self.repo, "env": GIT_ENV, "check": True}
        quiet["capture_output"] = True
        subprocess.run([*GIT, "add", "--", *names, "meta.json"], **quiet)
        subprocess.run([*GIT, "commit", "-q", "-m", f"turn {i}"], **quiet)


# -- figures ---------------------------------------------------------------------------------
def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def spread(values: list[float]) -> str:
    return (
        f"{statistics.median(values):7.1f} {pct(values, 10):6.1f} {pct(values, 90):6.1f}"
        f" {pct(values, 99):6.1f}"
    )


def disk_report(work: Path, home: Path) -> None:
    probe = home if home.exists() else home.parent
    df = subprocess.run(["df", "-T", str(work)], capture_output=True, text=True).stdout
    fs = subprocess.run(
        ["stat", "-f", "-c", "%T (block %S B)", str(work)], capture_output=True, text=True
    ).stdout.strip()
    same = os.stat(work).st_dev == os.stat(probe).st_dev
    print(f"measured in: {work}")
    print(f"OPENPROGRAM_HOME: {home} (same file system: {'yes' if same else 'NO'})")
    print(f"df -T: {' '.join(df.splitlines()[-1].split()[:2]) if df else '?'}; stat -f: {fs}")
    print(f"a small file created here now: {create_us(work):.0f} µs (median of 300)")
    print(f"load average: {os.getloadavg()[0]:.1f}; cores: {os.cpu_count()}")


def create_us(where: Path) -> float:
    scratch = where / "create-probe"
    scratch.mkdir()
    times = []
    for i in range(300):
        folder = scratch / f"{i // 10:03d}"
        folder.mkdir(exist_ok=True)
        t = time.perf_counter_ns()
        fd = os.open(folder / f"{i}.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"x" * 300)
        os.close(fd)
        times.append((time.perf_counter_ns() - t) / 1000)
    shutil.rmtree(scratch)
    return statistics.median(times)


def long_writers(work: Path, turns: int) -> None:
    variants: list[Any] = [
        Current(work),
        Spike(work, "sqlite+pack", keep=True, pack=True),
        Spike(work, "sqlite+pack, reconnect", keep=False, pack=True),
        Spike(work, "sqlite+loose", keep=True, pack=False),
        Git(work),
    ]
    times: dict[str, list[float]] = {v.name: [] for v in variants}
    started = time.perf_counter()
    for i in range(turns):
        order = variants[i % len(variants) :] + variants[: i % len(variants)]
        for v in order:
            t = time.perf_counter()
            v.turn(i)
            times[v.name].append((time.perf_counter() - t) * 1000)
        if (i + 1) % 500 == 0:
            print(f"  [{i + 1} turns, {time.perf_counter() - started:.0f} s]", flush=True)
    for v in variants:
        if isinstance(v, Spike) and v.repack is not None:
            v.repack.wait()
    git = times["git add+commit"]
    first, last = slice(0, 100), slice(turns - 100, turns)
    print(f"\nms per turn (open + 5 nodes + commit + close), {turns} turns a variant")
    head = f"{'median':>7} {'p10':>6} {'p90':>6} {'p99':>6}"
    print(f"{'variant':<24} {'turns 1-100: ' + head:>43}  {'last 100: ' + head:>40}")
    for name, ts in times.items():
        print(f"{name:<24} {spread(ts[first]):>43}  {spread(ts[last]):>40}")
    print(
        f"\n{'variant':<24} {'/git first 100':>15} {'/git last 100':>14} {'last/first':>11}"
        f" {'p99 last 1000':>14} {'/git p99':>9}"
    )
    tail = slice(max(0, turns - 1000), turns)
    for name, ts in times.items():
        m = statistics.median
        print(
            f"{name:<24} {m(ts[first]) / m(git[first]):>14.2f}x"
            f" {m(ts[last]) / m(git[last]):>13.2f}x"
            f" {m(ts[last]) / m(ts[first]):>10.2f}x {pct(ts[tail], 99):>13.1f}"
            f" {pct(ts[tail], 99) / pct(git[tail], 99):>8.2f}x"
        )
    for v in variants:
        path = getattr(v, "path", None) or getattr(v, "repo", None) or v.home / "sessions/s"
        sizes = []
        for part in (path, path / ".git", path / ".state"):
            du = subprocess.run(["du", "-sh", str(part)], capture_output=True, text=True)
            sizes.append(du.stdout.split()[0] if du.stdout else "-")
        print(f"du {v.name}: {' / '.join(sizes)} (folder / .git / .state)")
    if isinstance(variants[1], Spike):
        commit_ways(variants[1].path)


def commit_ways(path: Path, samples: int = 60) -> None:
    """How one commit and one ref move are made, interleaved, on the long session."""
    from git import Repo
    from git.objects import Commit, Tree
    from gitdb.db import GitDB
    from spikes.sqlite_store import ACTOR

    with warnings.catch_warnings():  # GitPython 3.2 deprecates odbt=GitDB
        warnings.simplefilter("ignore", DeprecationWarning)
        fast = Repo(path, odbt=GitDB)
    plain = Repo(path)
    head = fast.git.rev_parse("HEAD")
    tree = fast.git.rev_parse("HEAD^{tree}")
    parent = [Commit(fast, bytes.fromhex(head))]
    session = SpikeSession(path, keep=True)
    ways: dict[str, Callable[[int], object]] = {
        "Commit(...)._serialize, in memory (the pack's)": lambda i: Commit(
            fast,
            Commit.NULL_BIN_SHA,
            Tree(fast, bytes.fromhex(tree)),
            ACTOR,
            i,
            0,
            ACTOR,
            i,
            0,
            f"m{i}",
            parent,
            "UTF-8",
        )._serialize(io.BytesIO()),
        "Commit.create_from_tree, odbt=GitDB (deprecated)": lambda i: Commit.create_from_tree(
            fast,
            Tree(fast, bytes.fromhex(tree)),
            f"m{i}",
            parent,
            author=ACTOR,
            committer=ACTOR,
        ),
        "Commit.create_from_tree, default odb": lambda i: Commit.create_from_tree(
            plain,
            Tree(plain, bytes.fromhex(tree)),
            f"m{i}",
            [Commit(plain, parent[0].binsha)],
            author=ACTOR,
            committer=ACTOR,
        ),
        "repo.git.commit_tree (git commit-tree)": lambda i: plain.git.commit_tree(
            tree, "-p", head, "-m", f"m{i}", env=GIT_ENV
        ),
        "ref: lockfile + rename in-process": lambda i: session._move_ref(session._read_ref(), head),
        "ref: repo.git.update_ref (git update-ref)": lambda i: plain.git.update_ref(
            "refs/heads/main", head, head
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for i in range(samples):
        for name, way in ways.items():
            t = time.perf_counter()
            way(i)
            times[name].append((time.perf_counter() - t) * 1000)
    session.close()
    print(f"\none commit / one ref move on the {path.name} session, ms (median p10 p90 p99):")
    for name, ts in times.items():
        print(f"  {name:<48} {spread(ts)}")


# -- faults ----------------------------------------------------------------------------------
CHILD = r"""
import os, sys, json, time
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from spike_store_sqlite import spike_turn
from spikes.sqlite_store import SpikeSession, StoreError
done = open(DONE, "a") if DONE else None
session = SpikeSession(PATH, keep=True)
session.close()
print("ready", flush=True)
i = 0
while i < TURNS and not os.path.exists(STOP):
    session = SpikeSession(PATH, keep=True)
    try:
        spike_turn(session, i)
    except StoreError as exc:
        print("error:", exc, flush=True)
        break
    session.close()
    if done:
        done.write(f"{session._get('commit')}\n")
        done.flush()
    i += 1
print("alive after", i, "turns", flush=True)
"""

CURRENT_CHILD = r"""
import os, sys
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from bench_store import write_turn
from openprogram.store.session.store import SessionStore
store = SessionStore(HOME)
if not os.path.exists(os.path.join(HOME, "sessions", "s")):
    store.create_session(session_id="s")
i = 0
while i < TURNS:
    try:
        write_turn(store.open("s"), i)
    except Exception as exc:
        print("error:", type(exc).__name__, str(exc).splitlines()[0][:200], flush=True)
        break
    i += 1
store.close()
print("alive after", i, "turns", flush=True)
"""


def child(code: str, **values: Any) -> subprocess.Popen[str]:
    header = "".join(f"{k} = {v!r}\n" for k, v in {"ROOT": str(ROOT), **values}.items())
    return subprocess.Popen(
        [sys.executable, "-c", header + code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def spike_child(
    path: Path, turns: int, done: Path | None = None, stop: Path | None = None, **env: str
) -> subprocess.Popen[str]:
    header = {
        "PATH": str(path),
        "TURNS": turns,
        "DONE": str(done or ""),
        "STOP": str(stop or "/nonexistent"),
    }
    code = "".join(f"os.environ[{k!r}] = {v!r}\n" for k, v in env.items())
    return child("import os\n" + code + CHILD, **header)


def fsck(path: Path) -> str:
    args = [*GIT, "-C", str(path), "fsck", "--strict", "--no-dangling"]
    done = subprocess.run(args, capture_output=True, text=True)
    return (
        "clean"
        if done.returncode == 0 and not done.stdout.strip()
        else (f"rc {done.returncode}: {(done.stdout + done.stderr).strip()[:200]}")
    )


def git_commits(path: Path) -> set[str]:
    out = subprocess.run(
        [*GIT, "-C", str(path), "rev-list", "--all"], capture_output=True, text=True
    ).stdout
    return set(out.split())


def answers(path: Path) -> tuple[Any, ...]:
    s = SpikeSession(path)
    row = s.db.execute(
        "SELECT count(*), count(DISTINCT seq), max(seq), sum(tokens_in),"
        " sum(status = 'completed'), count(DISTINCT turn) FROM nodes"
    ).fetchone()
    head, commit = s.head_id(), s._get("commit")
    s.close()
    return (*row, head, commit)


def disk_full(work: Path) -> None:
    print("\n-- a disk that fills mid-turn (tmpfs of 2 MiB) --")
    for label in ("sqlite+pack", "current"):
        mount = work / f"full-{label.replace('+', '_')}"
        mount.mkdir()
        got = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
            capture_output=True,
            text=True,
        )
        if got.returncode:
            print(f"  cannot mount a tmpfs ({got.stderr.strip()}): skipped")
            return
        try:
            if label == "current":
                proc = child(CURRENT_CHILD, HOME=str(mount), TURNS=10_000)
                repo = mount / "sessions" / "s"
            else:
                proc = spike_child(mount / "s", 10_000)
                repo = mount / "s"
            out, err = proc.communicate(timeout=600)
            rc = proc.returncode
            how = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}"
            lines = [ln for ln in out.splitlines() if ln.startswith(("error", "alive"))]
            print(f"  {label:<12} {how}; {' | '.join(lines) or err.strip()[-200:]}")
            print(f"  {'':<12} fsck after: {fsck(repo)}; commits: {len(git_commits(repo))}")
            if label != "current":
                debris = [p.name for p in (repo / ".git" / "objects" / "pack").glob("tmp_*")]
                print(f"  {'':<12} tmp files left in objects/pack: {len(debris)}")
                subprocess.run(["mount", "-o", "remount,size=16m", str(mount)], check=True)
                session = SpikeSession(repo)
                states = dict(
                    session.db.execute("SELECT status, count(*) FROM nodes GROUP BY status")
                )
                try:
                    spike_turn(session, 10**6)
                    after = "the next turn committed"
                except StoreError as exc:
                    after = f"the next turn failed: {exc}"
                print(
                    f"  {'':<12} space freed, reopened: statuses {states}; {after};"
                    f" fsck {fsck(repo)}"
                )
                session.close()
        finally:
            subprocess.run(["umount", str(mount)], check=False)


def two_writers(work: Path, turns: int = 200) -> Path:
    print(f"\n-- two writers on one session, {turns} turns each --")
    path = work / "two"
    SpikeSession(path).close()
    done = work / "two.done"
    procs = [spike_child(path, turns, done) for _ in range(2)]
    outs = [p.communicate(timeout=900)[0].strip().splitlines()[-1] for p in procs]
    rows = answers(path)
    reported = set(done.read_text().split())
    commits = git_commits(path)
    print(f"  writers: {outs}")
    print(
        f"  nodes {rows[0]}, distinct seqs {rows[1]}, max seq {rows[2]}, turns {rows[5]};"
        f" commits {len(commits)}; reported commits missing from git:"
        f" {len(reported - commits)}; fsck {fsck(path)}"
    )
    return path


def rebuild(path: Path) -> None:
    print("\n-- the live database deleted between turns --")
    before = answers(path)
    for suffix in ("", "-wal", "-shm"):
        (path / ".state" / f"live.db{suffix}").unlink(missing_ok=True)
    t = time.perf_counter()
    SpikeSession(path).close()
    ms = (time.perf_counter() - t) * 1000
    after = answers(path)
    print(f"  rebuilt from git in {ms:.0f} ms ({before[0]} nodes); same answers: {before == after}")


def killed_in_ref_lock(work: Path, current_too: bool) -> None:
    print("\n-- a writer SIGKILLed while it holds git's ref lock --")
    path = work / "lockkill"
    SpikeSession(path).close()
    proc = spike_child(path, 5, SPIKE_PAUSE_IN_REF_LOCK="1")
    lines = []
    while (line := proc.stdout.readline() if proc.stdout else "") and "holding" not in line:
        lines.append(line)
    lock = path / ".git" / "refs" / "heads" / "main.lock"
    had_lock = lock.exists()
    proc.kill()
    proc.wait()
    t = time.perf_counter()
    session = SpikeSession(path)
    recovered = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    try:
        spike_turn(session, 99)
        result = f"next turn committed in {(time.perf_counter() - t) * 1000:.0f} ms"
    except StoreError as exc:
        result = f"next turn FAILED: {exc}"
    states = dict(session.db.execute("SELECT status, count(*) FROM nodes GROUP BY status"))
    print(
        f"  sqlite+pack: main.lock left: {had_lock}; open (recovery) {recovered:.0f} ms;"
        f" {result}; lock taken over: {session.takeovers}; statuses {states};"
        f" fsck {fsck(path)}"
    )
    session.close()
    if not current_too:
        return
    home = work / "lockkill-current"
    proc = child(CURRENT_CHILD, HOME=str(home), TURNS=3)
    proc.communicate(timeout=300)
    (home / "sessions" / "s" / ".git" / "refs" / "heads" / "main.lock").write_text("")
    t = time.perf_counter()
    proc = child(CURRENT_CHILD, HOME=str(home), TURNS=1)
    out, err = proc.communicate(timeout=300)
    print(
        f"  current: main.lock left by hand; next writer: {out.strip() or err[-200:]}"
        f" ({(time.perf_counter() - t) * 1000:.0f} ms, Python start included)"
    )


def kill_loop(work: Path, kills: int) -> None:
    print(f"\n-- one writer SIGKILLed {kills}x while another writes --")
    path = work / "kills"
    SpikeSession(path).close()
    done, stop = work / "kills.done", work / "kills.stop"
    survivor = spike_child(path, 10**9, done, stop)
    rng = random.Random(36)
    blocked = 0
    for _ in range(kills):
        t = time.perf_counter()
        victim = spike_child(path, 10**9, done)
        assert victim.stdout is not None
        victim.stdout.readline()  # "ready": opened (and recovered) the session
        if time.perf_counter() - t > 5:
            blocked += 1
        time.sleep(rng.uniform(0.0, 0.06))  # somewhere in its first turns
        victim.kill()
        victim.wait()
    stop.write_text("")
    survivor.communicate(timeout=300)
    commits = git_commits(path)
    reported = set(done.read_text().split())
    session = SpikeSession(path)  # recovery of the last victim
    states = dict(session.db.execute("SELECT status, count(*) FROM nodes GROUP BY status"))
    uncommitted = session.db.execute("SELECT count(*) FROM nodes WHERE dirty = 1").fetchone()
    session.close()
    commits = git_commits(path)
    print(
        f"  turns reported committed {len(reported)}, missing from git"
        f" {len(reported - commits)}; commits {len(commits)}; statuses after reopen"
        f" {states}; rows left uncommitted {uncommitted[0]}; opens over 5 s {blocked};"
        f" fsck {fsck(path)}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=50)
    default = Path.home() / ".cache" / "openprogram-bench" / "spike_store"
    parser.add_argument("--work", type=Path, default=default)
    parser.add_argument("--no-faults", action="store_true")
    parser.add_argument("--no-current-lock", action="store_true")
    parser.add_argument("--no-long", action="store_true")
    args = parser.parse_args(argv)
    home = Path(os.environ.get("OPENPROGRAM_HOME") or Path.home() / ".openprogram")
    work: Path = args.work.expanduser().resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.environ["OPENPROGRAM_HOME"] = str(work / "current")  # the current store's own home
    try:
        disk_report(work, home.expanduser())
        if not args.no_long:
            long_writers(work, args.turns)
        if not args.no_faults:
            disk_full(work)
            rebuild(two_writers(work))
            killed_in_ref_lock(work, not args.no_current_lock)
            kill_loop(work, args.kills)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
