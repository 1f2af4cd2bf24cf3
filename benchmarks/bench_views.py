"""Whole-session views from a cold process, per size, beside ``git log --oneline | head -300``
(issue 23 item 3).

    python benchmarks/bench_views.py [--sizes 100,20000] [--big] [--repeats 5] [--cache DIR]

``--big`` adds the 100,000-turn session.  Sessions are bulk-built (not through the
store's write path: a turn there costs a commit): a session made by the store, then one
``git fast-import`` commit holding every further turn (a cell, a function, two ``llm``
calls with usage and a tool call: 5 nodes of ~0.3 KB, the files the store writes) and a
sealed index for every full bucket, then the store's own maintenance (sparse checkout of
the newest turns).  Built once under ``benchmarks/.cache/views/`` (gitignored; 20,000
turns ~25 s, 100,000 ~2-3 min on 2 shared cores).  Each measurement is a fresh process,
wall time with Python's start included:

- ``sessions show``: ``openprogram sessions show ID`` (the newest 300 rows, counts);
- ``show --page 2``: the 300 rows before those;
- ``sessions usage``: the usage table, from the index;
- ``%openprogram dag``: ``show_dag`` and its saved display bundle, with the node files read,
  timed in a process that has imported IPython and ipykernel first (as a kernel has before
  its first cell: the baseline is a kernel without the extension; ipywidgets and the
  extension's own imports are counted);
- ``budget``: a session budget's first check (``Budget.spent``);
- beside them ``git log --oneline | head -300`` in the session folder.

Figures: median and range of ``--repeats`` runs; the disk ``OPENPROGRAM_HOME`` is on is
printed (``df``).  No assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CACHE = ROOT / "benchmarks" / ".cache" / "views"
LAYOUT = "v2"  # bump when the on-disk layout changes (cached sessions are rebuilt)
TEXT = "the quick brown fox jumps over the lazy dog " * 3

DAG_PROBE = r"""
import json, os, sys, time
import IPython, ipykernel.ipkernel  # a kernel has these loaded before its first cell runs
t = time.perf_counter()
os.environ["OPENPROGRAM_HOME"] = HOME
from openprogram.store.session import files
from openprogram_magics.widget import SavedDag, show_dag
reads = []
real = files.read_bytes
def counted(path, *args, **kwargs):
    if "/history/" in str(path) and not str(path).endswith("index.json"):
        reads.append(path)
    return real(path, *args, **kwargs)
files.read_bytes = counted
from openprogram.store.session import queries
from openprogram.store.session.history import Repository
blob_at, read_paths = Repository.blob_at, queries.read_paths
def counted_blob(self, rel, *args):
    reads.append(rel)
    return blob_at(self, rel, *args)
def counted_paths(repo, rels):
    reads.extend(rels)
    return read_paths(repo, rels)
Repository.blob_at, queries.read_paths = counted_blob, counted_paths
data, _ = SavedDag(show_dag(SID, last_turns=50))._repr_mimebundle_()
out = {"ms": (time.perf_counter() - t) * 1000, "reads": len(reads),
       "bytes": len(json.dumps(data))}
