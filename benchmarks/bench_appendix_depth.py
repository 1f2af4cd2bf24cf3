"""Speed of ``openprogram sessions export ID --appendix`` against how deeply a turn nests.

One session per depth, written through the store: a cell's turn node, then ``depth``
agentic function frames each called by the one above (``level 0 › level 1 › …``), an
``llm`` call (with usage) in the outermost frame and one in the innermost.  Each figure is
the appendix built from the session on disk as the CLI builds it (the session opened, its
nodes read, the commit log, the prompts rebuilt), Markdown and HTML, in this process
(Python's start and imports are not counted).  Prints the median and spread (min-max) of
``--repeat`` runs per depth.  No assertions.

    python benchmarks/bench_appendix_depth.py [--depths 64,1000,10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def build(depth: int) -> str:
    """A session whose one turn nests ``depth`` frames deep; returns its id."""
    from openprogram.context.nodes import COMPLETED, make_call
    from openprogram.store.session.context import session_context

    with session_context(f"deep_{depth}", runtime=None, create_runtime_if_none=False) as handle:
        writer = handle.writer
        turn = make_call(
            "turn", "cell [1]", input={"text": "%%openprogram\nlevel_0()"}, status=COMPLETED
        )
        writer.append(turn, turn_level=True)
        caller, frames = turn.id, []
        for level in range(depth):
            frame = make_call(
                "function",
                f"level_{level}",
                input={"level": level},
                caller=caller,
                status=COMPLETED,
                doc=f"Level {level % 7} of the descent.",
                doc_hash=f"{level % 7:016x}",
                source_hash="0" * 16,
            )
            frames.append(writer.append(frame))
            caller = frame.id
        for where in (frames[0], frames[-1]):
            llm = make_call(
                "llm",
                "function",
                input={"content": "go on"},
                caller=where.id,
                status=COMPLETED,
                model="function",
                messages=[{"role": "user", "content": f"in {where.name}"}],
                usage={"input_tokens": 100, "output_tokens": 10},
            )
            llm.output = "deeper"
            writer.append(llm)
        handle.message = "cell [1]"
    return handle.session_id


def export(session_id: str, target: Path) -> float:
    from openprogram.cli import main as cli_main

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = cli_main(["sessions", "export", session_id, "--appendix", "-o", str(target)])
    elapsed = time.perf_counter() - start
    assert code == 0, f"export failed ({code})"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depths", default="64,1000,10000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 100_000))
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["OPENPROGRAM_HOME"] = str(Path(tmp) / "home")
        print(f"{'depth':>7}  {'format':<8} {'median':>9}  {'spread (min-max)':>20}")
        for depth in (int(d) for d in args.depths.split(",")):
            session_id = build(depth)
            for suffix in ("md", "html"):
                times = [
                    export(session_id, Path(tmp) / f"methods.{suffix}") for _ in range(args.repeat)
                ]
                spread = f"{min(times):.3f}-{max(times):.3f} s"
                print(f"{depth:>7}  {suffix:<8} {statistics.median(times):>7.3f} s  {spread:>20}")


if __name__ == "__main__":
    main()
