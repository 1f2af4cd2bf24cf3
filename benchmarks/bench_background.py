"""Starting a background run and seeing its first progress update (target ≤ 1 s).

    python benchmarks/bench_background.py [--rounds 20]

1. Engine: ``openprogram.background(fn)`` → the first progress callback (the run's first
   node write), beside the baseline of starting a plain ``threading.Thread`` and
   hearing from it.
2. Notebook: ``%%openprogram --background`` in an IPython shell → the cell returns, and
   → the first progress display (the line under the cell) — with a fresh session each
   round, so the session's creation (git init) is included.
3. The spawned-process alternative: ``process_runner``'s spawn cost (a child Python
   importing openprogram), for comparison.

Medians with the interquartile range; figures only, no assertions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openprogram import agentic_function, background, create_runtime
from openprogram.providers.test import TestProvider


def stats(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4)
    return f"{statistics.median(values):8.2f} ms  (IQR {q[0]:.2f}-{q[2]:.2f})"


@agentic_function
def work(runtime=None) -> str:  # type: ignore[no-untyped-def]
    """Do the work."""
    return str(runtime.exec("go"))


def engine_round() -> tuple[float, float]:
    heard = threading.Event()
    t0 = time.perf_counter()
    run = background(
        work, runtime=create_runtime(TestProvider()), on_progress=lambda p: heard.set()
    )
    heard.wait(10)
    first = (time.perf_counter() - t0) * 1000
    run.wait(10)
    t0 = time.perf_counter()
    plain = threading.Event()
    threading.Thread(target=plain.set).start()
    plain.wait(10)
    return first, (time.perf_counter() - t0) * 1000


def notebook_round(shell: object) -> tuple[float, float]:
    from openprogram_magics.cells.background import MIME_PROGRESS

    ip = shell.ip  # type: ignore[attr-defined]
    outputs = shell.display.outputs  # type: ignore[attr-defined]
    ip.run_line_magic("openprogram", "new")
    before = len(outputs)
    t0 = time.perf_counter()
    ip.run_cell("%%openprogram --background --no-dag\nwork()")
    returned = (time.perf_counter() - t0) * 1000
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        updates = [o for o in outputs[before:] if MIME_PROGRESS in o["data"]]
        if any(
            o["data"][MIME_PROGRESS]["calls"] or o["data"][MIME_PROGRESS]["stage"] for o in updates
        ):
            break
        time.sleep(0.0005)
    first = (time.perf_counter() - t0) * 1000
    shell.magics.background.wait(10)  # type: ignore[attr-defined]
    return returned, first


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    home = tempfile.mkdtemp(prefix="op-bench-bg-")
    os.environ["OPENPROGRAM_HOME"] = home
    firsts, plains = zip(*(engine_round() for _ in range(args.rounds + 2)), strict=True)
    print(f"engine: background() -> first progress   {stats(list(firsts[2:]))}")
    print(f"baseline: plain thread start -> heard     {stats(list(plains[2:]))}")

    from IPython.core.interactiveshell import InteractiveShell

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.test_magics import make_shell

    shell = make_shell(Path(tempfile.mkdtemp(prefix="op-bench-ipy-")))
    shell.ip.user_ns["work"] = work
    try:
        rows = [notebook_round(shell) for _ in range(args.rounds + 2)][2:]
    finally:
        InteractiveShell.clear_instance()
    print(f"notebook: cell returns                    {stats([r for r, _ in rows])}")
    print(f"notebook: first progress line with a stage {stats([f for _, f in rows])}  (≤ 1000)")

    spawn = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import openprogram"], check=True)
        spawn.append((time.perf_counter() - t0) * 1000)
    print(f"for comparison: spawning a child that imports openprogram {stats(spawn)}")


if __name__ == "__main__":
    main()
