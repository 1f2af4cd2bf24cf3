"""``openprogram git-setup`` and the notebook merge driver git runs (``git-merge-notebook``).

``git-setup`` registers, for one repository, a git merge driver named ``openprogram``:

- ``.gitattributes`` (at the top of the work tree) gets ``*.ipynb merge=openprogram``
  — commit it, so every clone names the driver;
- the repository's own ``.git/config`` gets ``merge.openprogram.name`` and
  ``merge.openprogram.driver`` (``<this python> -m openprogram.cli git-merge-notebook
  %O %A %B %L %P``) — per clone, never shared, so each colleague runs ``git-setup`` once.

Running it again changes nothing; it also re-merges, with the driver, a notebook git's
line merge already broke in this clone (:func:`openprogram_magics.gitcheck.remerge_broken`).
A clone without it still merges the common case (two people running different cells)
with git's line merge, and the first use of the project there says to run it
(:mod:`openprogram_magics.gitcheck`).

The driver settles what is derived from the session (:mod:`openprogram_magics.nbmerge`),
then merges cell by cell (:mod:`openprogram_magics.nbthreeway`; nbdime only where cells
have no ids or both sides changed one cell) and writes the result to ``%A``: exit 0 when
merged, 1 when conflicts are left as marker cells in a valid notebook holding both sides.
Under ``git rebase`` ``%A`` is the upstream side and ``%B`` this clone's commit, so there
"this clone's side" (what a field both changed keeps) is ``%B``.
"""

from __future__ import annotations

import copy
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from openprogram.errors import UserError

DRIVER = "openprogram"
ATTRIBUTE_LINE = f"*.ipynb merge={DRIVER}"


#: The driver's status for "conflicts written as marker cells" inside :func:`driver_command`.
CONFLICT_STATUS = 3


def driver_command() -> str:
    """What git runs for a conflicting ``.ipynb`` (this interpreter: no PATH needed).

    When the driver cannot run (this python or this package gone, a crash before it wrote
    anything) git would keep ours and report a conflict with no marker in the file; the
    command then falls back to ``git merge-file`` — conflict lines git's own merge would
    write, visible, never one side silently.
    """
    python = shlex.quote(sys.executable)
    return (
        f"{python} -m openprogram.cli git-merge-notebook --conflict-status {CONFLICT_STATUS} "
        f"%O %A %B %L %P; s=$?; [ $s -eq 0 ] && exit 0; [ $s -eq {CONFLICT_STATUS} ] && exit 1; "
        "git merge-file -L ours -L base -L theirs --marker-size %L %A %O %B; exit 1"
    )


def git_setup(where: Path) -> list[str]:
    """Register the driver for the repository holding ``where``; lines saying what changed."""
    top = _git(where, "rev-parse", "--show-toplevel")
    if top is None:
        raise UserError(f"{where} is not inside a git repository (run `git init` first)")
    root = Path(top)
    lines: list[str] = []
    for key, value in (
        (f"merge.{DRIVER}.name", "openprogram notebook merge (nbdime)"),
        (f"merge.{DRIVER}.driver", driver_command()),
    ):
        if _git(root, "config", "--local", "--get", key) != value:
            if _git(root, "config", "--local", key, value) is None:
                raise UserError(f"could not write {key} to {root}/.git/config")
            lines.append(f"set {key} in the repository's .git/config")
    attributes = root / ".gitattributes"
    text = attributes.read_text(encoding="utf-8") if attributes.exists() else ""
    if ATTRIBUTE_LINE not in {line.strip() for line in text.splitlines()}:
        sep = "" if not text or text.endswith("\n") else "\n"
        attributes.write_text(f"{text}{sep}{ATTRIBUTE_LINE}\n", encoding="utf-8")
        lines.append(f"added `{ATTRIBUTE_LINE}` to {attributes} (commit it)")
    from openprogram_magics.gitcheck import remerge_broken

    lines += remerge_broken(root, merge_notebook)  # what git's line merge broke before
    return lines or [f"already set up: {root} merges notebooks with the openprogram driver"]


