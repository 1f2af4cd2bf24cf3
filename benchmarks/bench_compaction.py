"""How long compaction takes to decide that a turn needs no compaction (the common case).

    python benchmarks/bench_compaction.py [--turns 1000] [--repeat 200]

Builds a chat session of ``--turns`` dispatcher turns (the offline ``test`` provider; a
1,000-turn build takes about a minute on 2 cores; kept under ``benchmarks/.cache/`` and
reused) and a compacted one (same size, a small token budget so summaries were written),
opens each as a fresh process would, then times ``compaction.needed`` — what stage 3a of
every turn runs — ``--repeat`` times: median, min, p90 and max in milliseconds.  The
target (issue 22): ≤ 1 ms for a 1,000-turn session that needs no compaction.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def build(home: Path, session_id: str, turns: int, tokens: int | None) -> None:
    from openprogram import create_runtime
    from openprogram.agent import dispatcher as D
    from openprogram.context.policy import ContextPolicy

    rt = create_runtime("test", context=ContextPolicy(tokens=tokens) if tokens else None)
    for i in range(turns):
        D.process_user_turn(D.TurnRequest(session_id, f"message {i}: " + "words " * 12, runtime=rt))


def timed(session_id: str, repeat: int, tokens: int | None) -> list[float]:
    from openprogram.agent.dispatcher import compaction
    from openprogram.agent.session_db import default_db
    from openprogram.context.policy import ContextPolicy, effective

    session = default_db().open(session_id)
    policy = effective(ContextPolicy(tokens=tokens) if tokens else None)
    head = session.head_id
    compaction.needed(session, head, policy)  # the first read fills the node cache
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        compaction.needed(session, head, policy)
        out.append((time.perf_counter() - start) * 1000)
    return out


def row(label: str, ms: list[float]) -> str:
    ms = sorted(ms)
    p90 = ms[int(len(ms) * 0.9) - 1]
    return (
        f"{label:<34} median {statistics.median(ms):7.3f} ms   min {ms[0]:7.3f}   "
        f"p90 {p90:7.3f}   max {ms[-1]:7.3f}   (n={len(ms)})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--cache", type=Path, default=HERE / ".cache" / "compaction")
    args = parser.parse_args(argv)
    home = args.cache / f"t{args.turns}"
    os.environ["OPENPROGRAM_HOME"] = str(home)
    cases = [("default-policy", None), ("budget-600", 600)]  # (session, history token budget)
    from openprogram.agent.session_db import default_db

    for name, tokens in cases:
        sid = f"chat_bench_{name}_{args.turns}"
        if not default_db().exists(sid):
            start = time.perf_counter()
            build(home, sid, args.turns, tokens)
            print(f"built {sid}: {args.turns} turns in {time.perf_counter() - start:.1f} s")
    print(f"compaction decision, {args.turns}-turn sessions (no compaction needed)")
    for name, tokens in cases:
        sid = f"chat_bench_{name}_{args.turns}"
        from openprogram.agent.dispatcher import compaction
        from openprogram.context.policy import ContextPolicy, effective

        session = default_db().open(sid)
        policy = effective(ContextPolicy(tokens=tokens) if tokens else None)
        if compaction.needed(session, session.head_id, policy):
            print(f"{name}: its history needs compacting now — not the case measured")
            continue
        summaries = len(session.meta.get("summaries") or {})
        print(row(f"{name} ({summaries} summaries)", timed(sid, args.repeat, tokens)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
