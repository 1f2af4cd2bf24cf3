"""The project's overhead around a real model call (issue 21's speed targets).

    python benchmarks/bench_real_model.py [--calls 20]

One llama-cpp-python server with SmolLM2-135M-Instruct on loopback
(``tests/real_model/setup.sh`` installs it), reached directly (no logging proxy).  The same
request — one user message, ``max_tokens=1``, ``temperature=0``, the same model name —
sent three ways, interleaved call by call so that machine noise hits all of them alike:

* **sdk**: the plain ``openai`` SDK, ``client.chat.completions.create(...)``;
* **session**: ``runtime.exec(...)`` inside one open ``session_context`` (an ``llm`` node
  journaled per call; the history is off, ``ContextPolicy(turns=0)``, so the prompt is the
  same as the SDK's);
* **turn**: each call its own ``session_context`` on one session, committed on exit
  (and the same turn with the offline ``test`` provider: what the store's commit costs).

Targets: session ≤ 1.05x the SDK's median; turn ≤ SDK + 5 ms per call.  Medians with the
spread (min-max and the quartiles), in ms.  Figures only; no assertions.
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

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "real_model"))

PROMPT = "Say hi."


def spread(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return (
        f"median {statistics.median(values):7.2f} ms  (min {min(values):.2f}, "
        f"q1 {q[0]:.2f}, q3 {q[2]:.2f}, max {max(values):.2f})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20, help="calls per variant (default 20)")
    parser.add_argument(
        "--where",
        type=Path,
        default=Path.home(),
        help="the folder the store goes under (default: the home folder, where "
        "~/.openprogram lives; /tmp can be far slower at creating files)",
    )
    args = parser.parse_args()

    import real_server

    why = real_server.missing()
    if why is not None:
        print(f"skipped: {why}")
        return 0
    from bench_views import disk_of

    home = Path(tempfile.mkdtemp(prefix="bench-real-model-", dir=args.where))
    os.environ["OPENPROGRAM_HOME"] = str(home / "home")
    print(f"load {os.getloadavg()[0]:.1f}; the store on {disk_of(home)} ({home})")
    os.environ["OPENPROGRAM_ALLOW_MODEL_REQUESTS"] = "1"  # loopback only
    server = real_server.start(home)
    try:
        return run(server.upstream + "/v1", args.calls)
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


def run(base_url: str, calls: int) -> int:
    import openai

    from openprogram import create_runtime, session_context
    from openprogram.context.policy import ContextPolicy
    from openprogram.providers.openai_provider import OpenAIProvider
    from openprogram.providers.test import TestProvider

    alias = "smollm2"
    client = openai.OpenAI(base_url=base_url, api_key="sk-local", max_retries=0)
    messages = [{"role": "user", "content": PROMPT}]

    def sdk() -> None:
        client.chat.completions.create(model=alias, messages=messages, max_tokens=1, temperature=0)  # type: ignore[call-overload]

    rt = create_runtime(
        OpenAIProvider(alias, base_url=base_url, api_key="sk-local"),
        context=ContextPolicy(turns=0),
    )

    def project() -> None:
        rt.exec(PROMPT, max_tokens=1, temperature=0)

    timings: dict[str, list[float]] = {
        "sdk": [],
        "session": [],
        "sdk ": [],
        "turn": [],
        "turn, no model": [],  # the same turn with the offline test provider: the store's part
    }
    offline = create_runtime(TestProvider("hi"), context=ContextPolicy(turns=0))

    def timed(name: str, fn: Callable[[], None]) -> None:
        start = time.perf_counter()
        fn()
        timings[name].append((time.perf_counter() - start) * 1000)

    for _ in range(3):  # warm up: the server's prompt cache, the SDK clients, the store
        sdk()
    with session_context(runtime=rt) as warm:
        project()
    session_id = warm.session_id

    def one_turn() -> None:
        with session_context(session_id, runtime=rt):
            project()

    def offline_turn() -> None:
        with session_context(session_id, runtime=offline):
            offline.exec(PROMPT, max_tokens=1, temperature=0)

    # phase 1: one open session; phase 2: a committed turn per call (a turn cannot be
    # committed inside an open session, so each phase has its own SDK calls beside it)
    with session_context(runtime=rt):
        for _ in range(calls):
            timed("sdk", sdk)
            timed("session", project)
    for _ in range(calls):
        timed("sdk ", sdk)
        timed("turn", one_turn)
        timed("turn, no model", offline_turn)

    print(f"{calls} calls per variant, max_tokens=1, SmolLM2-135M (llama-cpp-python) at {base_url}")
    for name in timings:
        print(f"  {name:15s} {spread(timings[name])}")
    ratio = statistics.median(timings["session"]) / statistics.median(timings["sdk"])
    extra = statistics.median(timings["turn"]) - statistics.median(timings["sdk "])
    print(f"  session / sdk: {ratio:.3f}x   (target <= 1.05x)")
    print(f"  turn - sdk:    {extra:+.2f} ms per call   (target <= +5 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
