"""``openprogram git-setup --hooks``: the notebooks' sessions travel with ``git push`` and
``git pull`` (DVC's ``dvc install`` is the precedent).

Three hooks go into the repository's hooks folder (``git rev-parse --git-path hooks``, so
``core.hooksPath`` is honoured):

- ``pre-push``: the sessions named by the notebooks being pushed (their
  ``metadata.openprogram.session_id`` and the session parts of their outputs) are pushed
  first, to the remote git pushes to (``refs/openprogram/sessions/<id>``, as ``openprogram
  sessions push``); a session that remote has more of is pulled and joined, then pushed.  A
  session that cannot get there refuses the push, one line per session saying which and how
  to push it (``git push --no-verify`` pushes without it);
- ``post-merge`` (``git pull``, ``git merge``) and ``post-checkout`` (a branch switched, a
  rebase's checkout): the sessions of the notebooks that changed are pulled from the
  branch's remote; a failure is one line, never a failed git command.

Nothing here runs when a notebook is opened or a cell runs: only git runs the hooks.

Installing is idempotent (our hooks carry :data:`MARK`; run again, they are rewritten only
if they changed).  A hook of someone else's already there is kept: moved to
``<hook>.pre-openprogram`` and run first by ours, with the same arguments and input (its
failure stops ours, as git would have stopped).  When that name is taken too, the hook is
left alone and the install says so.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openprogram.errors import OpenProgramError, UserError

HOOKS = ("pre-push", "post-merge", "post-checkout")
MARK = "# openprogram git hook"
CHAINED = ".pre-openprogram"  # the suffix a hook that was there before gets
NULL_SHA = "0" * 40
MIME_TYPE = "application/vnd.openprogram.session+json"  # openprogram_magics.notebook's


# -- installing --------------------------------------------------------------------------------
def hook_script(name: str, python: str | None = None) -> str:
    """The shell script of hook ``name``: the hook that was there before first (if any),
    then ``python -m openprogram_magics.githooks NAME ARGS``."""
    py = shlex.quote(python or sys.executable)
    run = f'{py} -m openprogram_magics.githooks {name} "$@"'
    head = (
        "#!/bin/sh\n"
        f"{MARK} (installed by `openprogram git-setup --hooks`; safe to delete)\n"
        f'chained="$(dirname "$0")/{name}{CHAINED}"\n'
    )
    if name == "pre-push":  # git's input (the refs pushed) goes to both
        return head + (
            "input=$(cat)\n"
            'feed() { if [ -n "$input" ]; then printf \'%s\\n\' "$input"; fi; }\n'
            'if [ -x "$chained" ]; then feed | "$chained" "$@" || exit $?; fi\n'
            f"if [ ! -x {py} ]; then\n"
            f'  echo "openprogram: git push refused: "{py}" is gone, so the sessions of the'
            " notebooks cannot be pushed: run: openprogram git-setup --hooks (or push with"
            ' git push --no-verify)" >&2\n'
            "  exit 1\n"
            "fi\n"
            f"feed | {run} && exit 0\n"
            "status=$?\n"  # openprogram uninstalled from that python: say so, not a traceback
            f"if ! {py} -c 'import openprogram_magics.githooks' 2>/dev/null; then\n"
            f'  echo "openprogram: git push refused: openprogram is not installed for "{py}", so'
            " the sessions of the notebooks cannot be pushed: install it again, delete"
            ' this hook ($0), or push with git push --no-verify" >&2\n'
            "fi\n"
            "exit $status\n"
        )
    return head + (
        'status=0\nif [ -x "$chained" ]; then "$chained" "$@" || status=$?; fi\n'
        f"if [ -x {py} ]; then {run}; else\n"
        f'  echo "openprogram: sessions not pulled: "{py}" is gone (run: openprogram'
        ' git-setup --hooks)" >&2\n'
        "fi\n"
        "exit $status\n"
    )


def hooks_folder(root: Path) -> Path:
    """Where git looks for this repository's hooks (``core.hooksPath`` honoured)."""
    found = _git(root, "rev-parse", "--git-path", "hooks")
    if found is None:
        raise UserError(f"{root} is not inside a git repository (run `git init` first)")
    return (root / found).resolve()


