"""What a kernel keeps per ``%%openprogram`` cell, beside a kernel without the extension.

usage: python benchmarks/bench_kernel_rss.py [--turns 2000] [--cells 300] [--runs 3]

Each run starts a real IPython kernel (``jupyter_client``, the kernel a notebook talks to),
runs 100 warm-up cells, reads the kernel's RSS from ``/proc/<pid>/status``, runs ``--cells``
more and reads it again; the figure is KiB kept per cell after a ``gc.collect()``.

- **plain**: a kernel without the extension; each cell calls an undecorated function (the
  honest baseline: what any cell costs the kernel, history and output counters included).
- **openprogram**: ``%load_ext openprogram_magics``, the offline ``test`` provider, the
  session of ``--turns`` earlier turns continued (``%openprogram use ID``); each cell is a
  ``%%openprogram`` turn that calls an ``@agentic_function`` making one ``llm`` call.

The session is built once through the store and kept under
``~/.cache/openprogram-bench/kernel_rss/<turns>`` (the home folder's disk, where
``OPENPROGRAM_HOME`` lives by default). Target (issue 23, item 5): openprogram ≤ plain + 5 KiB.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from jupyter_client.manager import KernelManager

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_magics import AGENT
from bench_store import grow

CACHE = Path.home() / ".cache" / "openprogram-bench" / "kernel_rss"
RSS = "int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS:')).split()[1])"


def session_of(turns: int) -> tuple[Path, str]:
    """The cached home and session id of a ``turns``-turn session (built when missing)."""
    from openprogram.store.session.store import SessionStore

    home = CACHE / str(turns)
    sid = f"kernel-rss-{turns}"
    store = SessionStore(home)
    grow(store.create_session(sid), turns, f"kernel_rss {turns}")
    store.close()
    return home, sid


def run_kernel(magic: bool, home: Path, sid: str, cells: int) -> float:
    km = KernelManager(transport="ipc")
    km.start_kernel(env={**_env(), "OPENPROGRAM_HOME": str(home)})
    client = km.blocking_client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)

        def run(code: str) -> dict:
            reply = client.execute_interactive(code, store_history=True, output_hook=_quiet)
            if reply["content"]["status"] != "ok":
                raise RuntimeError(f"cell failed: {code!r}: {reply['content']}")
            return reply

        def rss() -> int:
            reply = client.execute_interactive(
                "import gc; gc.collect()", user_expressions={"rss": RSS}, output_hook=_quiet
            )
            return int(reply["content"]["user_expressions"]["rss"]["data"]["text/plain"])

        if magic:
            run("%load_ext openprogram_magics")
            run("%openprogram provider test")
            run(f"%openprogram use {sid}")
        run(AGENT)
        cell = "%%openprogram\ntriage({!r})" if magic else "triage_plain({!r})"
        for i in range(100):
            run(cell.format(f"ticket {i}"))
        before = rss()
        for i in range(100, 100 + cells):
            run(cell.format(f"ticket {i}"))
        return (rss() - before) / cells
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=True)


def _env() -> dict[str, str]:
    import os

    root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def _quiet(_msg: dict) -> None:
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_kernel_rss", description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=2000, help="earlier turns in the session")
    parser.add_argument("--cells", type=int, default=300, help="cells measured after warm-up")
    parser.add_argument("--runs", type=int, default=3, help="kernels per mode")
    args = parser.parse_args(argv)
    home, sid = session_of(args.turns)
    print(f"session {sid}: {args.turns} earlier turns, home {home}")
    cells = f"cells 100 to {100 + args.cells}"
    print(f"KiB of kernel RSS kept per cell, {cells}, {args.runs} kernels each")
    figures: dict[str, list[float]] = {"plain": [], "openprogram": []}
    for _ in range(args.runs):  # interleaved: a change in the machine's load hits both
        figures["plain"].append(run_kernel(False, home, sid, args.cells))
        figures["openprogram"].append(run_kernel(True, home, sid, args.cells))
    for name, values in figures.items():
        spread = f"{min(values):6.1f} .. {max(values):6.1f}"
        print(f"  {name:12s} median {statistics.median(values):6.1f}   spread {spread}")
    extra = statistics.median(figures["openprogram"]) - statistics.median(figures["plain"])
    print(f"  openprogram keeps {extra:+.1f} KiB per cell beyond a plain cell (target <= +5)")


if __name__ == "__main__":
    main()
