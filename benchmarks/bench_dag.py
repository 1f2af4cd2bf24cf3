"""DAG view speed and sizes: layout time, summary payload, static HTML, widget upsert.

Run: ``python benchmarks/bench_dag.py``.  Prints the best of a few runs (this machine is
shared; the minimum is the least noisy figure).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.dag_sample

from openprogram.view import (
    compute_layout,
    render_static_html,
    render_text_tree,
    summarize,
)
from tests.dag_sample import payload_bytes, sample_nodes


def best_ms(fn: Callable[[], object], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return min(times)


def main() -> None:
    print(f"{'nodes':>6} {'layout':>9} {'+summary':>9} {'payload':>10} {'static':>12} {'text':>9}")
    for count in (1_000, 5_000):
        nodes = sample_nodes(count, fork_every=9)
        layout = compute_layout(nodes, None, last_turns=50)
        layout_ms = best_ms(lambda: compute_layout(nodes, None))  # noqa: B023
        summary_ms = best_ms(lambda: summarize(compute_layout(nodes, None)))  # noqa: B023
        payload = payload_bytes(summarize(layout))
        html = render_static_html(nodes, None, layout=layout)
        text = render_text_tree(nodes, None, layout=layout)
        print(
            f"{count:>6} {layout_ms:>7.1f}ms {summary_ms:>7.1f}ms {payload / 1e6:>8.2f}MB "
            f"{len(html.encode()) / 1e3:>9.0f} kB {len(text.encode()) / 1e3:>6.0f} kB"
        )

    from openprogram_magics.widget import DagWidget

    nodes = sample_nodes(5_000, fork_every=9)
    widget = DagWidget(nodes, None, last_turns=50)
    widget.send = lambda content, buffers=None: None  # type: ignore[method-assign]
    fn = [n for n in nodes if n["metadata"]["kind"] == "function"][-1]
    counter = iter(range(10**9))

    def upsert() -> None:
        i = next(counter)
        node = {**nodes[-1], "id": f"live-{i}", "seq": 10**6 + i, "caller": fn["id"]}
        widget.upsert(node)

    print(f"widget.upsert at 5,000 nodes: {best_ms(upsert, runs=10):.1f} ms (re-layout + diff)")


if __name__ == "__main__":
    main()
