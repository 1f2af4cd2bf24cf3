"""``%openprogram`` line commands: a registry, one module per subcommand.

Testable without a shell: :func:`run` parses a line and calls the command's function with a
:class:`Host` (the magics object in a notebook; any object with the same attributes in a
test).  The help text is generated from the parser.

**Adding a subcommand** is one new module in this package, named after it (``mcp.py`` for
``%openprogram mcp``), that registers itself with :func:`command` — its help line, its
arguments — on a plain function ``(host, args) -> value``::

    from argparse import Namespace

    from openprogram_magics.commands import Host, arg, command


    @command("greet", "say hello", arg("name", metavar="NAME"))
    def greet(host: Host, args: Namespace) -> str:
        print(f"hello {args.name}")
        return args.name

Nothing else is edited: the registry imports every module of this package the first time
a line is parsed or the help is built (:func:`load`), so this package's ``__init__`` never
imports its subcommands and no import circle forms.  The help lists the commands in
:data:`HELP_ORDER`, then any other in name order, then ``help``.  Helpers shared by several
subcommands live here; a module's own helpers stay in it.

A mistake the user can fix raises :class:`CommandError` (a ``UserError``); the magic shows
it as IPython's one-line ``UsageError``.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import shlex
from argparse import Namespace
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from openprogram.errors import CommandError

if TYPE_CHECKING:  # the engine is imported at the first command, not at %load_ext
    from openprogram.agentic_programming.provider import Provider
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram_magics.notebook import NotebookMeta

__all__ = [
    "PROG",
    "Arg",
    "Command",
    "CommandError",
    "Host",
    "arg",
    "command",
    "help_text",
    "parse",
    "run",
    "session_or_current",
]

PROG = "%openprogram"
NO_SESSION = "no session yet; run a %%openprogram cell or `%openprogram use ID`"

#: The order the help lists the commands in (by module name; a module not named here comes
#: after them, in name order, and ``help`` last).
HELP_ORDER = (
    "status",
    "new",
    "use",
    "list_",
    "log",
    "context",
    "dag",
    "provider",
    "push",
    "pull",
    "export",
    "import_",
    "embed",
    "auto",
    "usage",
    "diff",
    "stop",
    "call",
    "goal",
    "compact",
    "title",
    "stale",
)


class Host(Protocol):
    """What a command may read and change: the magics object's settings and session."""

    provider: str
    model: str
    auto: bool
    replay_session: str | None

    def runtime(self) -> Runtime: ...

    def provider_named(self, name: str, model: str | None) -> str | Provider: ...

    def choose_provider(self, name: str, model: str | None) -> None: ...

    def current_meta(self) -> NotebookMeta | None: ...

    def current_session_id(self) -> str | None: ...

    def set_session(self, meta: NotebookMeta) -> None: ...


Run = Callable[[Host, Namespace], Any]


@dataclass(frozen=True)
class Arg:
    """The arguments of one ``ArgumentParser.add_argument`` call."""

    names: tuple[str, ...]
    options: dict[str, Any]


def arg(*names: str, **options: Any) -> Arg:
    return Arg(names, options)


def megabytes(text: str) -> float:
    """An ``--max-mb`` value: a finite number above 0 (``nan``/``inf`` a usage line)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of MB above 0")
    return value


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    args: tuple[Arg, ...]
    run: Run


COMMANDS: dict[str, Command] = {}  # in the order the help lists them, once loaded
_loaded = False


def command(name: str, help: str, *args: Arg) -> Callable[[Run], Run]:
    """Register ``run`` as the line command ``name`` taking ``args``."""

    def register(run: Run) -> Run:
        COMMANDS[name] = Command(name, help, args, run)
        return run

    return register


def load() -> dict[str, Command]:
    """Import every subcommand module of this package (once): each registers itself.  The
    table is then in the help's order, whichever module was imported first (a module may be
    imported on its own for its helpers); commands registered from elsewhere come after the
    package's, in the order they were registered, and ``help`` last."""
    global _loaded
    if not _loaded:
        found = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
        rest = sorted(found - set(HELP_ORDER) - {"help"})
        modules = [f"{__name__}.{n}" for n in [n for n in HELP_ORDER if n in found] + rest]
        for module in [*modules, f"{__name__}.help"]:
            importlib.import_module(module)
        _loaded = True
        rank = {module: i for i, module in enumerate(modules)}
        ordered = sorted(
            COMMANDS.values(),
            key=lambda c: (c.name == "help", rank.get(c.run.__module__, len(rank))),
        )
        COMMANDS.clear()
        COMMANDS.update((c.name, c) for c in ordered)
    return COMMANDS


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line for the user, no SystemExit
        raise CommandError(f"{self.prog}: {message}; `{PROG} help` lists the commands")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, add_help=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for cmd in load().values():
        p = sub.add_parser(cmd.name, help=cmd.help, add_help=False)
        for a in cmd.args:
            p.add_argument(*a.names, **a.options)
        p.set_defaults(run=cmd.run)
    return parser