def install_hooks(root: Path, python: str | None = None) -> list[str]:
    """Install :data:`HOOKS` in the repository at ``root``; lines saying what changed."""
    folder = hooks_folder(root)
    folder.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    for name in HOOKS:
        path = folder / name
        script = hook_script(name, python)
        if path.is_file() and MARK in _read_text(path):
            if _read_text(path) == script and os.access(path, os.X_OK):
                continue
            lines.append(f"updated the {name} hook ({path})")
        elif path.exists() or path.is_symlink():
            kept = folder / f"{name}{CHAINED}"
            if kept.exists() or kept.is_symlink():
                lines.append(
                    f"left your {name} hook alone: {path} is not ours and {kept.name} is taken "
                    f"(chain it yourself: call `{sys.executable} -m openprogram_magics.githooks "
                    f"{name}` from it with the same arguments and input)"
                )
                continue
            path.rename(kept)
            lines.append(f"installed the {name} hook; yours now runs first from {kept}")
        else:
            lines.append(f"installed the {name} hook ({path})")
        tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
        tmp.write_text(script, encoding="utf-8")
        tmp.chmod(0o755)
        os.replace(tmp, path)
    shared = _git(root, "config", "--get", "core.hooksPath")
    if shared and lines:  # a folder other repositories may use too
        lines.append(
            f"note: core.hooksPath is {shared}: every repository using that folder runs "
            "these hooks (they do nothing where no notebook names a session)"
        )
    return lines or [f"hooks already installed in {folder}: sessions travel with git push/pull"]


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


# -- what git hands the hooks ------------------------------------------------------------------
def _git(root: Path, *args: str) -> str | None:
    """``git args`` in the notebooks' repository (the hook's environment: git's own)."""
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
    )
    return done.stdout.strip("\n") if done.returncode == 0 else None


def _notebooks_changed(root: Path, *revs: str) -> list[str]:
    """The ``.ipynb`` paths added or modified in the commits ``git log REVS`` lists."""
    out = _git(root, "log", "--format=", "--name-only", "-z", "--no-renames",
               "--diff-filter=AM", *revs, "--")  # fmt: skip
    seen: dict[str, None] = {}
    for name in (out or "").replace("\n", "\0").split("\0"):
        if name.endswith(".ipynb"):
            seen.setdefault(name, None)
    return list(seen)


def _notebooks_between(root: Path, old: str, new: str) -> list[str]:
    """The notebooks that differ from ``old`` in ``new`` (all of ``new``'s without ``old``)."""
    if old == NULL_SHA or _git(root, "cat-file", "-e", f"{old}^{{commit}}") is None:
        out = _git(root, "ls-tree", "-r", "--name-only", "-z", new) or ""
    else:
        out = _git(root, "diff", "--name-only", "-z", "--no-renames", "--diff-filter=AM",
                   old, new, "--") or ""  # fmt: skip
    return [name for name in out.split("\0") if name.endswith(".ipynb")]


def sessions_named(data: bytes) -> list[str]:
    """The session ids a notebook names: its ``metadata.openprogram.session_id``, then
    those of its outputs' session parts (a pinned cell's session too); invalid ones left out."""
    from openprogram.errors import InvalidSessionId
    from openprogram.store.session.files import validate_session_id

    try:
        nb = json.loads(data)
    except (ValueError, RecursionError):
        return []
    found: list[Any] = []
    meta = nb.get("metadata") if isinstance(nb, dict) else None
    stored = meta.get("openprogram") if isinstance(meta, dict) else None
    if isinstance(stored, dict):
        found.append(stored.get("session_id"))
    cells = nb.get("cells") if isinstance(nb, dict) else None
    for cell in cells if isinstance(cells, list) else ():
        outputs = cell.get("outputs") if isinstance(cell, dict) else None
        for output in outputs if isinstance(outputs, list) else ():
            got = output.get("data") if isinstance(output, dict) else None
            part = got.get(MIME_TYPE) if isinstance(got, dict) else None
            if isinstance(part, dict):
                found.append(part.get("session_id"))
    out: dict[str, None] = {}
    for sid in found:
        try:
            out.setdefault(validate_session_id(sid), None)
        except (InvalidSessionId, TypeError, ValueError):
            continue
    return list(out)