print("RESULT " + json.dumps(out))
"""

BUDGET_PROBE = r"""
import json, os, time
t = time.perf_counter()
from openprogram.store.session.store import SessionStore
from openprogram.store.session.context import SessionNodeWriter
from openprogram.usage.budget import Budget
spent = Budget(tokens=10**12).spent(SessionNodeWriter(SessionStore(HOME), SID))
out = {"ms": (time.perf_counter() - t) * 1000, "tokens": spent.tokens}
print("RESULT " + json.dumps(out))
"""


def fresh(code: str, **values: Any) -> dict[str, Any]:
    header = "".join(f"{k} = {v!r}\n" for k, v in values.items())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", header + code], capture_output=True, text=True, env=env
    )
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])  # type: ignore[no-any-return]
    raise RuntimeError(f"probe failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")


def cli_ms(home: Path, *args: str) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENPROGRAM_HOME": str(home)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "openprogram.cli", *args], env=env, capture_output=True, text=True
    )
    took = (time.perf_counter() - started) * 1000
    if done.returncode:
        raise RuntimeError(f"openprogram {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return took, done.stdout


def git_log_head_ms(path: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        "git log --oneline | head -300", shell=True, cwd=path, capture_output=True, check=True
    )
    return (time.perf_counter() - started) * 1000


# -- building ---------------------------------------------------------------------------
def build(size: int, cache: Path) -> tuple[Path, str]:
    """A session of ``size`` turns under ``cache`` (built once)."""
    home = cache / LAYOUT / str(size)
    sid = f"views{size}"
    if (home / "built").exists():
        return home, sid
    shutil.rmtree(home, ignore_errors=True)
    started = time.perf_counter()
    from openprogram.store.session.store import SessionStore

    store = SessionStore(home)
    session = store.create_session(sid)
    path = session.path
    root_id = session.head_id
    store.close()
    head = bulk_commit(path, size, root_id)
    for name in ("live.db", "live.db-wal", "live.db-shm"):  # rebuilt from git at the open
        (path / ".state" / name).unlink(missing_ok=True)
    store = SessionStore(home)
    session = store.open(sid)
    assert session.head_id == head, (session.head_id, head)
    store.close()
    (home / "built").write_text(str(size))
    print(f"  [built {size} turns in {time.perf_counter() - started:.1f} s]", flush=True)
    return home, sid


def turn_nodes(turn: int, seq: int, pred: str) -> list[Any]:
    from openprogram.context.nodes import COMPLETED, make_call

    cell = make_call("turn", "cell", input={"code": f"survey({turn})"}, status=COMPLETED)
    cell.predecessor = pred
    fn = make_call("function", "survey", input={"topic": TEXT}, caller=cell.id)
    nodes = [cell, fn]
    for k in range(2):
        llm = make_call("llm", "test", input={"content": TEXT}, caller=fn.id)
        llm.output = f"answer {k} of turn {turn}"
        llm.metadata.update(status=COMPLETED, duration_ms=12.5, cost=0.0001)
        llm.metadata["usage"] = {"input_tokens": 120, "output_tokens": 30}
        nodes.append(llm)
    tool = make_call("tool", "search", input={"query": TEXT[:40]}, caller=fn.id)
    tool.output = [TEXT[:40]]
    nodes.append(tool)
    for offset, node in enumerate(nodes):
        node.seq, node.turn = seq + offset, turn
        node.metadata["status"] = COMPLETED
        node.output = node.output if node.output is not None else "done"
    return nodes


def bulk_commit(path: Path, size: int, root_id: str) -> str:
    """One ``git fast-import`` commit on the session's HEAD with turns 1..size-1."""
    from openprogram.store.session.history import MAIN_REF, Repository
    from openprogram.store.session.index import node_relpath
    from openprogram.store.session.records import node_record

    repo = Repository(path)
    parent = repo.read_ref()
    assert parent is not None
    repo.close()
    proc = subprocess.Popen(
        ["git", "fast-import", "--quiet", "--done"], cwd=path, stdin=subprocess.PIPE
    )
    out = proc.stdin
    assert out is not None
    pred, seq, mark = root_id, 1, 0
    blob_marks: list[tuple[str, int]] = []
    for turn in range(1, size):
        nodes = turn_nodes(turn, seq, pred)
        for node in nodes:
            data = node_record(node)
            rel = node_relpath(node)
            mark += 1
            out.write(b"blob\nmark :%d\ndata %d\n%s\n" % (mark, len(data), data))
            blob_marks.append((rel, mark))
        seq += 5
        pred = nodes[0].id
    meta = json.loads((path / "meta.json").read_text())
    meta.update(turns=size - 1, head_id=pred, updated_at=time.time())
    meta_data = json.dumps(meta, indent=1).encode()
    message = f"{size - 1} turns (bulk-built by bench_views)".encode()
    when = int(time.time())
    out.write(b"commit %s\n" % MAIN_REF.encode())
    out.write(b"committer openprogram <openprogram@localhost> %d +0000\n" % when)
    out.write(b"data %d\n%s\nfrom %s\n" % (len(message), message, parent.hex().encode()))
    for rel, m in blob_marks:
        out.write(b"M 100644 :%d %s\n" % (m, rel.encode()))
    out.write(b"M 100644 inline meta.json\ndata %d\n%s\n" % (len(meta_data), meta_data))
    out.write(b"done\n")
    out.close()
    if proc.wait():
        raise RuntimeError("git fast-import failed")
    (path / "meta.json").write_bytes(meta_data)
    return str(pred)


# -- measuring --------------------------------------------------------------------------
def spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.0f} ({min(values):.0f}-{max(values):.0f})"


def measure(home: Path, sid: str, repeats: int) -> dict[str, Any]:
    path = home / "sessions" / sid
    got: dict[str, Any] = {k: [] for k in ("show", "page2", "usage", "dag", "budget", "git")}
    for _ in range(repeats):
        got["show"].append(cli_ms(home, "sessions", "show", sid)[0])
        got["page2"].append(cli_ms(home, "sessions", "show", sid, "--page", "2")[0])
        got["usage"].append(cli_ms(home, "sessions", "usage", sid)[0])
        dag = fresh(DAG_PROBE, HOME=str(home), SID=sid)
        got["dag"].append(dag["ms"])
        got["budget"].append(fresh(BUDGET_PROBE, HOME=str(home), SID=sid)["ms"])
        got["git"].append(git_log_head_ms(path))
    got["reads"], got["bytes"] = dag["reads"], dag["bytes"]
    return got


def python_start_ms() -> float:
    """What starting Python costs on this machine (its ``site``, ``.pth`` files included)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return (time.perf_counter() - started) * 1000


def disk_of(path: Path) -> str:
    out = subprocess.run(
        ["df", "-T", str(path)], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    return " ".join(out[-1].split()[:2]) if len(out) > 1 else "?"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,20000")
    parser.add_argument("--big", action="store_true", help="add the 100,000-turn session")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cache", type=Path, default=CACHE)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] + ([100_000] if args.big else [])
    args.cache.mkdir(parents=True, exist_ok=True)
    print(f"disk: {disk_of(args.cache)} ({args.cache}); load {os.getloadavg()[0]:.1f}")
    bare = [python_start_ms() for _ in range(args.repeats)]
    print(f"a bare `python -c pass` here (in every figure but git's): {spread(bare)}")
    print(
        f"{'turns':>7} {'show':>17} {'show --page 2':>17} {'usage':>17} {'%openprogram dag':>17}"
        f" {'budget':>17} {'git log|head':>17} {'dag reads':>9} {'dag KB':>7}"
    )
    for size in sizes:
        home, sid = build(size, args.cache)
        got = measure(home, sid, args.repeats)
        print(
            f"{size:>7} "
            + " ".join(
                f"{spread(got[k]):>17}" for k in ("show", "page2", "usage", "dag", "budget", "git")
            )
            + f" {got['reads']:>9} {got['bytes'] / 1e3:>7.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
