"""Speed of ``%openprogram diff``: pairing and rendering two lines of N calls each.

Two lines of ``--turns`` turns (default 50), each turn a function call with an llm call
under it plus more llm calls to reach ``--calls`` calls per line (default 500); line B has
one docstring edited (its answers change), one call added and one removed.  Nodes are
built in memory (the diff reads ``Session.nodes()``; opening a session is measured by
bench_store_scale.py).  Prints the median and spread of pairing, text and HTML rendering.

    python benchmarks/bench_diff.py [--calls 500] [--repeat 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openprogram.compare.diffs import compare
from openprogram.compare.render import render_html, render_text
from openprogram.compare.sides import Nodes, Side
from openprogram.context.nodes import Call, make_call


def build(calls: int, turns: int) -> tuple[Nodes, Side, Side]:
    nodes: list[Call] = []
    seq = 0

    def add(node: Call, turn: int) -> Call:
        nonlocal seq
        node.seq, node.turn = seq, turn
        seq += 1
        nodes.append(node)
        return node

    root = add(make_call("root", "root", status="completed"), 0)
    sides: list[list[Call]] = []
    per_turn = max(1, calls // turns // 2)  # a function and an llm call under it, repeated
    for side in ("a", "b"):
        prev, line = root.id, []
        for t in range(turns):
            turn = add(
                make_call(
                    "turn",
                    f"cell [{t}]",
                    input={"text": f"%%openprogram\nstep({t})"},
                    predecessor=prev,
                    status="completed",
                    run=side,
                ),
                len(nodes),
            )
            prev = turn.id
            line.append(turn)
            for k in range(per_turn):
                if side == "b" and t == 7 and k == 0:
                    continue  # removed
                name = f"fn{k % 5}"
                doc = f"Do step {k % 5}." + (" Carefully." if side == "b" and k % 5 == 2 else "")
                fn = add(
                    make_call(
                        "function",
                        name,
                        input={"x": t},
                        caller=turn.id,
                        doc=doc,
                        status="completed",
                    ),
                    turn.turn,
                )
                msgs = [{"role": "system", "content": doc}, {"role": "user", "content": str(t)}]
                answer = f"answer {t}.{k}" + ("!" if side == "b" and k % 5 == 2 else "")
                llm = add(
                    make_call(
                        "llm",
                        "function",
                        input={"content": str(t)},
                        caller=fn.id,
                        messages=msgs,
                        model="function",
                        status="completed",
                        usage={"input_tokens": 10, "output_tokens": 3},
                        duration_ms=1.0 + k,
                    ),
                    turn.turn,
                )
                llm.output = answer
                fn.output = answer
            if side == "b" and t == 11:  # an added call
                add(
                    make_call("function", "extra", caller=turn.id, doc="More.", status="completed"),
                    turn.turn,
                )
        sides.append(line)
    index = Nodes(nodes, None)
    return index, Side("a", sides[0]), Side("b", sides[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    index, a, b = build(args.calls, args.turns)
    rows: dict[str, list[float]] = {"pair+diff": [], "text": [], "html": [], "total": []}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        report = compare(index, a, b)
        t1 = time.perf_counter()
        render_text(report)
        t2 = time.perf_counter()
        render_html(report)
        t3 = time.perf_counter()
        for key, value in (
            ("pair+diff", t1 - t0),
            ("text", t2 - t1),
            ("html", t3 - t2),
            ("total", t3 - t0),
        ):
            rows[key].append(value * 1000)
    calls_a = sum(1 for r in report.rows if r.pair.a is not None and r.pair.node.kind != "turn")
    calls_b = sum(1 for r in report.rows if r.pair.b is not None and r.pair.node.kind != "turn")
    print(
        f"diff of two lines: A {calls_a} calls, B {calls_b} calls, {args.turns} turns each; "
        f"{len(report.changed)} changed, {report.count('added')} added, "
        f"{report.count('removed')} removed; {args.repeat} repeats"
    )
    for key, values in rows.items():
        values.sort()
        print(
            f"  {key:<10} median {statistics.median(values):7.1f} ms   "
            f"min {values[0]:7.1f}  max {values[-1]:7.1f}"
        )
    print("  target: total <= 200 ms")


if __name__ == "__main__":
    main()
