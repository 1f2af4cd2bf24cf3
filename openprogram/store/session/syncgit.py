"""How sharing runs git: every git command of :mod:`sync` and :mod:`syncmerge` goes through
:func:`git` (no hooks, no programs the repository names, objects checked on receipt), plus
the few questions they ask of a commit (a branch's tip, ancestry) and the one-line error a
failed git command becomes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import BinaryIO

from openprogram.store.session.incoming import Caps, scan_pack
from openprogram.store.session.safegit import git_command, run_git
from openprogram.store.session.syncrules import SyncError, redact_text

INCOMING = "refs/openprogram/incoming"
QUARANTINE_PREFIX = ".incoming-"


def git(
    repo: Path,
    *args: str,
    input: bytes | None = None,
    check: bool = True,
    network: str | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run git on ``repo`` through :func:`safegit.run_git` (no hooks, no programs the
    repository names, objects checked on receipt).  ``network`` (the allowed protocols)
    also lets git use the user's own ways to authenticate — their credential helper,
    askpass, ssh agent — and nothing else.  A quarantine keeps its ``alternates`` (ours)."""
    return run_git(
        repo,
        "-c",
        "transfer.fsckObjects=true",
        *args,
        input=input,
        check=check,
        network=network,
        sanitize=not repo.name.startswith(QUARANTINE_PREFIX),
    )


def git_out(repo: Path, *args: str) -> str:
    return git(repo, *args).stdout.decode().strip()


def git_fail(what: str, result: subprocess.CompletedProcess[bytes], url: str = "") -> SyncError:
    text = result.stderr.decode(errors="replace").strip().splitlines()
    reason = next((t for t in reversed(text) if t.strip()), "git failed")
    # git quotes the URL it was given (``could not read Password for 'https://TOKEN@…'``):
    # no credential of any URL, nor the parts of ``url``'s, reaches the message
    return SyncError(redact_text(f"{what}: {' '.join(reason.split())[:300]}", url))


def main_commit(repo: Path) -> str | None:
    result = git(repo, "rev-parse", "-q", "--verify", "refs/heads/main^{commit}", check=False)
    return result.stdout.decode().strip() or None


def is_ancestor(repo: Path, a: str, b: str) -> bool:
    return git(repo, "merge-base", "--is-ancestor", a, b, check=False).returncode == 0


def index_pack(repo: Path, pack: BinaryIO, caps: Caps) -> None:
    """Store the pack read from ``pack`` in ``repo`` (a quarantine) through ``git
    index-pack --strict`` (git's fsck of every object, thin packs completed from the
    borrowed objects), counting it against ``caps`` as it streams: git is stopped the
    moment the declared sizes pass them, before it inflates what would pass them."""
    argv, env = git_command(
        repo, "index-pack", "--strict", "--fix-thin", "--stdin",
        sanitize=not repo.name.startswith(QUARANTINE_PREFIX),
    )  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=repo, env=env, stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stderr is not None
    stdin = proc.stdin

    def feed(data: bytes) -> None:
        try:
            stdin.write(data)
        except BrokenPipeError:  # git stopped (it says why on stderr)
            pass

    try:
        scan_pack(pack, feed, caps)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        try:
            stdin.close()
        except BrokenPipeError:
            pass
    err = proc.stderr.read()
    if proc.wait() != 0:
        lines = err.decode(errors="replace").splitlines()
        why = next((t for t in lines if t.startswith("error:")), lines[-1] if lines else "")
        failed = subprocess.CompletedProcess[bytes]([], 1, b"", why.encode())
        raise git_fail("refused by git's object check", failed)