def merge_notebook(base: str, ours: str, theirs: str, marker: str = "7", path: str = "") -> int:
    """The driver: settle session-derived parts, merge (:mod:`openprogram_magics.nbthreeway`)
    into ``ours``.

    Exit code as git expects: 0 merged cleanly, 1 conflicts left — as marker cells in a
    valid notebook holding both versions; never one side silently.  2: nothing written
    (a version is not a notebook): :func:`driver_command` then lets git's line merge write
    its conflict lines.
    """
    from openprogram_magics.nbmerge import resolve_derived, session_conflict
    from openprogram_magics.nbthreeway import guarded_fallback, merge_documents, same_ids

    name = path or ours
    try:
        notebooks = [_read(p) for p in (base, ours, theirs)]
    except ValueError as exc:  # not a notebook: leave ours, git's line merge follows
        print(f"openprogram: {name}: not merged as a notebook ({exc})", file=sys.stderr)
        return 2
    nb_base, nb_ours, nb_theirs = notebooks
    if nb_ours is None or nb_theirs is None:  # git settles a deleted file itself
        print(f"openprogram: {name}: not merged (one side has no notebook)", file=sys.stderr)
        return 2
    size = int(marker) if marker.isdigit() else 7
    rebase = rebasing(Path.cwd())  # git runs the driver in the work tree
    try:
        given = same_ids(nb_base, nb_ours, nb_theirs)  # a side saved by a newer Jupyter
        mine, other = (nb_theirs, nb_ours) if rebase else (nb_ours, nb_theirs)
        found = resolve_derived(nb_base, mine, other)
        notes = given + found.notes
        merged = merge_documents(nb_base, nb_ours, nb_theirs, size, keep_theirs=rebase)
        # each side names its own session: both in the file, git told (nbdime's own
        # metadata conflict already is)
        if found.sessions and "nbdime-conflicts" not in merged.notebook.get("metadata", {}):
            block = session_conflict(found.sessions, size)
            if merged.notebook.get("nbformat_minor", 5) < 5:  # cells without ids
                block = [{k: v for k, v in c.items() if k != "id"} for c in block]
            merged.notebook["cells"] = [*block, *merged.notebook.get("cells", [])]
            merged.conflicts.append("metadata.openprogram.session_id")
        _write(merged.notebook, Path(ours))
    except Exception as exc:  # a bug of ours must not leave one side silently either
        merged = guarded_fallback(nb_ours, nb_theirs, size, exc)
        notes = []
        _write(merged.notebook, Path(ours))
    for note in [*notes, *merged.notes]:
        print(f"openprogram: {name}: {note}", file=sys.stderr)
    if merged.conflicts:
        print(
            f"openprogram: {name}: {len(merged.conflicts)} conflict(s) left as marker cells "
            f"(<<<<<<< ours … ======= … >>>>>>> theirs): keep one version, delete the rest; "
            f"{'; '.join(merged.conflicts[:3])}",
            file=sys.stderr,
        )
        return 1
    return 0


def rebasing(where: Path) -> bool:
    """A ``git rebase`` is under way in the repository at ``where`` (its git dir, ``GIT_DIR``
    honoured, holds ``rebase-merge/`` or ``rebase-apply/rebasing``; ``git am`` is not one)."""
    found = _git(where, "rev-parse", "--git-path", "rebase-merge", "--git-path", "rebase-apply")
    paths = [where / line for line in (found or "").splitlines()]
    return len(paths) == 2 and (paths[0].is_dir() or (paths[1] / "rebasing").exists())


def _write(nb: dict[str, Any], target: Path) -> None:
    """As nbformat (and so JupyterLab) writes a notebook: multi-line strings as lists of
    lines, indent 1, sorted keys, a final newline — written even where nbformat's schema
    check would refuse it (the merge is never lost)."""
    import nbformat
    from nbformat.v4.rwbase import split_lines

    doc = split_lines(nbformat.from_dict(copy.deepcopy(nb)))
    text = json.dumps(doc, indent=1, sort_keys=True, separators=(",", ": "), ensure_ascii=False)
    try:  # encoded before the file is opened: a failure must not leave it truncated
        data = (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (a "\\ud800" escape in a version)
        text = json.dumps(doc, indent=1, sort_keys=True, separators=(",", ": "))
        data = (text + "\n").encode("utf-8")
    target.write_bytes(data)


def _read(path: str) -> dict[str, Any] | None:
    """A version git handed over as a dict; None when empty (no such version)."""
    import nbformat

    data = Path(path).read_bytes()
    if not data.strip():
        return None
    try:
        return dict(json.loads(json.dumps(nbformat.reads(data.decode("utf-8"), as_version=4))))
    except Exception as exc:
        raise ValueError(f"not a readable notebook: {type(exc).__name__}") from None


def _git(where: Path, *args: str) -> str | None:
    done = subprocess.run(
        ["git", "-C", str(where), *args], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() if done.returncode == 0 else None


def add_parsers(sub: Any) -> None:
    """The two commands, for ``openprogram.cli``."""
    p = sub.add_parser(
        "git-setup",
        help="register the notebook merge driver for this git repository (once per clone)",
    )
    p.add_argument("path", nargs="?", default=".", help="a folder of the repository")
    p.add_argument(
        "--hooks",
        action="store_true",
        help="also install git hooks so the notebooks' sessions travel with git push/pull "
        "(see openprogram_magics.githooks)",
    )
    p.set_defaults(handler=_setup_cmd)
    p = sub.add_parser("git-merge-notebook", help="the merge driver git runs (set up by git-setup)")
    for name in ("base", "ours", "theirs"):
        p.add_argument(name)
    p.add_argument("marker", nargs="?", default="7")
    p.add_argument("path", nargs="?", default="")
    p.add_argument(
        "--conflict-status",
        type=int,
        default=1,
        metavar="N",
        help="exit status when conflicts were written as marker cells (default 1)",
    )
    p.set_defaults(handler=_merge_cmd)


def _setup_cmd(args: Any) -> int:
    for line in git_setup(Path(args.path)):
        print(line)
    if getattr(args, "hooks", False):
        from openprogram_magics.githooks import install_hooks

        for line in install_hooks(Path(args.path)):
            print(line)
    return 0


def _merge_cmd(args: Any) -> int:
    code = merge_notebook(args.base, args.ours, args.theirs, args.marker, args.path)
    return args.conflict_status if code == 1 else code
