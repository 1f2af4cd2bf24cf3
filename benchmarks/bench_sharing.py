"""Sharing speed (issue 9's targets), each side by side with its honest baseline.

    python benchmarks/bench_sharing.py [--quick] [--samples 5] [--only bundles|pull|replay|push]
                                        [--remote file|git]

1. Export + import of a 1,000-turn session (``--quick``: 200) vs ``git bundle create`` /
   ``git clone`` of the same repository.  Target: each ≤ 1.5× its baseline.  Then what the
   checks of what arrives cost (issue 19): ``git index-pack`` of the bundle's pack without
   checks, with ``--strict``, and the project's scan + ``--strict``; target: the added
   checks ≤ 20 % of an import.
2. Pull of 10 new turns from a remote holding 100 sessions vs the same pull from a remote
   holding only that session, and a plain ``git fetch`` of the ref.  Target: ≤ 1 s and
   independent of the number of other sessions (only the one ref is fetched).
3. Replay of a 200-call notebook (20 cells × 10 calls, headless, kernel start included)
   vs the same run with the offline ``test`` provider; and the same 200 calls in-process.
   Target: ≤ 1.2×.
4. Push and pull of 10 new turns (issue 35 item 10) side by side with ``git push`` /
   ``git fetch`` of the same commits from and into the same repository, each to a bare
   remote of its own, in a rotating order: in-process (``push`` / ``pull``) and as people
   type them (``openprogram sessions push|pull`` processes vs ``git push|fetch``
   processes; the cost of starting a Python beside them).  ``--remote git`` serves the
   remotes by ``git daemon`` on loopback instead of ``file://``.  Target: ≤ 2× each way.

Figures only (medians with min-max); no assertions.  ``--dir`` (default: next to
``OPENPROGRAM_HOME``, i.e. the disk sessions live on) says where the repositories are made;
the script prints it and what creating a file costs there (on these machines ``/root`` and
``/tmp`` differ by 10x).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_store import write_turn

from openprogram.store.session.history import repack
from openprogram.store.session.store import SessionStore
from openprogram.store.session.sync import export_bundle, import_bundle, pull, push


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def timed(fn: Callable[[int], object], samples: int) -> list[float]:
    out = []
    for i in range(samples):
        started = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - started) * 1000)
    return out


def row(label: str, values: list[float], base: list[float] | None = None) -> None:
    med = statistics.median(values)
    ratio = f"{med / statistics.median(base):5.2f}x" if base else "      "
    print(f"  {label:<46} {med:8.1f} ms  ({min(values):.1f}-{max(values):.1f})  {ratio}")


def bench_bundles(tmp: Path, turns: int, samples: int) -> None:
    home = tmp / "alice"
    store = SessionStore(home)
    session = store.create_session("s_big")
    started = time.perf_counter()
    for i in range(turns):
        write_turn(session, i)
    session.git.wait_for_repack(settle=False)
    repack(session.path / ".git")
    session.git.forget()
    built = time.perf_counter() - started
    print(f"1. export + import of a {turns}-turn session (built in {built:.0f} s)")
    path = session.path
    export = timed(lambda i: export_bundle(store, "s_big", tmp / f"e{i}.bundle"), samples)
    raw = timed(
        lambda i: git(path, "bundle", "create", "-q", str(tmp / f"g{i}.bundle"), "main"), samples
    )
    bundle = tmp / "e0.bundle"
    print(f"  bundle: {bundle.stat().st_size / 1024:.0f} KiB")
    # the baseline the issue names: git cloning the same bundle, with a full checkout
    # (a clone of the repository's path would hardlink its objects and index nothing);
    # interleaved with the imports, the ratio taken per sample
    ref = "refs/openprogram/sessions/s_big"
    imported, clone = [], []
    for i in range(samples):
        pair = [
            (imported, lambda i=i: import_bundle(SessionStore(tmp / f"bob{i}"), bundle)),
            (clone, lambda i=i: clone_bundle(bundle, ref, tmp / f"clone{i}")),
        ]
        for times, step in pair[i % 2 :] + pair[: i % 2]:
            started = time.perf_counter()
            step()
            times.append((time.perf_counter() - started) * 1000)
    row("git bundle create", raw)
    row("openprogram sessions export", export, raw)
    row("git clone of the bundle (with checkout)", clone)
    row("openprogram sessions import (checked)", imported, clone)
    ratios = sorted(a / b for a, b in zip(imported, clone, strict=True))
    print(f"    per-sample ratio: median {statistics.median(ratios):.2f}x "
          f"({ratios[0]:.2f}-{ratios[-1]:.2f}); load {load()}")  # fmt: skip
    store.close()
    bench_checks(tmp, bundle, samples, imported)


def clone_bundle(bundle: Path, ref: str, target: Path) -> None:
    """What ``git clone BUNDLE`` does, for a bundle whose one ref is not a branch: a new
    repository, the ref fetched from the bundle, a full checkout."""
    git(target.parent, "init", "-q", str(target))
    git(target, "fetch", "-q", str(bundle), f"{ref}:refs/heads/main")
    git(target, "checkout", "-q", "main")


def bench_checks(tmp: Path, bundle: Path, samples: int, imported: list[float]) -> None:
    from openprogram.store.session.incoming import Caps, index_pack, read_bundle_header
    from openprogram.store.session.safegit import init_repository

    with bundle.open("rb") as f:
        read_bundle_header(f)
        pack = f.read()

    def git_index(i: int, *flags: str) -> None:
        repo = tmp / f"ip{flags}{i}".replace(" ", "")
        init_repository(repo)
        subprocess.run(
            ["git", "index-pack", *flags, "--stdin"], cwd=repo, input=pack, check=True,
            capture_output=True, env={"GIT_DIR": str(repo / ".git"), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip

    def ours(i: int) -> None:
        repo = tmp / f".incoming-ours{i}"
        init_repository(repo)
        with bundle.open("rb") as f:
            read_bundle_header(f)
            index_pack(repo, f, Caps())

    plain = timed(lambda i: git_index(i), samples)
    strict = timed(lambda i: git_index(i, "--strict"), samples)
    checked = timed(ours, samples)
    row("git index-pack of the pack (no checks)", plain)
    row("git index-pack --strict", strict, plain)
    row("caps scan + index-pack --strict (import's)", checked, plain)
    added = statistics.median(checked) - statistics.median(plain)
    share = added / statistics.median(imported)
    print(f"  added checks: {added:.1f} ms = {share:.0%} of an import")


def bench_pull(tmp: Path, samples: int) -> None:
    """Interleaved: each sample makes 10 new turns, pushes them to both remotes, then times
    ``git fetch`` of those commits into a clone and the two pulls of them, in a rotating
    order (so a change of the machine's load reaches all three alike); the ratio is taken
    per sample, then its median."""
    print(f"2. pull of 10 new turns (interleaved with git fetch; load {load()})")
    crowd = tmp / "crowd.git"
    alone = tmp / "alone.git"
    for remote in (crowd, alone):
        git(tmp, "init", "-q", "--bare", str(remote))
    others = SessionStore(tmp / "others")
    for k in range(99):
        sid = f"s_other{k:03d}"
        other = others.create_session(sid)
        for i in range(3):
            write_turn(other, i)
        push(others, sid, f"file://{crowd}", "file")
    others.close()
    alice = SessionStore(tmp / "a")
    session = alice.create_session("s_team")
    for i in range(50):
        write_turn(session, i)
    remotes = {"alone": f"file://{alone}", "crowd": f"file://{crowd}"}
    pullers = {}
    for name, url in remotes.items():
        push(alice, "s_team", url, "file")
        pullers[name] = SessionStore(tmp / f"b-{name}")
        pull(pullers[name], "s_team", url, "file")
    # baseline: git fetching the same ref (the same 10 new turns) into a clone of the session
    clone = tmp / "raw-clone"
    git(tmp, "clone", "-q", str(session.path), str(clone))
    ref = "refs/openprogram/sessions/s_team"

    def fetch() -> None:
        git(clone, "fetch", "-q", remotes["crowd"], f"+{ref}:refs/remotes/x")

    def pull_from(name: str) -> Callable[[], None]:
        def run() -> None:
            got = pull(pullers[name], "s_team", remotes[name], "file")
            assert got.new_turns == 10, got

        return run

    steps = {"fetch": fetch, "alone": pull_from("alone"), "crowd": pull_from("crowd")}
    times: dict[str, list[float]] = {name: [] for name in steps}
    order = list(steps)
    for k in range(samples):
        for i in range(10):
            write_turn(session, 1000 + 10 * k + i)
        for url in remotes.values():
            push(alice, "s_team", url, "file")
        for name in order[k % 3 :] + order[: k % 3]:
            started = time.perf_counter()
            steps[name]()
            times[name].append((time.perf_counter() - started) * 1000)
    raw = times["fetch"]
    row("git fetch of the one ref (100 sessions)", raw)
    for name, label in (("alone", "remote holding only this session"),
                        ("crowd", "remote holding 100 sessions")):  # fmt: skip
        row(f"pull from a {label}"[:46], times[name], raw)
        ratios = sorted(t / r for t, r in zip(times[name], raw, strict=True))
        print(f"    per-sample ratio: median {statistics.median(ratios):.2f}x "
              f"({ratios[0]:.2f}-{ratios[-1]:.2f})")  # fmt: skip
    print(f"  load after: {load()}")
    alice.close()
    for store in pullers.values():
        store.close()


def bench_push_pull(tmp: Path, samples: int, transport: str) -> None:
    """Each sample: Alice writes 10 turns; then, in a rotating order, the same 10 commits
    go out by ``git push`` (from her session's repository), by :func:`push` and by
    ``openprogram sessions push`` (each to its own bare remote, which all hold the same
    history before), and come in by ``git fetch`` (into a clone of Bob's session), by
    :func:`pull` and by ``openprogram sessions pull`` (into Bob's home of that remote)."""
    from openprogram.sharing import allow_protocol

    print(f"4. push and pull of 10 new turns, side by side ({transport}; load {load()})")
    protocols = allow_protocol(from_notebook=False)
    ref = "refs/openprogram/sessions/s_team"
    names = ("git", "api", "cli")
    bare = {name: tmp / "remotes" / f"{name}.git" for name in names}
    for path in bare.values():
        git(tmp, "init", "-q", "--bare", str(path))
        git(path, "config", "receive.unpackLimit", "1")  # as pushes to a host keep a pack
    alice = SessionStore(tmp / "alice-home")
    session = alice.create_session("s_team")
    for i in range(50):
        write_turn(session, i)
    homes = {name: tmp / f"bob-{name}" for name in names}
    with _served(tmp / "remotes", transport) as prefix:
        url = {name: f"{prefix}/{name}.git" for name in names}
        for name in names:
            push(alice, "s_team", url[name], protocols)
            pull(SessionStore(homes[name]), "s_team", url[name], protocols)
        clone = tmp / "bob-raw"
        git(tmp, "clone", "-q", "--bare", str(session.path), str(clone))
        git(clone, "fetch", "-q", url["git"], f"+{ref}:{ref}")
        # the processes read compiled bytecode, as an installed package does (this machine
        # sets PYTHONDONTWRITEBYTECODE, which makes every start compile every module)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(OPENPROGRAM_HOME=str(homes["cli"]), PYTHONPYCACHEPREFIX=str(tmp / "pyc"))
        cli = [sys.executable, "-m", "openprogram.cli", "sessions"]
        subprocess.run([*cli, "list"], env=env, check=True, capture_output=True)  # compiles

        def run(argv: list[str], cwd: Path, home: Path | None = None) -> None:
            where = dict(env, OPENPROGRAM_HOME=str(home)) if home else env
            subprocess.run(argv, cwd=cwd, env=where, check=True, capture_output=True)

        bob_api = SessionStore(homes["api"])
        steps: dict[str, dict[str, Callable[[], object]]] = {
            "push": {
                "git push": lambda: git(session.path, "push", "-q", url["git"], f"main:{ref}"),
                "push()": lambda: push(alice, "s_team", url["api"], protocols),
                "openprogram sessions push": lambda: run(
                    [*cli, "push", "s_team", url["cli"]], tmp, alice.home
                ),
            },
            "pull": {
                "git fetch": lambda: git(clone, "fetch", "-q", url["git"], f"+{ref}:{ref}"),
                "pull()": lambda: pull(bob_api, "s_team", url["api"], protocols),
                "openprogram sessions pull": lambda: run([*cli, "pull", "s_team", url["cli"]], tmp),
            },
        }
        times = {label: [] for way in steps.values() for label in way}
        starts: list[float] = []
        for k in range(samples):
            for i in range(10):
                write_turn(session, 2000 + 10 * k + i)
            for way in steps.values():
                order = list(way)
                for label in order[k % 3 :] + order[: k % 3]:
                    started = time.perf_counter()
                    way[label]()
                    times[label].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
            starts.append((time.perf_counter() - started) * 1000)
        for name in names:  # every remote and Bob got the same history
            assert _tip(bare[name], ref) == _tip(session.path, "refs/heads/main"), name
        assert _tip(clone, ref) == _tip(session.path, "refs/heads/main")
        bob_api.close()
    for base, *ours in (list(way) for way in steps.values()):
        row(base, times[base])
        for label in ours:
            row(label, times[label], times[base])
            ratios = sorted(t / r for t, r in zip(times[label], times[base], strict=True))
            print(f"    per-sample ratio: median {statistics.median(ratios):.2f}x "
                  f"({ratios[0]:.2f}-{ratios[-1]:.2f})")  # fmt: skip
    row("python -c pass (a process's start)", starts)
    print(f"  load after: {load()}")
    alice.close()


def _tip(repo: Path, ref: str) -> str:
    out = subprocess.run(["git", "rev-parse", ref], cwd=repo, capture_output=True, text=True)
    return out.stdout.strip()


@contextmanager
def _served(root: Path, transport: str) -> Iterator[str]:
    """``file://ROOT``, or ``git daemon`` serving ROOT on loopback (pushes allowed)."""
    if transport == "file":
        yield f"file://{root}"
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    daemon = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", f"--base-path={root}", "--export-all",
         "--enable=receive-pack", "--listen=127.0.0.1", f"--port={port}", str(root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(400):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.025)  # the daemon's start: nothing to wait on but its port
        yield f"git://127.0.0.1:{port}"
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


NOTEBOOK_CELLS = 20
CALLS_PER_CELL = 10


def replay_notebook(path: Path) -> None:
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    cells = [
        new_code_cell("%load_ext openprogram_magics\n%openprogram provider test"),
        new_code_cell(
            "from openprogram import agentic_function\n\n"
            "@agentic_function\n"
            "def ask(question: str, runtime=None) -> str:\n"
            '    """Answer in one line."""\n'
            "    return runtime.exec(question)\n"
        ),
    ]
    for c in range(NOTEBOOK_CELLS):
        cells.append(
            new_code_cell(
                f"%%openprogram\n[ask(f'cell {c} question {{k}}') for k in range({CALLS_PER_CELL})]"
            )
        )
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


def bench_replay(tmp: Path, samples: int) -> None:
    from openprogram_magics.headless import run_notebook

    calls = NOTEBOOK_CELLS * CALLS_PER_CELL
    print(f"3. a {calls}-call notebook, headless (kernel start included)")
    os.environ["OPENPROGRAM_HOME"] = str(tmp / "replay-home")
    source = tmp / "calls.ipynb"
    replay_notebook(source)
    recorded = tmp / "recorded.ipynb"
    run_notebook(source, recorded)  # the recording
    meta = json.loads(recorded.read_text())["metadata"]

    def fresh(i: int, name: str) -> Path:
        target = tmp / f"{name}{i}.ipynb"
        data = json.loads(source.read_text())
        data["metadata"] = dict(meta) if name == "replay" else {"kernelspec": meta["kernelspec"]}
        target.write_text(json.dumps(data))
        return target

    test_runs = timed(lambda i: run_notebook(fresh(i, "test")), samples)
    replays = []
    for i in range(samples):
        path = fresh(i, "replay")
        started = time.perf_counter()
        result = run_notebook(path, replay=True)
        replays.append((time.perf_counter() - started) * 1000)
        assert result.error is None, result.error
    row("openprogram run (test provider)", test_runs)
    row("openprogram run --replay", replays, test_runs)
    in_process(tmp, samples)


def in_process(tmp: Path, samples: int) -> None:
    from openprogram import agentic_function
    from openprogram.providers import create_runtime
    from openprogram.providers.replay import ReplayProvider
    from openprogram.store.session import session_context

    @agentic_function
    def ask(question: str, runtime=None) -> str:  # type: ignore[no-untyped-def]
        """Answer in one line."""
        return str(runtime.exec(question))

    store = SessionStore(tmp / "inproc")
    calls = NOTEBOOK_CELLS * CALLS_PER_CELL

    def run(runtime: object, sid: str) -> None:
        for c in range(NOTEBOOK_CELLS):
            with session_context(sid, db=store, runtime=runtime, message=f"cell {c}"):  # type: ignore[arg-type]
                for k in range(CALLS_PER_CELL):
                    ask(f"cell {c} question {k}")

    run(create_runtime("test"), "s_recorded")
    test = timed(lambda i: run(create_runtime("test"), f"s_t{i}"), samples)
    replay = timed(
        lambda i: run(create_runtime(ReplayProvider("s_recorded", db=store)), f"s_r{i}"), samples
    )
    row(f"{calls} calls in-process, test provider", test)
    row(f"{calls} calls in-process, replay", replay, test)
    store.close()


def file_cost(where: Path) -> float:
    """Median ms to create a small file in a fresh folder of ``where``'s disk."""
    with tempfile.TemporaryDirectory(dir=where) as d:
        times = []
        for i in range(200):
            started = time.perf_counter()
            (Path(d) / f"f{i}").write_bytes(b"x" * 600)
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--only", choices=["bundles", "pull", "replay", "push"], help="one section")
    parser.add_argument("--dir", help="where to make the repositories (default: beside "
                        "OPENPROGRAM_HOME, ~/.openprogram)")  # fmt: skip
    parser.add_argument("--remote", choices=["file", "git"], default="file",
                        help="section 4's remotes: file:// or git daemon on loopback")  # fmt: skip
    args = parser.parse_args(argv)
    samples = 3 if args.quick else args.samples
    home = Path(os.environ.get("OPENPROGRAM_HOME") or Path.home() / ".openprogram")
    where = Path(args.dir) if args.dir else home.parent
    where.mkdir(parents=True, exist_ok=True)
    print(f"repositories under {where}: {file_cost(where):.2f} ms to create a file there")
    # a detached maintenance may still be writing in a session when the run ends
    with tempfile.TemporaryDirectory(
        prefix="bench-sharing-", dir=where, ignore_cleanup_errors=True
    ) as tmp:
        if args.only in (None, "bundles"):
            bench_bundles(Path(tmp), 200 if args.quick else 1000, samples)
        if args.only in (None, "pull"):
            bench_pull(Path(tmp), samples)
        if args.only in (None, "replay"):
            bench_replay(Path(tmp), 3 if args.quick else min(samples, 3))
        if args.only in (None, "push"):
            bench_push_pull(Path(tmp), samples, args.remote)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
