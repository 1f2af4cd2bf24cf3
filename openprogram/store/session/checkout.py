"""What of a session's history is checked out: its newest turns.

Each node file is ~1 KB of JSON in a 4 KiB block (and each turn a 4 KiB folder), so a
checked-out history takes 4-8x its bytes.  Only the newest ``RECENT_TURNS`` committed turns
(and whatever is not committed yet) stay on disk; older turns live in git only.  The
store reads them from there: a sealed bucket from its committed index (:mod:`buckets`),
any other turn's entries from the local index cache keyed by the turn's tree sha
(:mod:`nodeindex`), a node's content from its blob in HEAD (``Session.get``).

Git's own sparse checkout does it (``core.sparseCheckout``, cone mode, in the canonical
config of :mod:`safegit`): ``.git/info/sparse-checkout`` lists the turn folders kept, and
:func:`refresh` writes it for the very commit it sets git's index to, so a turn committed
since is not in the index and stays on disk.  (A user's own ``git checkout`` with the
patterns of an older refresh may leave the newest turns out until the next one: the store
reads them from git meanwhile.)  Git marks the files it left out skip-worktree: ``git
status`` stays clean; ``git log -p``, ``git show HEAD:history/…`` and ``git grep …
HEAD`` see all of them; a clone checks everything out; ``git sparse-checkout disable``
brings every file back and the session keeps them (:func:`safegit.sparse_wanted`).

:func:`refresh` is the one place that sets git's index and moves the window; the detached
maintenance runs it (every ``MAINTAIN_EVERY`` commits and when a session with more than
``RECENT_TURNS`` turns is closed), and a pull after joining a line.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from openprogram.store.session.buckets import bucket_trees
from openprogram.store.session.files import atomic_write, ensure_dir
from openprogram.store.session.history import TREE_MODE, Repository
from openprogram.store.session.index import TURN_DIR_NAME, TURNS_PER_BUCKET
from openprogram.store.session.materialise import materialise, turn_folders
from openprogram.store.session.safegit import run_git, sparse_wanted

RECENT_TURNS = 20  # committed turns kept checked out (what a prompt's history reads)


def patterns(kept: Mapping[str, list[str]]) -> bytes:
    """Sparse-checkout patterns in git's cone form (matched by hashing, not one pattern
    after another: ``reapply`` at 20,000 turns took 9.5 s with a list of what to leave
    out) keeping the files at the top, and of each bucket in ``kept`` its own files and the
    turn folders listed.  Names the store made (``BUCKET_NAME``/``TURN_DIR_NAME``), never
    taken from the folder."""
    lines = ["/*", "!/*/", "/history/", "!/history/*/"]
    for bucket in sorted(kept, key=int):
        lines += [f"/history/{bucket}/", f"!/history/{bucket}/*/"]
        lines += [f"/history/{bucket}/{turn}/" for turn in sorted(kept[bucket])]
    return ("\n".join(lines) + "\n").encode()


def recent_turns(repo: Repository, trees: Mapping[str, bytes]) -> dict[str, list[str]]:
    """Bucket -> its turn folders among the newest ``RECENT_TURNS`` of ``trees`` (bucket
    name -> tree): only the trees of the buckets the window reaches into are read."""
    kept: dict[str, list[str]] = {}
    newest = -1
    for name in sorted(trees, key=int, reverse=True):
        turns = [
            turn
            for turn, (_sha, mode) in repo.read_tree(trees[name]).items()
            if mode == TREE_MODE and TURN_DIR_NAME.fullmatch(turn)
        ]
        newest = max([newest, *map(int, turns)])
        first = newest - RECENT_TURNS + 1
        kept[name] = [turn for turn in turns if int(turn) >= first]
        if newest >= 0 and int(name) * TURNS_PER_BUCKET <= first:
            break  # older buckets hold no turn of the window
    first = newest - RECENT_TURNS + 1
    return {name: [t for t in turns if int(t) >= first] for name, turns in kept.items() if turns}


def never_refreshed(root: Path, turns: int) -> bool:
    """Whether a session of ``turns`` turns should leave some out but never did (a clone,
    a session made before this layout): its next open starts a maintenance."""
    git_dir = root / ".git"
    return (
        turns > RECENT_TURNS
        and not os.path.lexists(git_dir / "info" / "sparse-checkout")
        and sparse_wanted(git_dir)
    )


def write_window(root: Path, repo: Repository, commit: bytes) -> bool:
    """Write ``.git/info/sparse-checkout`` keeping the newest turns of ``commit`` (unless
    the user turned the sparse checkout off); whether it did.  A ``read-tree -u`` after it
    checks out only those (a session arriving whole: the window, not its whole history)."""
    if not sparse_wanted(root / ".git"):
        return False
    kept = recent_turns(repo, bucket_trees(repo, commit))
    info = ensure_dir(root / ".git", "info")  # a symlink there is replaced
    atomic_write(info / "sparse-checkout", patterns(kept))
    return True


def refresh(root: Path, repo: Repository) -> None:
    """Put the newest turns' folders on disk whole (:mod:`materialise`: a commit writes a
    new turn to git only), set git's index to HEAD (``read-tree --reset``: the stat data
    and skip-worktree marks of unchanged entries kept, the working tree untouched; ``-m``
    would refuse an entry the store rewrote since the last refresh) and, unless the user
    turned the sparse checkout off, leave all but the newest turns out of the working tree
    (``git sparse-checkout reapply``: a file that differs from HEAD is left, never lost).
    An entry still missing on disk (a folder HEAD moved meanwhile) is marked
    skip-worktree, so ``git status`` is clean; git never writes a node file in place."""
    commit = repo.read_ref()
    if commit is None:
        return

    def git(args: list[str], data: bytes | None) -> bytes:
        return run_git(root, *args, input=data).stdout

    if sparse_wanted(root / ".git"):
        kept = recent_turns(repo, bucket_trees(repo, commit))
        folders = [f"history/{bucket}/{turn}" for bucket, turns in kept.items() for turn in turns]
    else:  # every file stays on disk
        folders = turn_folders(git, commit.hex())
    try:
        materialise(str(root), git, commit.hex(), folders)
    except (OSError, subprocess.CalledProcessError):
        pass  # left in git: marked skip-worktree below, written by a later maintenance
    sparse = write_window(root, repo, commit)
    run_git(root, "read-tree", "--reset", commit.hex(), check=False)
    if sparse:
        run_git(root, "update-index", "-q", "--refresh", check=False)  # new entries' stat
        run_git(root, "sparse-checkout", "reapply", check=False)
    mark_missing(root)


def mark_missing(root: Path) -> None:
    """Mark the entries of git's index missing on disk skip-worktree (read from git; a
    folder left out is one entry of the sparse index, listed as it is, not expanded)."""
    gone = run_git(root, "ls-files", "-z", "--deleted", "--sparse", check=False).stdout
    if gone.strip(b"\0"):
        run_git(root, "update-index", "-z", "--skip-worktree", "--stdin", input=gone, check=False)
