"""A clone whose ``.gitattributes`` names the notebook merge driver git does not know.

The ``.gitattributes`` line ``*.ipynb merge=openprogram`` is committed (it is how a team
says "our notebooks merge with the openprogram driver"), but a driver's command can only be
in each clone's own git config — git never takes config from a repository.  A clone that
did not run ``openprogram git-setup`` names a driver git does not know, and git then uses
its built-in line merge for the file (gitattributes(5); ll-merge.c: "default to the
3-way"): notebooks still merge when people changed different cells, but a conflict writes
``<<<<<<<`` lines into the JSON and the ``.ipynb`` no longer opens.

So the first use of the project in such a clone (the CLI, ``%load_ext
openprogram_magics``) says so in one line, once per clone (a stamp file in the git
directory), with the fix; and whenever a notebook already is in that state (unmerged, not
JSON) the line names it — ``openprogram git-setup`` re-merges it with the driver
(:func:`remerge_broken`).  A driver whose python no longer exists (a removed virtualenv)
counts as missing.  Nothing here runs git unless the repository's
``.gitattributes`` names the driver; nothing here raises.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final, TextIO

DRIVER: Final = "openprogram"
STAMP: Final = "openprogram-merge-driver-noted"


def work_tree_top(where: Path) -> Path | None:
    """The nearest folder at or above ``where`` holding a ``.git`` (no git run)."""
    here = where.resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return None


def names_driver(top: Path) -> bool:
    """The committed ``.gitattributes`` at ``top`` sets ``merge=openprogram`` for something."""
    try:
        text = (top / ".gitattributes").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        words = line.split()
        if words and not words[0].startswith("#") and f"merge={DRIVER}" in words[1:]:
            return True
    return False


def driver_known(top: Path) -> bool:
    """git here has a driver command whose program exists (a removed virtualenv's python
    would make every notebook merge fall back to git's line merge)."""
    command = _git(top, "config", "--get", f"merge.{DRIVER}.driver")
    if not command:
        return False
    try:
        program = shlex.split(command)[0]
    except (ValueError, IndexError):
        return False
    return Path(program).is_file() if os.path.isabs(program) else bool(shutil.which(program))


def broken_notebooks(top: Path) -> list[str]:
    """Unmerged ``.ipynb`` files (relative paths) whose work-tree file is not JSON."""
    import json

    listing = _git(top, "ls-files", "-u", "-z", "--", "*.ipynb") or ""
    paths = sorted({entry.split("\t", 1)[1] for entry in listing.split("\0") if "\t" in entry})
    broken = []
    for rel in paths:
        try:
            json.loads((top / rel).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            broken.append(rel)
    return broken


def first_use_note(where: Path) -> str | None:
    """The one line for the repository holding ``where`` (None: nothing to say)."""
    top = work_tree_top(where)
    if top is None or not names_driver(top):
        return None
    fix = f"openprogram git-setup {_shown(top)}"
    broken = broken_notebooks(top)
    if broken:
        names = ", ".join(broken[:3]) + (" …" if len(broken) > 3 else "")
        return (
            f"openprogram: {names}: merged by git's line merge (conflict lines, no longer a "
            f"notebook) because the notebook merge driver did not run: `{fix}` re-merges it"
        )
    if driver_known(top):
        return None
    stamp = _git_dir(top)
    if stamp is None or (stamp / STAMP).exists():
        return None
    try:
        (stamp / STAMP).write_text("told\n", encoding="utf-8")
    except OSError:
        pass
    return (
        f"openprogram: {top}/.gitattributes names the notebook merge driver but this clone's "
        f"git cannot run it (a merge would fall back to git's line merge): run `{fix}`"
    )


def tell(places: Iterable[Path], stream: TextIO | None = None) -> None:
    """Print :func:`first_use_note` for each repository among ``places`` (once each)."""
    seen: set[Path] = set()
    for place in places:
        try:
            top = work_tree_top(place if place.is_dir() else place.parent)
            if top is None or top in seen:
                continue
            seen.add(top)
            note = first_use_note(top)
        except (OSError, ValueError, subprocess.SubprocessError):
            continue
        if note:
            print(note, file=stream or sys.stderr)


def tell_here(stream: TextIO | None = None) -> None:
    """:func:`tell` for the current folder (a kernel's is its notebook's)."""
    try:
        here = Path.cwd()
    except OSError:  # the folder was removed under us: nothing to tell
        return
    tell([here], stream)


def remerge_broken(
    top: Path, merge_notebook: Callable[[str, str, str, str, str], int]
) -> list[str]:
    """Re-merge, with the driver (``merge_notebook``: :func:`openprogram_magics.gitmerge.
    merge_notebook`, handed in: the driver's module calls this one), each notebook git's line
    merge left broken; a line each."""
    lines = []
    for rel in broken_notebooks(top):
        stages = _stages(top, rel)
        if 2 not in stages or 3 not in stages:
            continue
        with tempfile.TemporaryDirectory(prefix="openprogram-remerge-") as tmp:
            files = []
            for stage, name in ((1, "base"), (2, "ours"), (3, "theirs")):
                path = Path(tmp) / name
                blob = stages.get(stage)
                data = _blob(top, blob) if blob else b""
                path.write_bytes(data)
                files.append(str(path))
            code = merge_notebook(files[0], files[1], files[2], "7", rel)
            (top / rel).write_bytes(Path(files[1]).read_bytes())
        state = "merged" if code == 0 else "conflicts left as marker cells"
        lines.append(f"re-merged {rel} as a notebook ({state}); then `git add {rel}`")
    return lines


def _stages(top: Path, rel: str) -> dict[int, str]:
    listing = _git(top, "ls-files", "-u", "-z", "--", rel) or ""
    stages = {}
    for entry in listing.split("\0"):
        if "\t" in entry:
            _mode, sha, stage = entry.split("\t", 1)[0].split()
            stages[int(stage)] = sha
    return stages


def _blob(top: Path, sha: str) -> bytes:
    done = subprocess.run(
        ["git", "-C", str(top), "cat-file", "blob", sha], capture_output=True, check=True
    )
    return done.stdout


def _git_dir(top: Path) -> Path | None:
    found = _git(top, "rev-parse", "--absolute-git-dir")
    return Path(found) if found else None


def _shown(top: Path) -> str:
    try:
        return "." if top == Path.cwd().resolve() else str(top)
    except OSError:
        return str(top)


def _git(where: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(where), *args], capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    return done.stdout.strip("\n") if done.returncode == 0 else None
