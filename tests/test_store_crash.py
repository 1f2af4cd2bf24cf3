"""Two processes writing one session at once, and a writer killed with SIGKILL mid-turn."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import git

from openprogram import session_context
from openprogram.context.nodes import make_call
from openprogram.store.session.store import SessionStore
from tests.test_live import row_owners

ROOT = Path(__file__).resolve().parent.parent

# Appends TURNS turns of 10 nodes (a turn node + 9 calls under it) through session_context,
# one commit per turn.  Run in the parent and, as a script, in a child process.
WRITER = """
import sys
from openprogram import session_context
from openprogram.context.nodes import COMPLETED, make_call

def write(session_id, tag, turns):
    for t in range(turns):
        with session_context(session_id, message=f"{tag} turn {t}") as handle:
            w = handle.writer
            top = w.append(make_call("turn", f"{tag}-{t}", status=COMPLETED), turn_level=True)
            for k in range(9):
                w.append(make_call("function", f"{tag}-{t}-{k}", caller=top.id, status=COMPLETED))
"""


def spawn(code: str) -> subprocess.Popen[str]:
    """A child Python with the same OPENPROGRAM_HOME (inherited from the test's env)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def git_run(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=path, capture_output=True, text=True)


def fsck(path: Path) -> subprocess.CompletedProcess[str]:
    """``git fsck --strict`` (nothing runs in the background after a close): fsck reports
    loose objects that a concurrent ``prune-packed`` removes (now in a pack) as missing."""
    return git_run(path, "fsck", "--strict", "--no-progress")


def test_two_processes_appending_500_nodes_each_lose_nothing(op_home: Path) -> None:
    with session_context("shared") as created:
        pass
    sid = created.session_id
    child = spawn(
        WRITER
        + textwrap.dedent(
            """
            print("ready", flush=True)
            sys.stdin.readline()  # start together with the parent
            write("shared", "child", 50)
            """
        )
    )
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline().strip() == "ready", child.stderr.read()  # type: ignore[union-attr]
    child.stdin.write("go\n")
    child.stdin.flush()
    namespace: dict[str, Any] = {}
    exec(WRITER, namespace)
    namespace["write"](sid, "parent", 50)
    _out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err

    session = SessionStore(op_home).open(sid)  # a fresh view, as the next process gets
    nodes = [n for n in session.nodes() if n.kind != "root"]
    names = {n.name for n in nodes}
    assert len(nodes) == 1000
    for tag in ("parent", "child"):
        assert {f"{tag}-{t}-{k}" for t in range(50) for k in range(9)} <= names
    seqs = [n.seq for n in session.nodes()]
    assert len(seqs) == len(set(seqs)) == 1001
    # both writers' turns are on one conversation chain: HEAD was only ever moved atomically
    chain = session.chain(session.head_id, 10_000)
    assert [c.kind for c in chain].count("turn") == 100
    assert session.problems == []

    path = op_home / "sessions" / sid
    checked = fsck(path)
    assert checked.returncode == 0 and checked.stdout == "", checked.stdout + checked.stderr
    log = git_run(path, "log", "--format=%s").stdout.splitlines()
    assert sum(1 for m in log if "child turn" in m) == 50
    assert sum(1 for m in log if "parent turn" in m) == 50
    # the committed tree holds every node file
    repo = git.Repo(path)
    blobs: list[Any] = list(repo.head.commit.tree.traverse())
    committed = [str(b.path) for b in blobs if str(b.path).endswith(".json")]
    repo.close()
    node_files = [p for p in committed if p.startswith("history/") and p.count("/") == 3]
    assert len(node_files) == 1001
    # and nothing else: the one index is the live database's (no bucket index committed)
    assert [p for p in committed if p not in node_files] == ["meta.json"]


KILLED = """
import json, sys, time
from openprogram import session_context
from openprogram.context.nodes import COMPLETED, make_call

ids = {}
for t in range(2):  # two finished, committed turns
    with session_context("victim", message=f"turn {t}") as h:
        top = h.writer.append(make_call("turn", f"done-{t}", status=COMPLETED), turn_level=True)
        ids[f"done-{t}"] = top.id
# the third turn is left mid-way
ctx = session_context("victim", message="interrupted turn")
h = ctx.__enter__()
w = h.writer
top = w.append(make_call("turn", "mid"), turn_level=True)
fn = w.append(make_call("function", "analyse", caller=top.id))
llm = w.append(make_call("llm", "test", caller=fn.id))
llm.output, llm.metadata["status"] = "partial answer", COMPLETED
w.update(llm)
ask = w.append(make_call("ask_user", "ask", caller=fn.id, status="awaiting"))
ids.update(mid=top.id, fn=fn.id, llm=llm.id, ask=ask.id)
print(json.dumps(ids), flush=True)
time.sleep(120)
"""


def test_a_writer_killed_mid_turn_is_recovered_on_the_next_open(op_home: Path) -> None:
    child = spawn(KILLED)
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, child.stderr.read()  # type: ignore[union-attr]
    ids = json.loads(line)
    path = op_home / "sessions" / "victim"
    try:
        # while the writer lives, opening the session must not touch its running turn
        alive = SessionStore(op_home)
        session = alive.open("victim")
        assert ids["done-1"] in {n.id for n in session.nodes()}
        for key in ("mid", "fn", "llm", "ask"):
            if key in {n.id for n in session.nodes()}:
                assert session.get(ids[key]).status != "interrupted"
        assert not any(
            m.startswith("recovery") for m in git_run(path, "log", "--format=%s").stdout.split("\n")
        )
        assert row_owners(path)  # its rows (the turn in flight) are kept
        alive.close()
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL

    session = SessionStore(op_home).open("victim")
    by_id = {n.id: n for n in session.nodes()}
    assert set(ids.values()) <= set(by_id)  # no node lost
    assert by_id[ids["mid"]].status == "interrupted"
    assert by_id[ids["fn"]].status == "interrupted"
    assert by_id[ids["llm"]].status == "completed"
    assert by_id[ids["llm"]].output == "partial answer"
    assert by_id[ids["ask"]].status == "unanswered"
    assert by_id[ids["done-1"]].status == "completed"
    assert by_id[ids["mid"]].predecessor == ids["done-1"]
    assert session.head_id == ids["mid"]

    log = git_run(path, "log", "--format=%s").stdout.splitlines()
    assert log[0].startswith("recovery")
    checked = fsck(path)
    assert checked.returncode == 0 and checked.stdout == "", checked.stderr
    assert row_owners(path) == []  # recovered and removed

    # recovered once: a later open finds nothing more to do, and the session continues
    with session_context("victim", db=SessionStore(op_home), message="after") as h:
        nxt = h.writer.append(make_call("turn", "after", status="completed"), turn_level=True)
    assert nxt.predecessor == ids["mid"]
    log = git_run(path, "log", "--format=%s").stdout.splitlines()
    assert sum(1 for m in log if m.startswith("recovery")) == 1
    assert log[0].startswith("turn ")


def test_a_long_lived_process_sees_turns_and_titles_other_processes_wrote(
    op_home: Path,
) -> None:
    """A kernel keeps its session open for hours while a CLI run or a second kernel writes
    to it: its next turn must see their turns as history, and keep the title they set."""
    from openprogram import create_runtime
    from openprogram.providers.test import TestProvider

    provider = TestProvider()
    rt = create_runtime(provider)
    with session_context("s_shared", runtime=rt):
        rt.exec("first from the kernel")
    script = (
        "from openprogram import create_runtime, session_context\n"
        "from openprogram.agent.session_db import default_db\n"
        "rt = create_runtime('test')\n"
        "with session_context('s_shared', runtime=rt) as h:\n"
        "    rt.exec('second from another process')\n"
        "    h.writer.session.set_meta(title='Plan the offsite')\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, env={**os.environ})
    with session_context("s_shared", runtime=rt):
        rt.exec("third from the kernel")
    contents = [m["content"] for m in provider.requests[-1].messages]
    assert contents[:4] == [
        "first from the kernel",
        "[test reply] first from the kernel",
        "second from another process",
        "[test reply] second from another process",
    ]
    meta = json.loads((op_home / "sessions" / "s_shared" / "meta.json").read_text())
    assert meta["title"] == "Plan the offsite" and meta["turns"] == 3
