"""``@agentic_function`` overhead and prompt rendering (issue 3's speed targets).

    python benchmarks/bench_agentic.py [--quick] [--turns 1000] [--rounds 40]

1. Per-call overhead with a store installed and no LLM, medians in µs, measured side by
   side in the same run (variants interleaved round by round, so machine noise hits all of
   them alike): an undecorated call, ``@agentic_function`` flat and three nested levels,
   and an OpenTelemetry in-memory span (TracerProvider + SimpleSpanProcessor +
   InMemorySpanExporter) flat and nested.  Targets: ≤ 50 µs flat, ≤ 150 µs nested.
   The agentic calls keep "nothing lost if the process is killed": every node event is one
   journal line written before the call returns (the table shows lines per call).
2. Rendering the prompt for an exec at a 1,000-turn session built through the store (one
   ``session_context`` turn per call, each a function node with an llm child), warm (same
   process) and cold (a fresh ``SessionStore``), and a whole ``runtime.exec`` with the
   ``test`` provider at that size.  Target: render ≤ 20 ms.

Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openprogram import agentic_function, create_runtime, session_context
from openprogram.agentic_programming.runtime import Runtime
from openprogram.providers.test import TestProvider
from openprogram.store.session.store import SessionStore

CALLS_PER_ROUND = 100  # calls timed per variant per round (one session turn each)


# -- the measured functions ------------------------------------------------------------------
def plain(x: int, label: str = "a") -> int:
    return x


def plain3(x: int, label: str = "a") -> int:
    return plain2(x, label)


def plain2(x: int, label: str = "a") -> int:
    return plain(x, label)


@agentic_function
def flat(x: int, label: str = "a") -> int:
    """A step that does nothing."""
    return x


@agentic_function
def nest3(x: int, label: str = "a") -> int:
    """Outer step."""
    return nest2(x, label)


@agentic_function
def nest2(x: int, label: str = "a") -> int:
    """Middle step."""
    return nest1(x, label)


@agentic_function
def nest1(x: int, label: str = "a") -> int:
    """Inner step."""
    return x


def otel_functions() -> tuple[Callable[..., int], Callable[..., int], Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench_agentic")

    @tracer.start_as_current_span("flat")
    def otel_flat(x: int, label: str = "a") -> int:
        return x

    @tracer.start_as_current_span("nest1")
    def otel_nest1(x: int, label: str = "a") -> int:
        return x

    @tracer.start_as_current_span("nest2")
    def otel_nest2(x: int, label: str = "a") -> int:
        return otel_nest1(x, label)

    @tracer.start_as_current_span("nest3")
    def otel_nest3(x: int, label: str = "a") -> int:
        return otel_nest2(x, label)

    return otel_flat, otel_nest3, exporter


# -- 1. per-call overhead ----------------------------------------------------------------
def time_calls(fn: Callable[..., int], n: int, out: list[float]) -> None:
    clock = time.perf_counter_ns
    for i in range(n):
        started = clock()
        fn(i, "a")
        out.append((clock() - started) / 1000)


def journal_lines(session_dir: Path) -> int:
    journal = session_dir / ".state" / "journal"
    return sum(p.read_bytes().count(b"\n") for p in journal.glob("*.jsonl"))


def bench_overhead(rounds: int) -> list[tuple[str, float, float, str]]:
    otel_flat, otel_nest3, exporter = otel_functions()
    variants: dict[str, tuple[Callable[..., int], bool]] = {
        "undecorated call, flat": (plain, False),
        "undecorated call, 3 nested": (plain3, False),
        "OpenTelemetry span, flat": (otel_flat, False),
        "OpenTelemetry span, 3 nested": (otel_nest3, False),
        "@agentic_function, flat": (flat, True),
        "@agentic_function, 3 nested": (nest3, True),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    lines: dict[str, list[float]] = {name: [] for name in variants}
    runtime = create_runtime(TestProvider())
    sid = "bench_overhead"
    for fn, _agentic in variants.values():  # warm-up
        with session_context(sid, runtime=runtime):
            time_calls(fn, 20, [])
    for _ in range(rounds):
        for name, (fn, agentic) in variants.items():
            with session_context(sid, runtime=runtime) as handle:
                before = journal_lines(handle.writer.session.path) if agentic else 0
                time_calls(fn, CALLS_PER_ROUND, samples[name])
                if agentic:  # every event already on disk before the turn commits
                    written = journal_lines(handle.writer.session.path) - before
                    lines[name].append(written / CALLS_PER_ROUND)
            exporter.clear()
    base = statistics.median(samples["undecorated call, flat"])
    rows = []
    for name in variants:
        median = statistics.median(samples[name])
        per_call = f"{statistics.mean(lines[name]):.1f}" if lines[name] else "-"
        rows.append((name, median, median - base, per_call))
    return rows


# -- 2. rendering at a 1,000-turn session ---------------------------------------------------
@agentic_function
def research(topic: str, runtime: Runtime | None = None) -> Any:
    """Research the topic and answer in one paragraph, citing sources."""
    assert runtime is not None
    return runtime.exec(f"What is known about {topic}? " + "Give details. " * 20)


def build_session(home: Path, sid: str, turns: int) -> float:
    provider = TestProvider(reply="A paragraph of findings. " * 12)
    runtime = create_runtime(provider)
    started = time.perf_counter()
    for i in range(turns):
        with session_context(sid, runtime=runtime):
            research(f"topic number {i}")
        if (i + 1) % 250 == 0:
            print(f"  built {i + 1} turns ({time.perf_counter() - started:.1f} s)", flush=True)
    return time.perf_counter() - started


def time_render(
    sid: str, runtime: Runtime, samples: int, db: SessionStore | None = None
) -> tuple[list[float], int]:
    times: list[float] = []
    count = 0

    @agentic_function
    def step(runtime: Runtime | None = None) -> None:
        """Research the topic and answer in one paragraph, citing sources."""
        nonlocal count
        assert runtime is not None
        for _ in range(samples):
            started = time.perf_counter()
            messages = runtime.render_prompt("What changed since the last turn?")
            times.append((time.perf_counter() - started) * 1000)
            count = len(messages)

    with session_context(sid, runtime=runtime, db=db):
        step()
    return times, count


def bench_render(home: Path, turns: int, samples: int) -> list[tuple[str, str]]:
    sid = "bench_render"
    build = build_session(home, sid, turns)
    runtime = create_runtime(TestProvider(reply="ok"))
    warm, count = time_render(sid, runtime, samples)
    exec_times: list[float] = []
    for _ in range(samples):
        with session_context(sid, runtime=runtime):
            started = time.perf_counter()
            research("one more topic")
            exec_times.append((time.perf_counter() - started) * 1000)
    # cold: a fresh store in this process, as a new kernel or script would open it
    from openprogram.agent import session_db

    session_db.default_db().close()
    session_db._db = None
    started = time.perf_counter()
    store = SessionStore(home)
    store.open(sid)
    opened = (time.perf_counter() - started) * 1000
    cold, _ = time_render(sid, runtime, 1, db=store)
    store.close()
    return [
        ("session built through the store", f"{turns} turns in {build:.1f} s"),
        ("messages in the rendered prompt", f"{count} (docstring once + last 20 turns + content)"),
        ("render_prompt, warm (median)", f"{statistics.median(warm):.2f} ms"),
        ("render_prompt, warm (p90)", f"{sorted(warm)[int(len(warm) * 0.9)]:.2f} ms"),
        ("open the session, fresh SessionStore", f"{opened:.1f} ms"),
        ("render_prompt, cold (first after open)", f"{cold[0]:.2f} ms"),
        ("function + exec, test provider, pre-commit", f"{statistics.median(exec_times):.2f} ms"),
    ]


# -- main -------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_agentic", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and turns")
    parser.add_argument("--rounds", type=int, default=None, help="overhead rounds (100 calls)")
    parser.add_argument("--turns", type=int, default=None, help="session size for rendering")
    args = parser.parse_args(argv)
    rounds = args.rounds or (10 if args.quick else 40)
    turns = args.turns or (200 if args.quick else 1000)

    root = Path(tempfile.mkdtemp(prefix="bench_agentic_"))
    home = root / "home"
    previous = os.environ.get("OPENPROGRAM_HOME")
    os.environ["OPENPROGRAM_HOME"] = str(home)
    try:
        print(
            f"(1) per-call overhead, store installed, no LLM: {rounds} rounds x "
            f"{CALLS_PER_ROUND} calls per variant, interleaved"
        )
        print(f"  {'variant':32s} {'median µs':>10s} {'minus plain':>12s} {'journal lines':>14s}")
        for name, median, extra, lines in bench_overhead(rounds):
            print(f"  {name:32s} {median:10.2f} {extra:12.2f} {lines:>14s}")
        print("  targets: @agentic_function ≤ 50 µs flat, ≤ 150 µs for three nested levels")

        print(f"\n(2) rendering the prompt for an exec at a {turns}-turn session")
        for label, value in bench_render(home, turns, samples=30):
            print(f"  {label:44s} {value}")
        print("  target: render ≤ 20 ms")
    finally:
        from openprogram.agent import session_db

        session_db.default_db().close()
        if previous is None:
            os.environ.pop("OPENPROGRAM_HOME", None)
        else:
            os.environ["OPENPROGRAM_HOME"] = previous
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
