"""The Jupyter extension's cost (issue 4's targets), printed as tables.

    python benchmarks/bench_magics.py [--quick] [--cells 200] [--turns 1000] [--loads 7]

1. ``%load_ext openprogram_magics`` in a fresh process that already has what a kernel has
   loaded (ipykernel, an InteractiveShell): the in-process cost of the magic, median of
   ``--loads`` fresh processes, plus which heavy modules (SDKs, widgets, git, pydantic)
   the load imported — there should be none.  Target: ≤ 150 ms added.
2. ``--cells`` ``%%openprogram`` cells that call one agentic function (test provider), the
   same call in a plain cell (with the extension loaded that is a turn of the notebook's
   session too), and the honest baseline — a truly plain cell calling an undecorated
   function that returns the same answer — interleaved in one InteractiveShell (the order
   rotates each round), with the notebook's session pre-built to ``--turns`` turns through
   the store.  Reported: the median per-cell time of each and the median of the paired
   differences against the baseline (the overhead), with the live DAG widget off and on
   (on: anywidget without a frontend, as far as it goes).  Target: ≤ 15 ms median
   overhead at 1,000 turns.

Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HEAVY = ("openai", "anthropic", "anywidget", "ipywidgets", "git", "pydantic", "jsonschema")

LOAD_PROBE = """
import json, sys, time
import ipykernel.ipkernel  # what a kernel process has loaded before any cell
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
before = set(sys.modules)
t = time.perf_counter()
ip.run_line_magic("load_ext", "openprogram_magics")
ms = (time.perf_counter() - t) * 1000
new = set(sys.modules) - before
HEAVY = HEAVY_NAMES
print(json.dumps({"ms": ms, "heavy": sorted(m for m in HEAVY if m in new),
                  "openprogram": "openprogram" in new, "modules": len(new)}))
