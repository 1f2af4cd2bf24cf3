"""Ctrl-C, once or twice in quick succession, never leaves a node ``running``.

Child processes run turns of nested agentic calls (three levels, hundreds of store writes a
second) and catch ``KeyboardInterrupt`` the way IPython does, going on with the next turn;
the test sends SIGINT at random moments — sometimes a second one 0-20 ms after the first,
which can land in the handler, in a ``finally`` that is finishing a node, inside the store's
bookkeeping or in the commit that ends the turn — at least 60 times in all.  After each
child exits (normally, or killed by an uncaught second interrupt), the session is opened and
no node of it may be ``running`` or ``awaiting``; the next turn commits.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from openprogram import session_context
from openprogram.context.nodes import COMPLETED, make_call
from openprogram.store.session.store import SessionStore

ROOT = Path(__file__).resolve().parent.parent
SID = "interrupted_often"
MAX_CHILDREN = 25
ROUNDS = 11  # interrupt rounds per child, until 66 SIGINTs were sent in all

CHILD = """
import sys, time
from openprogram import agentic_function, session_context
from openprogram.store.session.store import SessionStore

@agentic_function
def leaf(i):
    '''Leaf.'''
    return i

@agentic_function
def mid(n):
    '''Middle.'''
    return [leaf(i) for i in range(n)]

@agentic_function
def top(n):
    '''Top.'''
    return [mid(4) for _ in range(n)]

store = SessionStore(sys.argv[1])
with session_context(sys.argv[2], db=store, message="warm-up"):
    leaf(0)  # the first turn's imports (providers, git) done before the interrupts start
print("ready", flush=True)
deadline = time.monotonic() + float(sys.argv[3])
while time.monotonic() < deadline:
    try:
        with session_context(sys.argv[2], db=store, message="turn"):
            top(5)
    except KeyboardInterrupt:
        time.sleep(0.03)  # a second Ctrl-C here escapes: the process ends, like a script
"""


def run_child(home: Path, rng: random.Random) -> int:
    """One child under fire; returns how many SIGINTs it was sent."""
    seconds = ROUNDS * 0.09 + 0.5
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(home), SID, str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == b"ready"
    sent = 0
    for _ in range(ROUNDS):
        time.sleep(rng.uniform(0.02, 0.06))
        if child.poll() is not None:
            break
        child.send_signal(signal.SIGINT)
        sent += 1
        if rng.random() < 0.6:  # twice in quick succession
            time.sleep(rng.uniform(0.0, 0.02))
            if child.poll() is not None:
                break
            child.send_signal(signal.SIGINT)
            sent += 1
    child.wait(timeout=60)
    return sent


def test_double_interrupts_leave_no_node_running(op_home: Path) -> None:
    rng = random.Random(int(os.environ.get("OP_INTERRUPT_SEED", "8")))
    store = SessionStore(op_home)
    store.create_session(SID)
    store.close()
    sent = children = 0
    while sent < 66 and children < MAX_CHILDREN:  # a child killed early gets fewer
        children += 1
        sent += run_child(op_home, rng)
        store = SessionStore(op_home)  # the next open: recovers whatever the child left
        session = store.open(SID)
        stuck = [(n.name, n.status) for n in session.nodes() if n.status in ("running", "awaiting")]
        store.close()
        assert stuck == []
    assert sent >= 60
    with session_context(SID, message="after") as handle:  # the session goes on
        handle.writer.append(make_call("turn", "after", status=COMPLETED), turn_level=True)
    store = SessionStore(op_home)
    names = [n.name for n in store.open(SID).nodes()]
    store.close()
    assert names[-1] == "after" and names.count("top") > 3
