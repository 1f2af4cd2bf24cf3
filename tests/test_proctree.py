"""Ending a process and everything under it (``agent/proctree.py``), a child that left its
parent's session with ``setsid`` included: real processes, on Linux."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import until

from openprogram.agent.proctree import descendants, end_tree, parent_links, supported

pytestmark = pytest.mark.skipif(not supported(), reason="needs /proc (Linux)")

# a child that starts a grandchild in a session of its own, says its pid, and waits
PARENT = """
import subprocess, sys
PAUSE = "import os, signal; os.setsid(); signal.pause()"
grandchild = subprocess.Popen([sys.executable, "-c", PAUSE])
print(grandchild.pid, flush=True)
grandchild.wait()
"""


def ended(pid: int) -> bool:
    """Gone, or a zombie waiting for whoever adopted it to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"Z", b"X")


def test_end_tree_kills_the_parent_and_a_grandchild_that_called_setsid() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        grandchild = int(parent.stdout.readline())
        assert until(lambda: os.getsid(grandchild) == grandchild)  # it left the session
        assert parent_links()[grandchild] == parent.pid
        assert descendants(parent.pid) == [grandchild]

        signalled = end_tree(parent.pid, include_root=True)
        assert sorted(signalled) == sorted([parent.pid, grandchild])
        assert parent.wait() == -signal.SIGKILL
        assert until(lambda: ended(grandchild))
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_descendants_follow_the_parent_links_children_first() -> None:
    links = {2: 1, 3: 1, 4: 2, 5: 4, 9: 8}
    assert descendants(1, links) == [2, 3, 4, 5]
    assert descendants(9, links) == [] and descendants(5, links) == []
