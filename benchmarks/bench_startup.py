"""How long the command line takes to start, beside the interpreter itself (issue 38's target:
``openprogram --version`` ≤ 3× ``python -c pass``, measured side by side).

    python benchmarks/bench_startup.py [--rounds 20] [--top 15]

1. ``python -c pass``, ``python -c "import openprogram"`` and ``openprogram --version`` (the
   console script installed beside this interpreter; ``python -m openprogram.cli`` when
   there is none), each run ``--rounds`` times, interleaved (one of each per round, the
   order rotating), so a loaded machine slows all three alike.  Printed: the median, the
   spread (interquartile range, min-max) and each median as a multiple of ``python -c
   pass``'s — the ratio is the figure that means something on a shared machine.
2. ``python -X importtime`` of ``import openprogram`` and of the CLI's ``--version``: the
   ``--top`` imports by cumulative time (the interpreter's own start-up, ``site`` and what
   its ``.pth`` files import, is listed apart: no package can make it cheaper), and the
   heavy modules the start pulled in — there should be none.

A shim in front of the script (pyenv's is a bash script that runs ``pyenv exec``) is not
measured: the figure is the package's, not the shim's.  Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HEAVY = (
    "anthropic",
    "genai_prices",
    "git",
    "httpx",
    "IPython",
    "ipywidgets",
    "jsonschema",
    "nbformat",
    "numpy",
    "openai",
    "orjson",
    "pydantic",
    "zmq",
)


def cli_command() -> list[str]:
    """The ``openprogram`` console script beside this interpreter (a venv's, the
    installation's), else ``python -m openprogram.cli``."""
    beside = Path(sys.executable).with_name("openprogram")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("openprogram")
    if found and "shims" not in Path(found).parts:
        return [found]
    return [sys.executable, "-m", "openprogram.cli"]


def commands() -> dict[str, list[str]]:
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import openprogram'": [sys.executable, "-c", "import openprogram"],
        "openprogram --version": [*cli_command(), "--version"],
    }


def clock(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def timings(rounds: int, env: dict[str, str]) -> dict[str, list[float]]:
    named = commands()
    names = list(named)
    for argv in named.values():  # warm the file cache once each: not measured
        clock(argv, env)
    seen: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            seen[name].append(clock(named[name], env))
    return seen


def spread_table(seen: dict[str, list[float]]) -> list[str]:
    base = statistics.median(seen["python -c pass"])
    lines = [
        f"{'command':<32} {'median':>8} {'IQR':>15} {'min-max':>15} {'× pass':>7}",
    ]
    for name, values in seen.items():
        ms = sorted(v * 1000 for v in values)
        q1, _, q3 = statistics.quantiles(ms, n=4)
        median = statistics.median(ms)
        lines.append(
            f"{name:<32} {median:>6.0f}ms {q1:>6.0f}-{q3:<6.0f}ms {ms[0]:>6.0f}-{ms[-1]:<6.0f}ms "
            f"{median / (base * 1000):>6.2f}x"
        )
    return lines


def import_times(argv: list[str], env: dict[str, str]) -> list[tuple[str, int, int]]:
    """``(module, self µs, cumulative µs)`` of each import ``python -X importtime`` reports."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, total, name = line.removeprefix("import time:").split("|")
        rows.append((name.rstrip(), int(own), int(total)))
    return rows


def top_imports(title: str, rows: list[tuple[str, int, int]], top: int) -> list[str]:
    """The interpreter's start (``site`` and everything under it: the rows before it, at
    deeper levels) apart, then the ``top`` slowest imports of what follows."""
    site_end = next((i for i, (name, _, _) in enumerate(rows) if name.strip() == "site"), -1)
    start = rows[: site_end + 1]
    ours = rows[site_end + 1 :]
    start_ms = sum(own for _, own, _ in start) / 1000
    ours_ms = sum(own for _, own, _ in ours) / 1000
    lines = [
        f"{title}: the interpreter's start (site, .pth files) {start_ms:.0f} ms, "
        f"then {ours_ms:.0f} ms in {len(ours)} imports; slowest (cumulative):"
    ]
    for name, own, total in sorted(ours, key=lambda r: -r[2])[:top]:
        lines.append(f"  {total / 1000:>7.1f} ms  (self {own / 1000:>5.1f})  {name}")
    loaded = {name.strip() for name, _, _ in ours}
    heavy = sorted(m for m in HEAVY if m in loaded)
    lines.append(f"  heavy modules imported: {', '.join(heavy) or 'none'}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print(f"start-up, {args.rounds} interleaved rounds ({sys.executable})")
    for line in spread_table(timings(args.rounds, env)):
        print(line)
    print()
    for line in top_imports(
        "import openprogram", import_times(["-c", "import openprogram"], env), args.top
    ):
        print(line)
    print()
    cli = [
        "-c",
        "import sys; from openprogram.cli import main; sys.argv[1:] = ['--version']; main()",
    ]
    for line in top_imports("openprogram --version", import_times(cli, env), args.top):
        print(line)


if __name__ == "__main__":
    main()
