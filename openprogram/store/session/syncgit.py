"""How sharing runs git: every git command of :mod:`sync` and :mod:`syncmerge` goes through
:func:`git` (no hooks, no programs the repository names, objects checked on receipt), plus
the few questions they ask of a commit (a branch's tip, ancestry) and the one-line error a
failed git command becomes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from openprogram.store.session.safegit import run_git
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