def parse(line: str) -> Namespace:
    """The parsed command (``status`` when the line is empty); CommandError if malformed."""
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise CommandError(f"cannot parse arguments: {exc}") from None
    if words and words[0] not in load():
        raise CommandError(f"unknown command {words[0]!r}; `{PROG} help` lists them")
    return build_parser().parse_args(words or ["status"])


#: Commands that reach outside the kernel (a remote, a file, the notebook's outputs): a
#: replay re-runs the notebook's cells, never these.  (``call`` answers from the recording
#: in a replay: :mod:`openprogram_magics.commands.call`.)
SIDE_EFFECT_COMMANDS = frozenset({"push", "pull", "embed", "import", "export"})


def run(host: Host, line: str) -> Any:
    """Parse ``line`` and run its command against ``host``; returns the command's value.

    In a replay (``openprogram run --replay``, which tells the kernel through the bridge's
    state) a side-effect command is skipped with a note and returns None."""
    args = parse(line)
    if args.command in SIDE_EFFECT_COMMANDS:
        from openprogram_magics.bridge import replay_run

        if replay_run() is not None:  # the note never repeats the line: a URL may hold a token
            print(
                f"openprogram: replay: `{PROG} {args.command}` skipped "
                "(a replay never runs push, pull, embed, import or export)"
            )
            return None
    return args.run(host, args)


def help_text() -> str:
    """One line per command — its usage and help, from the parser — and how to configure."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    rows = []
    for name, cmd in COMMANDS.items():
        usage = " ".join(sub.choices[name].format_usage().split()[2:])  # after "usage: %op"
        rows.append((usage, cmd.help))
    width = max(len(u) for u, _ in rows) + 2
    lines = [f"{PROG} COMMAND — the notebook's OpenProgram session", ""]
    lines += [f"  {u:<{width}}{h}" for u, h in rows]
    lines += ["", 'Settings are traitlets: %config OpenProgramMagics.provider = "test"']
    lines += [
        "",
        "A notebook whose metadata names a session loads this extension itself (JupyterLab /",
        "Notebook 7 extension, `openprogram run`, papermill -E openprogram). For every kernel:",
        '  c.InteractiveShellApp.extensions = ["openprogram_magics"]',
        "in ~/.ipython/profile_default/ipython_config.py (`ipython profile create` makes it).",
    ]
    lines += ["  history_turns (20), history_tokens (4000), history_failed (False): what a call"]
    lines += ["  sees of earlier turns; a function or a call narrows it with ContextPolicy"]
    return "\n".join(lines) + "\n"


# -- helpers several commands share ----------------------------------------------------------
def session_or_current(host: Host, session_id: str | None) -> str:
    """``session_id`` if given, else the notebook's session (CommandError if it has none)."""
    sid = session_id or host.current_session_id()
    if not sid:
        raise CommandError(NO_SESSION)
    return sid


def unknown_session(sid: str, known: list[str]) -> str:
    """The one line refusing an id that is not here, with the nearest ones there are."""
    import difflib

    near = difflib.get_close_matches(sid, known, n=3, cutoff=0.5)
    hint = f"nearest: {', '.join(near)}; " if near else ""
    return (
        f"no session {sid!r} on this machine; {hint}`{PROG} list` shows them all, "
        f"`{PROG} new --id {sid}` starts one with that id"
    )


def remote_of(meta: NotebookMeta | None) -> str | None:
    """The remote the notebook's session was last pushed to or pulled from, if any."""
    return meta.remote if meta is not None else None
