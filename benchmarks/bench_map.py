"""``openprogram.map`` on a Dask cluster beside the local thread path (issue 13's targets).

    python benchmarks/bench_map.py [--quick] [--items 400] [--rounds 3]

Every figure is a median over ``--rounds`` runs with its spread (min-max), measured in one
run, on worker processes of ``dask.distributed.LocalCluster`` on loopback.

1. Speed-up: a ``function`` provider whose reply sleeps 100 ms (a callable in this file,
   sent to the workers by cloudpickle) answers ``--items`` items over 2 Dask workers × 16
   threads (``max_in_flight=32``) beside 1 worker × 16 (``max_in_flight=16``), and beside
   the local thread path (16 threads in this process); the honest baseline beside each:
   Dask alone running a task that sleeps 100 ms, same window.  Target: ≥ 80 % of the
   ideal 2×.
2. Per-item overhead of the Dask path over the local thread path: the same items with the
   100 ms provider (1 × 16 on Dask vs 16 threads here: the wall-clock difference per item),
   and with the ``test`` provider (no wait: what each item costs end to end), beside raw
   Dask running an empty task per item (Dask's own cost, which openprogram cannot remove)
   and the kernel's CPU per item (what the map itself spends here: pickling, unpacking the
   returned nodes, appending).  Target: ≤ 2 ms per item.
3. Persistence: the map's turn (1,000 items = 2,000 nodes appended in batches) beside the
   same 1,000 calls made locally in one turn (2,000 single appends): appending per node,
   and the one commit of the turn.

Figures only; no assertions.  On a loaded machine the Dask figures move a lot; the
spread column says how much.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openprogram
from openprogram import agentic_function, create_runtime, session_context
from openprogram.agentic_programming.function import using_call_id
from openprogram.agentic_programming.runtime import Runtime
from openprogram.context.nodes import Call, make_call
from openprogram.providers.base import LLMRequest
from openprogram.providers.test import FunctionProvider

DELAY = 0.1  # seconds per provider call


def slow_reply(request: LLMRequest) -> str:
    time.sleep(DELAY)
    return "bug"


@agentic_function
def classify(text: str, runtime: Runtime | None = None) -> str:
    """Classify the ticket as bug or feature."""
    assert runtime is not None
    return str(runtime.exec(text, choices=["bug", "feature"]))


def nothing(x: int) -> int:
    return x


def sleeper(x: int) -> int:
    time.sleep(DELAY)
    return x


# -- measuring ---------------------------------------------------------------------------------
def spread(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    med = statistics.median(values) * scale
    lo, hi = min(values) * scale, max(values) * scale
    return f"{med:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


@contextmanager
def turn(rt: Runtime) -> Iterator[Call]:
    with session_context(runtime=rt, message="bench") as s:
        node = s.writer.append(make_call("turn", "cell", input={"text": "map"}), turn_level=True)
        with using_call_id(node.id):
            yield node


def timed_map(rt: Runtime, items: list[str], **kwargs: Any) -> tuple[float, float]:
    """(wall, kernel CPU) seconds of one map in a turn of its own (commit excluded)."""
    with turn(rt):
        wall, cpu = time.perf_counter(), time.process_time()
        openprogram.map(classify, items, progress=False, **kwargs)
        return time.perf_counter() - wall, time.process_time() - cpu


@contextmanager
def cluster(workers: int, threads: int) -> Iterator[Any]:
    from dask.distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=workers,
            threads_per_worker=threads,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=50,
        ) as c,
        Client(c) as client,
    ):
        client.wait_for_workers(workers)
        yield client


def raw_dask(client: Any, n: int, window: int, fn: Callable[[int], int] = nothing) -> float:
    """``fn`` through Dask alone with the same window: what Dask itself costs."""
    from dask.distributed import as_completed

    started = time.perf_counter()
    first = client.map(fn, range(min(window, n)), pure=False)
    done = as_completed(first)
    sent = len(first)
    for _ in done:
        if sent < n:
            done.add(client.submit(fn, sent, pure=False))
            sent += 1
    return time.perf_counter() - started


# -- the sections ----------------------------------------------------------------------------------
def speed(items: int, rounds: int) -> dict[str, list[float]]:
    slow = create_runtime(FunctionProvider(slow_reply), backoff=0.0)
    texts = [f"ticket {i}" for i in range(items)]
    out: dict[str, list[float]] = {"threads 16": []}
    timed_map(slow, texts[:32], max_in_flight=16)  # warm: imports, the first session
    for _ in range(rounds):
        out["threads 16"].append(timed_map(slow, texts, max_in_flight=16)[0])
    for workers in (1, 2):
        label = f"{workers}x16"
        out[f"dask {label}"], out[f"raw dask {label}"] = [], []
        with cluster(workers, 16) as client:
            timed_map(slow, texts[:32], executor=client)  # warm the workers' imports
            for _ in range(rounds):
                wall = timed_map(slow, texts, executor=client, max_in_flight=16 * workers)[0]
                out[f"dask {label}"].append(wall)
                out[f"raw dask {label}"].append(raw_dask(client, items, 16 * workers, sleeper))
    return out


def overhead(items: int, rounds: int) -> dict[str, list[float]]:
    fast = create_runtime("test")
    texts = [f"ticket {i}" for i in range(items)]
    out: dict[str, list[float]] = {k: [] for k in ("threads", "threads cpu", "dask", "dask cpu")}
    out["raw dask"] = []
    timed_map(fast, texts[:32], max_in_flight=16)  # warm
    for _ in range(rounds):
        wall, cpu = timed_map(fast, texts, max_in_flight=16)
        out["threads"].append(wall / items)
        out["threads cpu"].append(cpu / items)
    with cluster(1, 16) as client:
        timed_map(fast, texts[:32], executor=client)
        for _ in range(rounds):
            wall, cpu = timed_map(fast, texts, executor=client, max_in_flight=32)
            out["dask"].append(wall / items)
            out["dask cpu"].append(cpu / items)
            out["raw dask"].append(raw_dask(client, items, 32) / items)
    return out


def persistence(items: int, rounds: int) -> dict[str, list[float]]:
    """Appending a map's returned nodes (batches) beside local calls (single appends), and
    the commit of the turn either way."""
    fast = create_runtime("test")
    texts = [f"ticket {i}" for i in range(items)]
    out: dict[str, list[float]] = {
        f"{w} {k}": [] for w in ("map", "local") for k in ("append", "commit")
    }
    runs: dict[str, tuple[str, Callable[[], Any]]] = {
        "map": ("append_many", lambda: openprogram.map(classify, texts, progress=False)),
        "local": ("append", lambda: [classify(t) for t in texts]),
    }
    for _ in range(rounds):
        for label, (method, work) in runs.items():
            with session_context(runtime=fast, message="bench") as s:
                node = s.writer.append(make_call("turn", "cell"), turn_level=True)
                with using_call_id(node.id), timing(s.writer.session, method) as spent:
                    work()
                committing = time.perf_counter()
            out[f"{label} commit"].append(time.perf_counter() - committing)
            out[f"{label} append"].append(spent[0] / (2 * items))
    return out


@contextmanager
def timing(session: Any, method: str) -> Iterator[list[float]]:
    """Add up the time spent in ``session.<method>`` while the block runs."""
    real = getattr(session, method)
    spent = [0.0]

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - started

    setattr(session, method, timed)
    try:
        yield spent
    finally:
        delattr(session, method)


# -- main ------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer items and rounds")
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    items, rounds = (80, 1) if args.quick else (args.items, args.rounds)
    _send_this_module_by_value()
    home = tempfile.mkdtemp(prefix="bench-map-")
    os.environ["OPENPROGRAM_HOME"] = home
    try:
        report(items, rounds)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def report(items: int, rounds: int) -> None:
    load = os.getloadavg()[0]
    print(f"items {items}, rounds {rounds}, sleep {DELAY * 1000:.0f} ms; cpus {os.cpu_count()}")
    print(f"load average at start {load:.1f} (the Dask figures need idle cores)")
    s = speed(items, rounds)
    ideal_one = items / 16 * DELAY
    print(f"\n1. speed-up ({items} items, {DELAY * 1000:.0f} ms each)   wall s, median (min-max)")
    for label, values in s.items():
        print(f"   {label:<14} {spread(values)}")
    print(f"   ideal 1x16 {ideal_one:.2f} s, 2x16 {ideal_one / 2:.2f} s")
    for what in ("dask", "raw dask"):
        up = statistics.median(s[f"{what} 1x16"]) / statistics.median(s[f"{what} 2x16"])
        print(
            f"   {what}: 2x16 over 1x16 {up:.2f}x = {up / 2 * 100:.0f} % of ideal (target ≥ 80 %)"
        )
    slow_gap = [(d - t) / items for d, t in zip(s["dask 1x16"], s["threads 16"], strict=True)]
    o = overhead(items, rounds)
    print("\n2. per-item overhead, ms per item, median (min-max)")
    print(f"   100 ms provider, dask 1x16 - threads 16:   {spread(slow_gap, 1000)}  (target ≤ 2)")
    print(f"   test provider, end to end: threads       {spread(o['threads'], 1000)}")
    print(f"                              dask 1x16     {spread(o['dask'], 1000)}")
    print(f"   raw Dask, an empty task per item:        {spread(o['raw dask'], 1000)}")
    print(f"   kernel CPU per item: threads             {spread(o['threads cpu'], 1000)}")
    print(f"                        dask                {spread(o['dask cpu'], 1000)}")
    gap = [d - r for d, r in zip(o["dask"], o["raw dask"], strict=True)]
    print(f"   map on Dask minus raw Dask:              {spread(gap, 1000)}")
    p = persistence(1000, rounds)
    print("\n3. persistence of 1,000 items (2,000 nodes) in one turn, median (min-max)")
    print(
        f"   append per node: map (batches) {spread(p['map append'], 1e6, 1)} µs"
        f"   local calls (single) {spread(p['local append'], 1e6, 1)} µs"
    )
    print(
        f"   commit of the turn: map {spread(p['map commit'], 1000, 1)} ms"
        f"   local calls {spread(p['local commit'], 1000, 1)} ms"
    )


def _send_this_module_by_value() -> None:
    """Workers cannot import this file by name; let cloudpickle send its functions."""
    import cloudpickle

    module = sys.modules[__name__]
    if module.__name__ != "__main__":
        cloudpickle.register_pickle_by_value(module)


if __name__ == "__main__":
    main()
