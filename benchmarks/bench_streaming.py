"""Streaming overhead: a 500-token reply, streamed into a cell's output vs not streamed.

    python benchmarks/bench_streaming.py [--rounds 20] [--tokens 500] [--pace-ms 2]

Against the loopback wire server (tests/wire_server.py) with the official SDKs, through
the whole ``runtime.exec`` path inside a session turn: "plain" is a non-streamed call (one
JSON reply), "streamed" is the same reply as ``--tokens`` SSE chunks echoed piece by piece
to a text stream (what a cell's stdout does).  The variants are interleaved round by round
so machine noise hits both alike.  Two server speeds: "instant" (every event sent at once:
the client's per-chunk parsing is all there is, a worst case no real model produces) and
"paced" (``--pace-ms`` between tokens, the plain reply delayed by the same total: a model
generating at 1000/pace tokens per second).  Prints medians with the interquartile range,
the streamed/plain ratio (target ≤ 1.05) and the time to the first streamed piece.

Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openprogram import create_runtime, session_context
from openprogram.agentic_programming.echo import Echo, using_echo
from openprogram.agentic_programming.function import get_call_id
from tests.wire_server import Reply, WireServer


class BenchServer(WireServer):
    """Answers each request by itself: streamed requests get ``chunks`` at ``pace``, plain
    ones the whole text after the same generation time."""

    chunks: ClassVar[list[str]] = []
    pace: ClassVar[float] = 0.0

    def _next_reply(self) -> Reply | None:
        with self._lock:
            body = self.requests[-1].body or {}
            self.requests.clear()
        if body.get("stream"):
            return Reply(chunks=self.chunks, pace=self.pace)
        return Reply(text="".join(self.chunks), delay=self.pace * (len(self.chunks) - 1))


def serve(chunks: list[str], pace: float, urls: Any, stop: Any) -> None:
    """The server in its own process (a real server does not share the client's GIL)."""
    BenchServer.chunks, BenchServer.pace = chunks, pace
    # idle keep-alive connections closing are logged by the server: not news here
    with open(os.devnull, "w") as sys.stderr, BenchServer() as server:
        urls.put((server.openai_base_url, server.anthropic_base_url))
        stop.wait()


def stats(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4)
    return f"{statistics.median(values):8.2f} ms  (IQR {q[0]:.2f}-{q[2]:.2f})"


class Clocked(io.StringIO):
    """A cell's stdout that notes when the first piece arrived."""

    first: float | None = None

    def write(self, s: str) -> int:
        if self.first is None:
            self.first = time.perf_counter()
        return super().write(s)


def measure(kind: str, urls: tuple[str, str], rounds: int, text: str) -> dict[str, list[float]]:
    from openprogram.providers.anthropic_provider import AnthropicProvider
    from openprogram.providers.openai_provider import OpenAIProvider

    options: dict[str, Any] = {"api_key": "k", "timeout": 60.0, "model": "bench"}
    provider: Any = (
        OpenAIProvider(base_url=urls[0], **options)
        if kind == "openai"
        else AnthropicProvider(base_url=urls[1], **options)
    )
    rt = create_runtime(provider, backoff=0.0)
    out: dict[str, list[float]] = {"plain": [], "streamed": [], "first": []}
    with session_context(runtime=rt):
        for r in range(rounds + 2):  # 2 warm-up rounds
            t0 = time.perf_counter()
            assert rt.exec("go") == text
            t_plain = (time.perf_counter() - t0) * 1000
            screen = Clocked()
            with using_echo(Echo(get_call_id(), screen)):
                t0 = time.perf_counter()
                assert rt.exec("go") == text
                t_stream = (time.perf_counter() - t0) * 1000
            if r >= 2 and screen.first is not None:
                out["plain"].append(t_plain)
                out["streamed"].append(t_stream)
                out["first"].append((screen.first - t0) * 1000)
    return out


def main(argv: list[str] | None = None) -> None:
    import multiprocessing

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--pace-ms", type=float, default=2.0)
    parser.add_argument("--tokens", type=int, default=500)
    args = parser.parse_args(argv)
    os.environ["OPENPROGRAM_HOME"] = tempfile.mkdtemp(prefix="op-bench-stream-")
    chunks = [f"tok{i} " for i in range(args.tokens)]
    text = "".join(chunks)
    print(f"{args.tokens}-token reply, {args.rounds} rounds, loopback SSE vs JSON")
    ctx = multiprocessing.get_context("spawn")
    for pace in (0.0, args.pace_ms):
        urls, stop = ctx.Queue(), ctx.Event()
        child = ctx.Process(target=serve, args=(chunks, pace / 1000, urls, stop), daemon=True)
        child.start()
        try:
            found = urls.get(timeout=30)
            for kind in ("openai", "anthropic"):
                m = measure(kind, found, args.rounds, text)
                ratio = statistics.median(m["streamed"]) / statistics.median(m["plain"])
                name = f"{kind} {'instant' if not pace else f'paced {pace:g} ms/token'}"
                print(f"[{name}] plain    {stats(m['plain'])}")
                print(f"[{name}] streamed {stats(m['streamed'])}   ratio {ratio:.3f} (≤ 1.05)")
                print(f"[{name}] first streamed piece after {stats(m['first'])}", flush=True)
        finally:
            stop.set()
            child.join(10)


if __name__ == "__main__":
    main()
