"""``@agentic_function`` overhead and prompt rendering (issue 3's speed targets).

    python benchmarks/bench_agentic.py [--quick] [--turns 1000] [--rounds 40]

1. Per-call overhead with a store installed and no LLM, medians in µs, measured side by
   side in the same run (variants interleaved round by round, so machine noise hits all of
   them alike): an undecorated call, ``@agentic_function`` flat and three nested levels,
   and an OpenTelemetry in-memory span (TracerProvider + SimpleSpanProcessor +
   InMemorySpanExporter) flat and nested, and two autocommitted rows of a WAL database on
   the same disk (the least a call's durable start and end cost).  Targets: ≤ 50 µs flat,
   ≤ 150 µs nested.
   The agentic calls keep "nothing lost if the process is killed": every node event is one
   row written to the live database before the call returns (the table shows rows per call).
2. Rendering the prompt for an exec at a 1,000-turn session built through the store (one
   ``session_context`` turn per call, each a function node with an llm child), warm (same
   process) and cold (a fresh ``SessionStore``), and a whole ``runtime.exec`` with the
   ``test`` provider at that size.  Target: render ≤ 20 ms.
3. The context policy's cost at that size: the prompt rendered as before the policy (last
   20 turns, no token budget, failed turns kept) side by side with the default policy
   (20 turns, 4,000 tokens, failed turns left out) and with a tight budget, interleaved.
   Target: the policy adds ≤ 0.2 ms.  Also the bytes of the last ``llm`` node on disk
   (it names the turns it was given instead of storing their text).

Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import json
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


def sqlite_rows(folder: Path) -> Callable[..., int]:
    """Two autocommitted rows in a WAL database beside the session's, with the live
    database's pragmas, ``rows`` table and statement: what a call's start and end cost at
    the least when each must be on disk before the call returns (a SIGKILL loses neither).
    (A rowid table keyed by TEXT, as this used before, writes its key's index page too:
    twice the least.)"""
    import sqlite3

    from openprogram.store.session.live import PRAGMAS, PUT_ROW, SCHEMA

    folder.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(folder / "floor.db", isolation_level=None, check_same_thread=False)
    for statement in PRAGMAS:
        db.execute(statement)
    db.execute(next(s for s in SCHEMA if "EXISTS rows " in s))
    body = b'{"name": "flat", "args": {"x": 1}, "status": "running"}'

    def two_rows(x: int, label: str = "a") -> int:
        db.execute(PUT_ROW, (str(x % 64), "owner", body))
        db.execute(PUT_ROW, (str(x % 64), "owner", body))
        return x

    return two_rows


# -- 1. per-call overhead ----------------------------------------------------------------
def time_calls(fn: Callable[..., int], n: int, out: list[float]) -> None:
    clock = time.perf_counter_ns
    for i in range(n):
        started = clock()
        fn(i, "a")
        out.append((clock() - started) / 1000)


def row_writes(session: Any) -> int:
    """Rows written to the session's live database by this process so far."""
    return int(session.live._db.total_changes)


