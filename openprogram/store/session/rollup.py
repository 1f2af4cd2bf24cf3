"""A session's small packs rolled up into one by git's ``pack-objects`` fed their objects'
names (no revision walk: the cost is that of the packs rolled up, not of the history).

Which packs: git's ``--geometric=2`` rule on the packs' object counts (the packs left form
a progression, each at least twice the one below it, so they stay logarithmic in number);
the big ones are left alone.  The names come from gitdb's index reader (a big pack's from
``git show-index``) and the loose objects' file names, go to ``git pack-objects`` on its
standard input, and the new pack, its index counted to hold them all, is renamed into
``objects/pack`` index first (gitdb lists ``.pack`` files, git uses a pack once both
exist); only then are the packs rolled up removed, each ``.pack`` before its index, and the
loose objects packed dropped by ``git prune-packed``.  A reader that listed a pack removed
looks again and finds its objects in the new one (decision 0065).

A killed writer's debris found there (temporary files, an index without its pack) is
removed once old.  :class:`RollUp` runs it in a thread of the writer, its one git command
at a time a child the writer never waits for; ``terminate`` ends it (nothing is removed
unless the new pack is complete and in place)."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext, suppress
from pathlib import Path
from typing import Any

from openprogram.errors import StoreError
from openprogram.store.session import safegit

FACTOR = 2  # each pack left at least this many times the objects of the next smaller one
WINDOW = 10  # pack-objects' delta window (its default), one thread
TMP_PREFIX = "tmp_rollup_"  # the new pack's name until it is complete (a stray once old)
STRAY_S = 3600.0  # a temporary pack file, or an index without its pack, older: a dead writer's
_EXTRA = (".rev", ".bitmap", ".promisor", ".mtimes")  # beside a pack, removed with it

_FAN, _LOOSE = re.compile("[0-9a-f]{2}"), re.compile("[0-9a-f]{38}")  # a loose object's path
_counts: dict[str, dict[str, int]] = {}  # pack folder -> pack -> objects
_counting = threading.Lock()
READ_HERE = 512  # a pack of up to this many objects: its names read here (GIL: < 1 ms),
# a bigger one's by git


def _names(folder: Path, pack: str, git: Callable[..., bytes], index: Any) -> list[bytes]:
    """The hex names of a pack's objects: gitdb's index reader for a small pack, ``git
    show-index`` (``offset sha (crc)`` a line: the work in git) for a big one."""
    if index.size() <= READ_HERE:
        return [index.sha(i).hex().encode() for i in range(index.size())]
    return git("show-index", from_file=folder / f"{pack}.idx").split()[1::3]


def _remove_strays(folder: Path, names: set[str]) -> None:
    """Of ``names`` in ``folder``, temporary pack files and indexes without a pack (a
    writer killed mid-write) older than ``STRAY_S``: removed."""
    for name in names:
        packless = name.endswith(".idx") and f"{name[:-4]}.pack" not in names
        stray = name.startswith("tmp_") or packless
        with suppress(FileNotFoundError):
            if stray and time.time() - os.lstat(folder / name).st_mtime > STRAY_S:
                os.unlink(folder / name)


def _loose(objects: Path) -> set[bytes]:
    found: set[bytes] = set()
    with suppress(FileNotFoundError):
        for fan in os.listdir(objects):
            if _FAN.fullmatch(fan):
                with suppress(OSError):  # (not a writer's temporary file)
                    names = os.listdir(objects / fan)
                    found.update((fan + name).encode() for name in names if _LOOSE.fullmatch(name))
    return found


def geometric_split(counts: list[int], factor: int = FACTOR) -> int:
    """How many of ``counts`` (ascending) to roll into one so that it and those left form a
    progression by ``factor`` (git's ``split_pack_geometry`` of ``repack --geometric``)."""
    i = len(counts) - 1
    while i > 0 and counts[i] >= factor * counts[i - 1]:
        i -= 1
    split = i + 1 if i > 0 else 0
    total = sum(counts[:split])
    while split < len(counts) and counts[split] < factor * total:
        total += counts[split]
        split += 1
    return split


def roll_up(git_dir: Path, git: Callable[..., bytes]) -> bool:
    """Roll the small packs of ``git_dir`` (made safe: :meth:`RollUp.run`) and its loose
    objects into one by ``git`` (:meth:`RollUp.git`); whether a pack was written.  Safe
    beside writers, readers and another roll-up: a pack is removed only once a complete pack
    holding each of its objects is in place."""
    from gitdb.pack import PackIndexFile

    folder = git_dir / "objects" / "pack"
    listed = set(os.listdir(folder)) if folder.is_dir() else set()
    _remove_strays(folder, listed)  # (a killed writer's debris: never one of the packs below)
    packs = [
        name[:-5]
        for name in listed
        if name.startswith("pack-") and name.endswith(".pack")
        and f"{name[:-5]}.idx" in listed and f"{name[:-5]}.keep" not in listed
    ]  # fmt: skip
    indexes = {pack: PackIndexFile(str(folder / f"{pack}.idx")) for pack in packs}
    with _counting:  # (a pack's name is its content's hash: its count, once read, is known)
        known = _counts.setdefault(str(folder), {})
        counts = {pack: known.get(pack) or indexes[pack].size() for pack in packs}
        known.clear()
        known.update(counts)
    packs.sort(key=lambda pack: (counts[pack], pack))
    chosen = packs[: geometric_split([counts[pack] for pack in packs])]
    loose = _loose(git_dir / "objects")
    if len(chosen) < 2 and not loose:
        return False
    names = {pack: _names(folder, pack, git, indexes[pack]) for pack in chosen}
    indexes.clear()  # (their maps unused: unmapped by the writer's next safegit.free_maps)
    wanted = set(loose).union(*(names[pack] for pack in chosen))
    base = folder / f"{TMP_PREFIX}{os.getpid()}_{threading.get_ident()}_{os.urandom(3).hex()}"
    try:
        made = git(
            "pack-objects", "-q", "--delta-base-offset", "--threads=1", f"--window={WINDOW}",
            str(base), stdin=b"\n".join(wanted) + b"\n",
        ).decode().strip()  # fmt: skip
        written = f"{base}-{made}"
        # pack-objects packs exactly the objects named (it fails on one it cannot read)
        if PackIndexFile(f"{written}.idx").size() != len(wanted):
            raise StoreError(f"the roll-up's new pack in {folder} lacks objects it was given")
        stamp = 0
        for pack in chosen:  # (one removed meanwhile by another roll-up: none)
            with suppress(OSError):
                stamp = max(stamp, os.stat(folder / f"{pack}.pack").st_mtime_ns)
        if stamp:  # listed by age (git, gitdb): where the packs it replaces were
            os.utime(f"{written}.pack", ns=(stamp, stamp))
        prefix = os.path.basename(written)
        exts = {n[len(prefix) :] for n in os.listdir(folder) if n.startswith(prefix)}
        for ext in (".idx", *_EXTRA, ".pack"):  # the index first: a pack is used with it
            if ext in exts:
                os.replace(f"{written}{ext}", folder / f"pack-{made}{ext}")
    finally:
        for name in os.listdir(folder):
            if name.startswith(base.name):
                with suppress(FileNotFoundError):
                    os.unlink(folder / name)
    for pack in chosen:
        if pack != f"pack-{made}":
            for ext in (".pack", *_EXTRA, ".idx"):  # the pack first: gitdb lists those
                if f"{pack}{ext}" in listed:
                    with suppress(FileNotFoundError):
                        os.unlink(folder / f"{pack}{ext}")
    if loose:
        git("prune-packed", "-q")
    return True


class RollUp(threading.Thread):
    """:func:`roll_up` in a thread, beside the writer, as a process is kept (``poll``,
    ``wait``, ``terminate``: its git child ended, no command started after); ``done`` is
    called once it has ended, whatever the outcome."""

    def __init__(self, git_dir: Path, done: Callable[[], None] | None = None) -> None:
        super().__init__(name=f"rollup {git_dir.parent.name}", daemon=True)
        self.git_dir, self.done = git_dir, done
        self._child: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._ended = False
        self.start()

    def run(self) -> None:
        try:  # the folder made safe here, before it is read (in this thread, not the writer)
            self._argv, self._env = safegit.git_command(self.git_dir.parent)
            roll_up(self.git_dir, self.git)
        except Exception:  # (ended; another roll-up took the packs first; a pack unreadable):
            pass  # the packs stay as they are, the next roll-up looks again
        finally:
            if self.done is not None:
                self.done()

    def git(self, *args: str, stdin: bytes | None = None, from_file: Path | None = None) -> bytes:
        """The output of ``git args`` on the session (:mod:`safegit`'s argv and environment),
        fed ``stdin`` or the file ``from_file``: a child :meth:`terminate` ends."""
        with self._lock:
            if self._ended:
                raise StoreError(f"the roll-up of {self.git_dir.parent} was ended")
            with open(from_file, "rb") if from_file is not None else nullcontext() as source:
                self._child = child = subprocess.Popen(
                    [*self._argv, *args], cwd=self.git_dir.parent, env=self._env,
                    stdin=source or (subprocess.PIPE if stdin is not None else subprocess.DEVNULL),
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                )  # fmt: skip
        out, _ = child.communicate(stdin)
        if child.returncode != 0:
            raise StoreError(f"git {args[0]} exited {child.returncode} in {self.git_dir.parent}")
        return out

    def poll(self) -> int | None:
        return None if self.is_alive() else 0

    def wait(self, timeout: float | None = None) -> int:
        self.join(timeout)
        if self.is_alive():
            raise subprocess.TimeoutExpired("rollup", timeout or 0.0)
        return 0

    def terminate(self) -> None:
        with self._lock:
            self._ended = True
            if self._child is not None and self._child.poll() is None:
                with suppress(OSError):
                    self._child.terminate()