def sessions_of(root: Path, commit: str, paths: Iterable[str]) -> dict[str, str]:
    """Session id -> the first notebook (at ``commit``) that names it."""
    out: dict[str, str] = {}
    for path in paths:
        done = subprocess.run(
            ["git", "-C", str(root), "show", f"{commit}:{path}"], capture_output=True, check=False
        )
        if done.returncode != 0:  # deleted later in the range
            continue
        for sid in sessions_named(done.stdout):
            out.setdefault(sid, path)
    return out


def pushed_notebooks(root: Path, remote: str, refs: str) -> dict[str, str]:
    """The sessions named by the notebooks ``git push`` is about to send (``refs``: the
    hook's input, ``<local ref> <local sha> <remote ref> <remote sha>`` lines): those of
    the notebooks added or changed in the commits the remote lacks."""
    out: dict[str, str] = {}
    for line in refs.splitlines():
        words = line.split()
        if len(words) != 4 or words[1] == NULL_SHA:  # a deletion sends no notebook
            continue
        local, theirs = words[1], words[3]
        known = theirs != NULL_SHA and _git(root, "cat-file", "-e", f"{theirs}^{{commit}}") == ""
        limit = [f"^{theirs}"] if known else []
        if not limit:  # a new branch (or one git cannot see): what no ref of the remote has
            limit = ["--not", f"--remotes={remote}"] if _is_remote_name(root, remote) else []
        for sid, path in sessions_of(root, local, _notebooks_changed(root, local, *limit)).items():
            out.setdefault(sid, path)
    return out


def _is_remote_name(root: Path, name: str) -> bool:
    return name in (_git(root, "remote") or "").split()


# -- the sessions ------------------------------------------------------------------------------
@dataclass
class Outcome:
    said: list[str] = field(default_factory=list)  # what moved (printed)
    refused: list[str] = field(default_factory=list)  # one line per session that cannot go


def push_sessions(sessions: dict[str, str], remote: str, url: str, root: Path) -> Outcome:
    """Push each session (``id -> a notebook naming it``) to ``url`` (git's remote
    ``remote``): pulled and joined first when the remote has turns this copy lacks; a
    session not on this machine must already be on the remote.  A replay session
    (``openprogram run --replay``'s) stays on this machine (decision 0047): said, not sent."""
    from openprogram.errors import SyncError
    from openprogram.sharing import resolve_remote
    from openprogram.store.session.remotes import looks_like_replay, replay_of
    from openprogram.store.session.store import SessionStore
    from openprogram.store.session.sync import pull, push

    outcome = Outcome()
    if not sessions:
        return outcome
    store = SessionStore(None)
    try:
        where, protocols = resolve_remote(url, root)
    except SyncError as exc:
        outcome.refused.append(f"the notebooks' sessions cannot go to {remote}: {exc}")
        return outcome
    for sid, notebook in sessions.items():
        how = f"`openprogram sessions push {sid} {remote}`"
        try:
            if not store.exists(sid):  # run elsewhere: fine if the remote has it
                pull(store, sid, where, protocols)
                continue
            source = replay_of(store.open(sid).meta)
            if source is not None:
                outcome.said.append(
                    f"session {sid} of {notebook} is a replay of session {source}: kept on this "
                    f"machine, not pushed (`openprogram sessions push {sid} {remote} "
                    "--with-replays` sends it)"
                )
                continue
            try:
                said = push(store, sid, where, protocols)
            except SyncError as exc:
                if "pull first" not in str(exc):
                    raise
                pull(store, sid, where, protocols)  # the remote's turns joined, then sent
                said = push(store, sid, where, protocols)
            if " pushed to " in said:
                outcome.said.append(f"{said} ({notebook})")
        except (SyncError, OpenProgramError) as exc:
            if not store.exists(sid) and looks_like_replay(sid):
                outcome.said.append(
                    f"session {sid} of {notebook} is a replay kept on the machine that ran it: "
                    "not pushed"
                )
                continue
            if not store.exists(sid):
                why = f"it is not in {store.root} either (run it here, or push it from there)"
            else:
                why = str(exc)
            outcome.refused.append(
                f"session {sid} of {notebook} is missing on {remote}: {why}; push it with "
                f"{how}, or `git push --no-verify` to push without it"
            )
    return outcome


