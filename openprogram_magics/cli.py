"""The extension's commands of the ``openprogram`` console script, plugged in through the
engine's entry point group ``openprogram.cli`` (:mod:`openprogram.cli_plugins`):

    openprogram run NB.ipynb [-o OUT] [--replay [--record-misses]] [--only-stale]
    openprogram git-setup | git-merge-notebook …   (:mod:`openprogram_magics.gitmerge`)

and, before any other command, one line when the folder (or a notebook named) is a clone
whose ``.gitattributes`` names a merge driver git lacks (:mod:`openprogram_magics.gitcheck`).
Imports stay inside the functions, so ``openprogram --help`` stays fast.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from typing import Any

GIT_COMMANDS = ("git-setup", "git-merge-notebook")


def add_parsers(sub: Any) -> None:
    """``run``, ``git-setup`` and ``git-merge-notebook``."""
    from openprogram_magics.gitmerge import add_parsers as add_git_parsers

    add_run_parser(sub)
    add_git_parsers(sub)


def before_command(command: str | None, argv: Sequence[str]) -> None:
    """A clone that lacks the notebook merge driver: one line (not for the git commands,
    which set it up or are it)."""
    if command is None or command in GIT_COMMANDS:
        return
    from pathlib import Path

    from openprogram_magics.gitcheck import tell

    tell([Path.cwd(), *(Path(w) for w in argv if w.endswith(".ipynb"))])


def add_run_parser(sub: Any) -> None:
    p = sub.add_parser(
        "run", help="execute a notebook in place, continuing the session in its metadata"
    )
    p.add_argument("notebook", metavar="NOTEBOOK.ipynb")
    p.add_argument("-o", "--output", metavar="OUT", help="write the result here instead")
    p.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    p.add_argument(
        "--replay",
        action="store_true",
        help="answer every LLM call from the session's recording (no API key needed)",
    )
    p.add_argument(
        "--record-misses",
        action="store_true",
        help="with --replay: calls not recorded go to the configured provider and are recorded",
    )
    p.add_argument(
        "--only-stale",
        action="store_true",
        help="replay unchanged cells; run the stale ones (cell, docstring, model changed) live",
    )
    p.set_defaults(handler=run_notebook_cmd)


def run_notebook_cmd(args: argparse.Namespace) -> int:
    """Execute a notebook headless, continuing the session in its metadata."""
    from pathlib import Path

    from openprogram import settings
    from openprogram.errors import CliError

    if args.record_misses and not args.replay:
        raise CliError(
            "--record-misses goes with --replay (it records the calls a replay misses): "
            "openprogram run NB.ipynb --replay --record-misses"
        )
    source = Path(args.notebook)
    if not source.is_file():
        raise CliError(f"no notebook {source}")
    try:
        from openprogram_magics.headless import run_notebook
    except ImportError as exc:
        raise CliError(
            f"`openprogram run` needs the Jupyter extras ({exc}): "
            "pip install 'openprogram[jupyter]'"
        ) from None
    home = {"home": args.home} if getattr(args, "home", None) else {}
    with settings.using(**home):  # the kernel is told where sessions live
        result = run_notebook(
            source,
            args.output,
            timeout=args.timeout,
            replay=args.replay,
            record_misses=args.record_misses,
            only_stale=args.only_stale,
        )
    if result.session_id:  # kept in the notebook written: running that again continues it
        again = ["openprogram", "run", str(result.path)]
        if getattr(args, "home", None):
            again[1:1] = ["--home", str(args.home)]
        print(f"session: {result.session_id} ({shlex.join(again)} to continue)")
    elif result.written:
        print("session: none (no %%openprogram cell ran)")
    for note in result.notes:  # a replay: which cells ran live, where its turns are
        print(f"openprogram: {note}")
    if result.written:
        print(f"wrote {result.path}")
    if result.error:
        print(f"openprogram: a cell failed: {result.error.strip()}", file=sys.stderr)
        return 1
    return 0
