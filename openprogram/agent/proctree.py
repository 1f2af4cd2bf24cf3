"""The processes under a process, and ending all of them, ``setsid`` or not (Linux).

A process that calls ``setsid`` (or double-forks into a daemon) leaves its parent's process
group, so killing the group misses it; it stays the *child* of its parent, though, and an
orphan is re-parented to the nearest ancestor that is a *child subreaper*
(``PR_SET_CHILD_SUBREAPER``) instead of to init.  A subreaper's descendants therefore stay
in its tree of parent links (``/proc/<pid>/stat``) however they detach, and
:func:`end_tree` ends that tree: each process found is stopped (``SIGSTOP``: it can neither
fork nor exit and re-parent its children meanwhile) until a pass finds no new one, then all
are killed.  Elsewhere (no ``/proc``) nothing is found and the caller's process-group kill
is all there is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Iterable

PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1
MAX_PASSES = 1000  # a tree that keeps growing under SIGSTOP is not one (pid reuse): give up


def supported() -> bool:
    return sys.platform.startswith("linux") and os.path.isdir("/proc/self")


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Make this process adopt the orphans among its descendants (Linux); True if it did."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def signal_on_parent_death(signum: int) -> bool:
    """Have the kernel send ``signum`` to this process when the *thread* that started it
    ends (its whole process, or only that thread: the handler tells them apart)."""
    return _prctl(PR_SET_PDEATHSIG, signum)


def parent_links() -> dict[int, int]:
    """pid -> parent pid of every process visible in ``/proc`` (empty elsewhere)."""
    links: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return links
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                data = stat.read()
        except OSError:  # ended meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) > 1 and fields[1].isdigit():
            links[int(name)] = int(fields[1])
    return links


def descendants(root: int, links: dict[int, int] | None = None) -> list[int]:
    """The pids under ``root`` (children first, then theirs...), ``root`` left out."""
    children: dict[int, list[int]] = {}
    for pid, parent in (parent_links() if links is None else links).items():
        children.setdefault(parent, []).append(pid)
    found: list[int] = []
    todo = [root]
    seen = {root}
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                found.append(child)
                todo.append(child)
    return found


def _send(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def end_tree(root: int, *, include_root: bool) -> list[int]:
    """Kill every process under ``root`` (and ``root`` itself when ``include_root``):
    stopped first, pass after pass until no new one appears, then ``SIGKILL``ed together.
    Returns the pids signalled (empty where ``/proc`` is not)."""
    if not supported():
        return []
    stopped: list[int] = []
    known: set[int] = set()
    if include_root:
        _send([root], signal.SIGSTOP)
        stopped.append(root)
        known.add(root)
    for _ in range(MAX_PASSES):
        new = [pid for pid in descendants(root) if pid not in known and pid != os.getpid()]
        if not new:
            break
        _send(new, signal.SIGSTOP)
        stopped += new
        known.update(new)
    _send(stopped, signal.SIGKILL)
    return stopped