def pull_sessions(sessions: dict[str, str], remote: str, root: Path) -> Outcome:
    """Pull each session (``id -> a notebook naming it``) from git's remote ``remote``; a
    failure is a line, never an exception."""
    from openprogram.errors import SyncError
    from openprogram.sharing import resolve_remote
    from openprogram.store.session.remotes import looks_like_replay
    from openprogram.store.session.store import SessionStore
    from openprogram.store.session.sync import pull

    outcome = Outcome()
    if not sessions:
        return outcome
    store = SessionStore(None)
    try:
        url, protocols = resolve_remote(remote, root)
    except SyncError as exc:
        outcome.refused.append(f"sessions not pulled from {remote}: {exc}")
        return outcome
    ordered = sorted(sessions.items(), key=lambda item: looks_like_replay(item[0]))
    for index, (sid, notebook) in enumerate(ordered):  # replays (rarely shared) last
        try:
            got = pull(store, sid, url, protocols)
        except (SyncError, OpenProgramError) as exc:
            outcome.refused.append(
                f"session {sid} of {notebook} not pulled: {exc} "
                f"(`openprogram sessions pull {sid} {remote}` to retry)"
            )
            rest = [other for other, _ in ordered[index + 1 :]]
            if rest:  # offline or refused: a checkout must not wait on each in turn
                outcome.refused.append(
                    f"not tried after that: {', '.join(rest)} (`openprogram sessions pull "
                    f"ID {remote}` for each)"
                )
            break
        if got.status != "up to date":
            outcome.said.append(f"{got.describe()} ({notebook})")
    return outcome


def branch_remote(root: Path) -> str | None:
    """The remote the current branch pulls from (else ``origin``, else the only remote)."""
    branch = _git(root, "symbolic-ref", "--quiet", "--short", "HEAD")
    named = _git(root, "config", "--get", f"branch.{branch}.remote") if branch else None
    remotes = (_git(root, "remote") or "").split()
    if named and named in remotes:
        return named
    if "origin" in remotes:
        return "origin"
    return remotes[0] if len(remotes) == 1 else None


# -- the hooks ---------------------------------------------------------------------------------
def run_hook(name: str, args: Sequence[str], stdin: str, root: Path) -> int:
    """What hook ``name`` does (its exit status); messages go to stderr."""
    if name == "pre-push":
        remote, url = [*args, "", ""][:2]
        outcome = push_sessions(pushed_notebooks(root, remote, stdin), remote, url or remote, root)
        for line in outcome.said:
            print(f"openprogram: {line}", file=sys.stderr)
        for line in outcome.refused:
            print(f"openprogram: git push refused: {line}", file=sys.stderr)
        return 1 if outcome.refused else 0
    if name == "post-merge":
        changed = _notebooks_between(root, _git(root, "rev-parse", "ORIG_HEAD") or NULL_SHA, "HEAD")
    elif name == "post-checkout":
        old, new, branch = [*args, "", "", ""][:3]
        if branch != "1" or old == new:  # a file checked out, or the same commit
            return 0
        changed = _notebooks_between(root, old, new)
    else:
        raise UserError(f"no openprogram hook {name!r} (hooks: {', '.join(HOOKS)})")
    source = branch_remote(root)
    if source is None or not changed:
        return 0
    outcome = pull_sessions(sessions_of(root, "HEAD", changed), source, root)
    for line in [*outcome.said, *outcome.refused]:
        print(f"openprogram: {line}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in HOOKS:
        print(f"usage: python -m openprogram_magics.githooks {{{','.join(HOOKS)}}} ARGS...")
        return 2
    stdin = sys.stdin.read() if args[0] == "pre-push" else ""
    top = _git(Path.cwd(), "rev-parse", "--show-toplevel")
    try:
        return run_hook(args[0], args[1:], stdin, Path(top or Path.cwd()))
    except Exception as exc:  # one line, never a traceback in the middle of git's output
        what = "git push refused" if args[0] == "pre-push" else "sessions not pulled"
        print(f"openprogram: {what}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1 if args[0] == "pre-push" else 0


if __name__ == "__main__":
    sys.exit(main())
