"""What a kernel keeps per ``%%openprogram`` cell, beside a kernel without the extension.

usage: python benchmarks/bench_kernel_rss.py [--turns 20000] [--warmups 50] [--cells 300]
       [--runs 3] [--blocks 1] [--collect] [--trace] [--home DIR]

Issue 36 item 6's measure.  Each run starts a real IPython kernel (``jupyter_client``, the
kernel a notebook talks to) as a Jupyter server starts it (``JPY_SESSION_NAME`` set: a
frontend may be watching, so the live DAG widget is shown under each cell, as by default),
runs ``--warmups`` cells, then ``--blocks`` blocks of ``--cells`` cells, reading the
kernel's RSS (``/proc/<pid>/status``) before and after each block.  No ``gc.collect()``
unless ``--collect``: what the cyclic collector has not reached yet the kernel holds too.

- **plain**: a kernel without the extension; each cell calls an undecorated function (the
  honest baseline: what any cell costs the kernel, history and output counters included).
- **openprogram**: ``%load_ext openprogram_magics``, the offline ``test`` provider, the
  session of ``--turns`` earlier turns continued (``%openprogram use ID``); each cell is a
  ``%%openprogram`` turn that calls an ``@agentic_function`` making one ``llm`` call.

``--trace``: one more kernel of each kind that starts ``tracemalloc`` after the warm-ups,
runs one block, takes a snapshot, runs the measured blocks and prints what grew since that
snapshot (so a cache that is full by then counts nothing): per package (the innermost frame
outside the standard library) and per innermost ``openprogram`` line on the allocation's
stack, before and after a ``gc.collect()`` (the difference is garbage awaiting the collector).

The session is built once through the store and kept under ``--home`` (default
``~/.cache/openprogram-bench/kernel_rss/<turns>``, the home folder's disk).
Target (issue 36, item 6): openprogram <= plain + 5 KB a cell, flat over 1,000 cells.
Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from jupyter_client.manager import KernelManager

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_magics import AGENT
from bench_store import grow

CACHE = Path.home() / ".cache" / "openprogram-bench" / "kernel_rss"
#: the kernel's resident KB: all, anonymous (the heap) and file-backed (mapped files)
RSS = "[int(l.split()[1]) for l in open('/proc/self/status') if l.split(':')[0] in FIELDS]"
FIELDS = ("VmRSS", "RssAnon", "RssFile")  # the order /proc/<pid>/status lists them in

TRACE_START = "import tracemalloc as _tm; _tm.start(12)"
TRACE_REPORT = r"""
def _op_trace_report(first, cells, top=12):
    import gc, os, sysconfig, tracemalloc
    held = tracemalloc.take_snapshot()  # before this report allocates anything
    gc.collect()
    alive = tracemalloc.take_snapshot()
    stdlib = sysconfig.get_paths()["stdlib"]
    skip = [tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap*")]
    first = first.filter_traces(skip)
    def where(frame):
        name = frame.filename
        if "site-packages" in name:
            return name.split("site-packages" + os.sep, 1)[1].split(os.sep, 1)[0]
        if name.startswith(stdlib) or name.startswith("<"):
            return None
        parts = name.split(os.sep)
        for pkg in ("openprogram_magics", "openprogram"):
            if pkg in parts:
                i = parts.index(pkg)
                return os.sep.join(parts[i:i + 3 if pkg == "openprogram" else i + 2])
        return name
    def report(label, snap):
        groups, ours = {}, {}
        for stat in snap.filter_traces(skip).compare_to(first, "traceback"):
            frames = list(stat.traceback)[::-1]  # most recent first
            pkg = next((p for p in map(where, frames) if p), "stdlib")
            groups[pkg] = groups.get(pkg, 0) + stat.size_diff
            mine = next((f"{f.filename.rsplit(os.sep, 1)[-1]}:{f.lineno}" for f in frames
                         if "openprogram" in f.filename), None)
            if mine:
                ours[mine] = ours.get(mine, 0) + stat.size_diff
        total = sum(groups.values())
        print(f"{label}: {total / cells / 1024:+.1f} KB a cell")
        for pkg, size in sorted(groups.items(), key=lambda kv: -abs(kv[1]))[:top]:
            print(f"   {size / cells / 1024:+7.2f} KB/cell  {pkg}")
        print("   by the innermost openprogram frame on the allocation's stack:")
        for at, size in sorted(ours.items(), key=lambda kv: -abs(kv[1]))[:top]:
            print(f"   {size / cells / 1024:+7.2f} KB/cell  {at}")
    report("no collect", held)
    report("after gc.collect()", alive)
"""


def session_of(turns: int, home: Path | None) -> tuple[Path, str]:
    """The home and session id of a ``turns``-turn session (built when missing)."""
    from openprogram.store.session.store import SessionStore

    home = home or CACHE / str(turns)
    sid = f"kernel-rss-{turns}"
    store = SessionStore(home)
    grow(store.create_session(sid), turns, f"kernel_rss {turns}")
    store.close()
    return home, sid


class Kernel:
    """A real kernel, started as a Jupyter server starts one for a notebook."""

    def __init__(self, home: Path, notebook: Path) -> None:
        self.km = KernelManager(transport="ipc")
        env = {**_env(), "OPENPROGRAM_HOME": str(home), "JPY_SESSION_NAME": str(notebook)}
        self.km.start_kernel(env=env)
        self.client = self.km.blocking_client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def run(self, code: str, **kwargs: object) -> dict:
        reply = self.client.execute_interactive(code, output_hook=_quiet, **kwargs)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"cell failed: {code!r}: {reply['content']}")
        return reply

    def rss(self, collect: bool) -> list[int]:
        """KB of RSS (all, anonymous, file-backed), read by a cell that stores no history
        (and collects if asked)."""
        code = f"FIELDS = {FIELDS!r}" + ("; import gc; gc.collect()" if collect else "")
        reply = self.run(code, store_history=False, user_expressions={"rss": RSS})
        text = reply["content"]["user_expressions"]["rss"]["data"]["text/plain"]
        return [int(v) for v in text.strip("[]").split(",")]

    def close(self) -> None:
        self.client.stop_channels()
        self.km.shutdown_kernel(now=True)


def run_kernel(
    magic: bool, home: Path, sid: str, args: argparse.Namespace, trace: bool = False
) -> list[list[float]]:
    """KB kept per cell in each block of ``args.cells`` cells (all, anonymous, file-backed)."""
    with tempfile.TemporaryDirectory() as tmp:
        kernel = Kernel(home, Path(tmp) / "bench.ipynb")
        try:
            cell = prepare(kernel, magic, sid)
            for i in range(args.warmups):
                kernel.run(cell.format(f"ticket {i}"))
            warmups = args.warmups
            if trace:  # traced from here; what grows is measured from after one more block
                kernel.run(TRACE_START + "\n" + TRACE_REPORT, store_history=False)
                for i in range(warmups, warmups + args.cells):
                    kernel.run(cell.format(f"ticket {i}"))
                kernel.run("_op_first = _tm.take_snapshot()", store_history=False)
                warmups += args.cells
            figures, done = [], warmups
            before = kernel.rss(args.collect)
            for _ in range(args.blocks):
                for i in range(done, done + args.cells):
                    kernel.run(cell.format(f"ticket {i}"))
                done += args.cells
                after = kernel.rss(args.collect)
                figures.append([(a - b) / args.cells for a, b in zip(after, before, strict=True)])
                before = after
            if trace:
                report = f"_op_trace_report(_op_first, {args.cells * args.blocks})"
                out = kernel.client.execute_interactive(
                    report, store_history=False, output_hook=_print
                )
                if out["content"]["status"] != "ok":
                    print(out["content"])
            return figures
        finally:
            kernel.close()


def prepare(kernel: Kernel, magic: bool, sid: str) -> str:
    if magic:
        kernel.run("%load_ext openprogram_magics")
        kernel.run("%openprogram provider test")
        kernel.run(f"%openprogram use {sid}")
    kernel.run(AGENT)
    return "%%openprogram\ntriage({!r})" if magic else "triage_plain({!r})"


def _env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def _quiet(_msg: dict) -> None:
    return None


def _print(msg: dict) -> None:
    if msg["header"]["msg_type"] == "stream":
        print(msg["content"]["text"], end="")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_kernel_rss", description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=20000, help="earlier turns in the session")
    parser.add_argument("--warmups", type=int, default=50, help="cells run before measuring")
    parser.add_argument("--cells", type=int, default=300, help="cells in a measured block")
    parser.add_argument("--blocks", type=int, default=1, help="measured blocks in a kernel")
    parser.add_argument("--runs", type=int, default=3, help="kernels per mode")
    parser.add_argument("--collect", action="store_true", help="gc.collect() before each read")
    parser.add_argument("--trace", action="store_true", help="where it goes (tracemalloc)")
    parser.add_argument("--home", type=Path, help="OPENPROGRAM_HOME of the session")
    args = parser.parse_args(argv)
    home, sid = session_of(args.turns, args.home)
    print(f"session {sid}: {args.turns} earlier turns, home {home}")
    collect = "after gc.collect()" if args.collect else "no gc.collect()"
    span = f"{args.blocks} block(s) of {args.cells} cells after {args.warmups} warm-ups"
    print(f"KB of kernel RSS kept per cell, {span}, {collect}, {args.runs} kernels each")
    figures: dict[str, list[list[list[float]]]] = {"plain": [], "openprogram": []}
    for _ in range(args.runs):  # interleaved: a change in the machine's load hits both
        figures["plain"].append(run_kernel(False, home, sid, args))
        figures["openprogram"].append(run_kernel(True, home, sid, args))
    medians = {}
    for name, runs in figures.items() if args.runs else ():
        per_run = [[statistics.fmean(b[k] for b in blocks) for k in range(3)] for blocks in runs]
        values = [r[0] for r in per_run]
        medians[name] = statistics.median(values)
        spread = f"{min(values):6.1f} .. {max(values):6.1f}"
        parts = "   ".join(
            f"{what} {statistics.median(r[k] for r in per_run):5.1f}"
            for k, what in ((1, "anonymous"), (2, "mapped files"))
        )
        print(f"  {name:12s} median {medians[name]:6.1f}   spread {spread}   ({parts})")
        if args.blocks > 1:
            for blocks in runs:
                print(f"  {'':12s} per block: " + " ".join(f"{b[0]:6.1f}" for b in blocks))
    if args.runs:
        extra = medians["openprogram"] - medians["plain"]
        print(f"  openprogram keeps {extra:+.1f} KB per cell beyond a plain cell (target <= +5)")
    if args.trace:
        for magic in (False, True):
            name = "openprogram" if magic else "plain"
            print(f"where the {name} kernel's bytes go (tracemalloc, one kernel):")
            run_kernel(magic, home, sid, args, trace=True)


if __name__ == "__main__":
    main()