""".replace("HEAVY_NAMES", repr(HEAVY))

AGENT = '''
from openprogram import agentic_function

@agentic_function
def triage(ticket: str, runtime=None) -> str:
    """Classify the support ticket as bug, feature or question."""
    return runtime.exec(ticket, choices=["bug", "feature", "question"])

def triage_plain(ticket: str) -> str:
    return "bug"
'''


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["OPENPROGRAM_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


# -- 1. %load_ext --------------------------------------------------------------------------
def bench_load(loads: int, home: Path) -> None:
    env = _env(home)
    runs = []
    for _ in range(loads):
        out = subprocess.run(
            [sys.executable, "-c", LOAD_PROBE], capture_output=True, text=True, env=env, check=True
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    ms = [r["ms"] for r in runs]
    heavy = sorted({m for r in runs for m in r["heavy"]})
    print("1. %load_ext openprogram_magics in a fresh process (ipykernel + shell loaded)")
    print(f"   {'runs':<34} {loads}")
    print(
        f"   {'added, median (min-max)':<34} {statistics.median(ms):.1f} ms "
        f"({min(ms):.1f}-{max(ms):.1f})   target <= 150 ms"
    )
    print(f"   {'modules imported by the load':<34} {runs[0]['modules']}")
    print(f"   {'engine (openprogram) imported':<34} {runs[0]['openprogram']}")
    print(f"   {'SDK / widget / git / pydantic':<34} {', '.join(heavy) or 'none'}")
    # -X importtime cross-check: the same load, what the import system says
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", LOAD_PROBE],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    seen = [
        line.split("|")[-1].strip()
        for line in out.stderr.splitlines()
        if line.startswith("import time:") and line.split("|")[-1].strip().split(".")[0] in HEAVY
    ]
    print(f"   {'-X importtime: heavy top-levels':<34} {', '.join(sorted(set(seen))) or 'none'}")


# -- 2. cells ------------------------------------------------------------------------------
def build_session(sid: str, turns: int) -> None:
    """A ``turns``-turn notebook session written through the store (turn/function/llm)."""
    from openprogram.agent.session_db import default_db
    from openprogram.context.nodes import COMPLETED, make_call

    db = default_db()
    session = db.create_session(sid, source="notebook")
    for i in range(turns):
        turn = session.begin_turn()
        cell = make_call("turn", f"cell [{i}]", input={"text": f'%%openprogram\ntriage("t{i}")'})
        session.append(cell, turn=turn, advance_head=True)
        fn = make_call("function", "triage", input={"ticket": f"t{i}"}, caller=cell.id)
        session.append(fn, turn=turn)
        llm = make_call("llm", "test", input={"content": f"t{i}", "attempt": 1}, caller=fn.id)
        session.append(llm, turn=turn)
        for node, out in ((llm, "bug"), (fn, "bug"), (cell, "'bug'")):
            node.output = out
            node.metadata["status"] = COMPLETED
            session.update(node)
        session.commit(f"turn {turn}: triage")
    db.close()


class _Sink:
    """A display publisher that keeps only the last output (the bench shows nothing)."""

    def __init__(self) -> None:
        from IPython.core.displaypub import DisplayPublisher

        class Pub(DisplayPublisher):  # type: ignore[misc]
            count = 0

            def publish(self, data: Any, metadata: Any = None, *args: Any, **kwargs: Any) -> None:
                Pub.count += 1

        self.pub = Pub()


def bench_cells(cells: int, turns: int, home: Path, *, live: bool) -> dict[str, float]:
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from openprogram.agent.session_db import default_db

    sid = f"nb_bench{turns}"
    if not default_db().exists(sid):
        started = time.perf_counter()
        build_session(sid, turns)
        print(f"   (built {sid}: {turns} turns in {time.perf_counter() - started:.1f} s)")
    InteractiveShell.clear_instance()
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    ip = InteractiveShell.instance(config=config)
    ip.display_pub = _Sink().pub
    if live:  # the live view is drawn only in a kernel: pretend (its comms go nowhere)
        setattr(ip, "kernel", types.SimpleNamespace())  # noqa: B010
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        ip.run_line_magic("load_ext", "openprogram_magics")
        ip.run_line_magic("openprogram", "provider test")
        magics = ip.magics_manager.registry["OpenProgramMagics"]  # type: ignore[union-attr]
        magics.live_dag = live
        ip.run_line_magic("openprogram", f"use {sid}")
        ip.run_cell(AGENT)
        os.environ["OPENPROGRAM_PROVIDER"] = "test"  # plain cells: the same provider
        for i in range(5):  # warm up every path
            ip.run_cell(f'%%openprogram\ntriage("warm {i}")', store_history=True)
            ip.run_cell(f'triage("warm {i}")', store_history=True)
            ip.run_cell(f'triage_plain("warm {i}")', store_history=True)
        times: dict[str, list[float]] = {"op": [], "plain": [], "base": []}
        order = list(times)
        for i in range(cells):
            for kind in order[i % 3 :] + order[: i % 3]:
                code = {
                    "op": f'%%openprogram\ntriage("ticket {i}")',
                    "plain": f'triage("ticket {i}")',
                    "base": f'triage_plain("ticket {i}")',
                }[kind]
                t = time.perf_counter()
                result = ip.run_cell(code, store_history=True)
                dt = (time.perf_counter() - t) * 1000
                if not result.success:
                    raise RuntimeError(f"bench cell failed: {result.error_in_exec!r}")
                times[kind].append(dt)
    os.environ.pop("OPENPROGRAM_PROVIDER", None)
    session = default_db().open(sid)
    n_turns = sum(1 for e in session.index() if e["kind"] == "turn")
    InteractiveShell.clear_instance()
    base = times["base"]
    diffs = [a - b for a, b in zip(times["op"], base, strict=True)]
    plain_diffs = [a - b for a, b in zip(times["plain"], base, strict=True)]
    return {
        "op": statistics.median(times["op"]),
        "plain": statistics.median(times["plain"]),
        "base": statistics.median(base),
        "overhead": statistics.median(diffs),
        "p90": sorted(diffs)[int(len(diffs) * 0.9)],
        "plain_overhead": statistics.median(plain_diffs),
        "turns_after": n_turns,
    }


def profile_cells(cells: int, turns: int, home: Path) -> None:  # pragma: no cover - manual
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    bench_cells(cells, turns, home, live=False)
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_magics")
    parser.add_argument("--quick", action="store_true", help="50 cells, 3 loads")
    parser.add_argument("--cells", type=int, default=200)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--loads", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="cProfile the cell loop")
    args = parser.parse_args(argv if argv is not None else sys.argv[1:])
    if args.quick:
        args.cells, args.loads = 50, 3
    with tempfile.TemporaryDirectory(prefix="bench_magics_") as tmp:
        home = Path(tmp) / "home"
        os.environ["OPENPROGRAM_HOME"] = str(home)
        if args.profile:
            profile_cells(args.cells, args.turns, home)
            return
        bench_load(args.loads, home)
        print()
        print(
            f"2. {args.cells} rounds: a %%openprogram cell and a plain cell calling one agentic "
            f"function, and a truly plain cell calling an undecorated one; session at "
            f"{args.turns} turns"
        )
        print(
            f"   {'live DAG':<10} {'%%openprogram':>14} {'plain+agentic':>14} {'undecorated':>12} "
            f"{'overhead (median)':>18} {'p90':>8} {'plain+agentic over':>19}   target <= 15 ms"
        )
        for live in (False, True):
            try:
                r = bench_cells(args.cells, args.turns, home, live=live)
            except Exception as exc:  # the widget may not work without a frontend
                print(f"   {'on' if live else 'off':<10} unavailable: {type(exc).__name__}: {exc}")
                continue
            print(
                f"   {'on' if live else 'off':<10} {r['op']:>11.2f} ms {r['plain']:>11.2f} ms "
                f"{r['base']:>9.2f} ms {r['overhead']:>15.2f} ms {r['p90']:>5.2f} ms "
                f"{r['plain_overhead']:>16.2f} ms"
            )
        from openprogram.agent.session_db import default_db

        default_db().close()


if __name__ == "__main__":
    main()