def bench_overhead(rounds: int, home: Path) -> list[tuple[str, float, float, str, str]]:
    otel_flat, otel_nest3, exporter = otel_functions()
    variants: dict[str, tuple[Callable[..., int], bool]] = {
        "undecorated call, flat": (plain, False),
        "undecorated call, 3 nested": (plain3, False),
        "OpenTelemetry span, flat": (otel_flat, False),
        "OpenTelemetry span, 3 nested": (otel_nest3, False),
        "2 SQLite WAL row commits": (sqlite_rows(home / "floor"), False),
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
                before = row_writes(handle.writer.session) if agentic else 0
                time_calls(fn, CALLS_PER_ROUND, samples[name])
                if agentic:  # every event already on disk before the turn commits
                    written = row_writes(handle.writer.session) - before
                    lines[name].append(written / CALLS_PER_ROUND)
            exporter.clear()
    base = statistics.median(samples["undecorated call, flat"])
    rows = []
    for name in variants:
        median = statistics.median(samples[name])
        per_call = f"{statistics.mean(lines[name]):.1f}" if lines[name] else "-"
        q = statistics.quantiles(samples[name], n=10)
        rows.append((name, median, median - base, per_call, f"{q[0]:.1f}-{q[-1]:.1f}"))
    return rows


def overhead_ratios(rows: list[tuple[str, float, float, str, str]]) -> str:
    """``@agentic_function`` over the OpenTelemetry span, flat and nested (the target's
    terms: ≤ 1.0 each)."""
    median = {row[0]: row[1] for row in rows}
    flat = median["@agentic_function, flat"] / median["OpenTelemetry span, flat"]
    nested = median["@agentic_function, 3 nested"] / median["OpenTelemetry span, 3 nested"]
    return f"{flat:.2f}x flat, {nested:.2f}x three nested"


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
    from openprogram.store.session import store as session_db

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


# -- 3. the context policy's cost ------------------------------------------------------------
def bench_policy(sid: str, samples: int) -> list[tuple[str, str]]:
    from openprogram.agentic_programming.function import get_call_id
    from openprogram.agentic_programming.prompt import build_prompt
    from openprogram.context.graph import Graph
    from openprogram.context.policy import ContextPolicy
    from openprogram.context.render import render_messages
    from openprogram.store.vars import get_store

    content = "What changed since the last turn?"
    tight = ContextPolicy(tokens=150)
    sizes: dict[str, int] = {}

    def old_render(session: Any, frame: str | None) -> list[dict[str, Any]]:
        def lookup(node_id: str) -> Any:
            try:
                return session.get(node_id)
            except Exception:
                return None

        def kids(node: Any) -> list[Any]:
            return [c for c in (lookup(i) for i in session.children(node.id)) if c]

        graph = Graph(lookup, session.children, session.head_id)
        return render_messages(graph.visible_for(frame, max_turns=20), content, kids)

    renders: dict[str, Callable[[Any, str | None], list[dict[str, Any]]]] = {
        "before the policy": old_render,
        "default policy": lambda s, f: build_prompt(s, f, content, None).messages,
        "tight (150 tokens)": lambda s, f: build_prompt(s, f, content, tight).messages,
    }
    results: dict[str, list[float]] = {name: [] for name in renders}

    @agentic_function
    def step(runtime: Runtime | None = None) -> None:
        """Research the topic and answer in one paragraph, citing sources."""
        writer = get_store()
        assert writer is not None
        session, frame = writer.session, get_call_id()
        for _ in range(samples):
            for name, render in renders.items():
                started = time.perf_counter()
                messages = render(session, frame)
                results[name].append((time.perf_counter() - started) * 1000)
                sizes[name] = len(messages)

    with session_context(sid, runtime=create_runtime(TestProvider(reply="ok"))):
        step()
    from openprogram.agent.session_db import default_db

    session = default_db().open(sid)
    last_llm = max((n for n in session.nodes() if n.kind == "llm"), key=lambda n: n.seq)
    base = statistics.median(results["before the policy"])
    rows = []
    for name, times in results.items():
        med = statistics.median(times)
        q = statistics.quantiles(times, n=10)
        rows.append(
            (
                f"render, {name}",
                f"{med:.3f} ms (p10 {q[0]:.3f}, p90 {q[-1]:.3f}; {med - base:+.3f} ms) "
                f"{sizes[name]} messages",
            )
        )
    rows.append(("last llm node as JSON", f"{len(json.dumps(last_llm.to_dict()))} bytes"))
    return rows


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
        load = " ".join(f"{value:.1f}" for value in os.getloadavg())
        print(f"  load average {load}")
        print(
            f"  {'variant':32s} {'median µs':>10s} {'p10-p90':>13s} {'minus plain':>12s} "
            f"{'rows written':>14s}"
        )
        rows = bench_overhead(rounds, home)
        for name, median, extra, lines, spread in rows:
            print(f"  {name:32s} {median:10.2f} {spread:>13s} {extra:12.2f} {lines:>14s}")
        print(f"  @agentic_function / OpenTelemetry span: {overhead_ratios(rows)} (target ≤ 1.0)")
        print("  targets: @agentic_function ≤ 50 µs flat, ≤ 150 µs for three nested levels")

        print(f"\n(2) rendering the prompt for an exec at a {turns}-turn session")
        for label, value in bench_render(home, turns, samples=30):
            print(f"  {label:44s} {value}")
        print("  target: render ≤ 20 ms")

        print(f"\n(3) the context policy at a {turns}-turn session (interleaved, 200 samples)")
        for label, value in bench_policy("bench_render", samples=200):
            print(f"  {label:44s} {value}")
        print("  target: the default policy adds ≤ 0.2 ms")
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
