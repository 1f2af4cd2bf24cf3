"""An import or a pull that meets a full disk, a read-only folder or ``ulimit -f`` (issue 36
item 4): one line, no traceback; every committed turn of the session intact; no debris
(``.incoming-*``) after the next command; and the same import or pull goes through once
the fault is gone.  Real git, real processes (the CLI as people type it), a real tmpfs."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_sync import bare, git, state, turns

from openprogram.store.session.store import SessionStore
from openprogram.store.session.sync import export_bundle, push

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 256 << 10  # `ulimit -f` of the child: more than a session's start, less than a pull


def cli(home: Path, *argv: str, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    def fsize() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENPROGRAM_HOME": str(home)}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "openprogram.cli", *argv],
        capture_output=True, text=True, timeout=300, env=env, cwd=home,
        preexec_fn=fsize if limit is not None else None,
    )  # fmt: skip


@contextmanager
def mounted(where: Path, options: str, source: str = "tmpfs") -> Iterator[None]:
    where.mkdir(parents=True, exist_ok=True)
    args = ["-t", "tmpfs", "-o", options, "tmpfs"] if source == "tmpfs" else ["--bind", source]
    done = subprocess.run(["mount", *args, str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here: {done.stderr.decode().strip()}")
    try:
        if source != "tmpfs":  # a bind mount made read-only
            subprocess.run(["mount", "-o", f"remount,{options},bind", str(where)], check=True)
        yield
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def debris(home: Path) -> list[str]:
    root = home / "sessions"
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".")) if root.is_dir() else []


@pytest.fixture
def alice_ahead(tmp_path: Path) -> Iterator[tuple[SessionStore, Path, Path, Path]]:
    """Alice's session ``s_f``, bob's copy of its first turn (in a home on a 6 MiB tmpfs),
    then ~2 MB of turns of alice's that bob has not: on a remote and in a bundle."""
    alice = SessionStore(tmp_path / "alice")
    url = bare(tmp_path)
    turns(alice, "s_f", "one")
    push(alice, "s_f", f"file://{url}", "file")
    home = tmp_path / "bob"
    with mounted(home, "size=6m"):
        pulled = cli(home, "sessions", "pull", "s_f", f"file://{url}")
        assert pulled.returncode == 0, pulled.stderr
        for _ in range(4):  # incompressible: the pack is as big as the turns
            turns(alice, "s_f", os.urandom(250_000).hex())
        push(alice, "s_f", f"file://{url}", "file")
        bundle = export_bundle(alice, "s_f", tmp_path / "ahead.bundle")
        yield alice, home, url, bundle
    alice.close()


def fill(home: Path) -> Callable[[], None]:
    """Fill the tmpfs of ``home`` but ~300 KB; returns what frees it."""
    ballast = home / "ballast"
    free = os.statvfs(home).f_bavail * os.statvfs(home).f_frsize
    ballast.write_bytes(b"\0" * max(0, free - (300 << 10)))
    return lambda: ballast.unlink()


@pytest.mark.parametrize("op", ["pull", "import", "import as new"])
@pytest.mark.parametrize("fault", ["ulimit -f", "disk full", "read-only"])
def test_an_import_or_a_pull_that_meets_a_fault_is_one_line_and_loses_nothing(
    alice_ahead: tuple[SessionStore, Path, Path, Path], op: str, fault: str
) -> None:
    alice, home, url, bundle = alice_ahead
    argv = {
        "pull": ["sessions", "pull", "s_f", f"file://{url}"],
        "import": ["sessions", "import", str(bundle)],
        "import as new": ["sessions", "import", str(bundle), "--as", "s_new"],
    }[op]
    bob = SessionStore(home)
    before = state(bob, "s_f")
    bob.close()
    if fault == "ulimit -f":
        failed = cli(home, *argv, limit=LIMIT)
    elif fault == "disk full":
        free = fill(home)
        try:
            failed = cli(home, *argv)
        finally:
            free()
    else:
        with mounted(home / "sessions", "ro", source=str(home / "sessions")):
            failed = cli(home, *argv)
    assert failed.returncode != 0, failed.stdout
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("openprogram: "), failed.stderr
    assert "refused" not in lines[0]  # the disk failed, not what arrived
    listed = cli(home, "sessions", "list")  # the next command
    assert listed.returncode == 0, listed.stderr
    assert debris(home) == []
    bob = SessionStore(home)
    assert state(bob, "s_f") == before  # every committed turn intact, nothing half-joined
    assert not bob.exists("s_new")
    path = bob.session_path("s_f")
    assert git(path, "fsck", "--strict", "--no-dangling", "--no-progress") == ""
    bob.close()
    done = cli(home, *argv)  # the fault gone: the same command goes through
    assert done.returncode == 0, done.stderr
    bob = SessionStore(home)
    if op == "import as new":
        assert state(bob, "s_new")[2] == state(alice, "s_f")[2]  # the same commits
    else:
        assert state(bob, "s_f") == state(alice, "s_f")
    bob.close()
