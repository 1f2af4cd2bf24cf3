"""``%openprogram`` line commands: an argparse parser and one plain function per command.

Testable without a shell: :func:`run` parses a line and calls the command's function with a
:class:`Host` (the magics object in a notebook; any object with the same attributes in a
test).  The help text is generated from the parser.

Adding a command is one :func:`command` entry — its help line, its arguments — on a plain
function ``(host, args) -> value``::

    @command("greet", "say hello", arg("name", metavar="NAME"))
    def greet(host: Host, args: Namespace) -> str:
        print(f"hello {args.name}")
        return args.name

A mistake the user can fix raises :class:`CommandError` (a ``UserError``); the magic shows
it as IPython's one-line ``UsageError``.
"""

from __future__ import annotations

import argparse
import shlex
from argparse import Namespace
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from openprogram.errors import CommandError as CommandError  # moved; old path kept
from openprogram_magics.sessions import (
    context_lines,
    list_sessions,
    session_log,
    session_status,
)

if TYPE_CHECKING:  # the engine is imported at the first command, not at %load_ext
    from openprogram.agentic_programming.provider import Provider
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram_magics.notebook import NotebookMeta

PROG = "%openprogram"
NO_SESSION = "no session yet; run a %%openprogram cell or `%openprogram use ID`"


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


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    args: tuple[Arg, ...]
    run: Run


COMMANDS: dict[str, Command] = {}  # in the order the help lists them


def command(name: str, help: str, *args: Arg) -> Callable[[Run], Run]:
    """Register ``run`` as the line command ``name`` taking ``args``."""

    def register(run: Run) -> Run:
        COMMANDS[name] = Command(name, help, args, run)
        return run

    return register


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line for the user, no SystemExit
        raise CommandError(f"{self.prog}: {message}; `{PROG} help` lists the commands")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, add_help=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for cmd in COMMANDS.values():
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
    if words and words[0] not in COMMANDS:
        raise CommandError(f"unknown command {words[0]!r}; `{PROG} help` lists them")
    return build_parser().parse_args(words or ["status"])


#: Commands that reach outside the kernel (a remote, a file, the notebook's outputs): a
#: replay re-runs the notebook's cells, never these.
SIDE_EFFECT_COMMANDS = frozenset({"push", "pull", "embed", "import", "export"})


def run(host: Host, line: str) -> Any:
    """Parse ``line`` and run its command against ``host``; returns the command's value.

    In a replay (``openprogram run --replay``, which tells the kernel through the bridge's
    state) a side-effect command is skipped with a note and returns None, and a forced tool
    call (``call``) is answered from the recording (:mod:`replay_call`), never run."""
    args = parse(line)
    if args.command in SIDE_EFFECT_COMMANDS or args.command == "call":
        from openprogram_magics.bridge import replay_run

        replay = replay_run()
        if replay is not None and args.command == "call":  # a forced tool call never runs
            from openprogram_magics.replay_call import replayed_call

            return replayed_call(host, args, replay.session_id)
        if replay is not None:  # the note never repeats the line: a URL may hold a token
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


def session_or_current(host: Host, session_id: str | None) -> str:
    """``session_id`` if given, else the notebook's session (CommandError if it has none)."""
    sid = session_id or host.current_session_id()
    if not sid:
        raise CommandError(NO_SESSION)
    return sid


# -- the commands, in the order of the help -----------------------------------------------
@command("status", "session id, where it is stored, turns, HEAD, provider")
def status(host: Host, args: Namespace) -> dict[str, Any]:
    rt = host.runtime()
    info = session_status(host.current_session_id(), rt, host.auto)
    lines = [f"{k:>10}: {v}" for k, v in info.items()]
    resolution = getattr(host, "resolution", None)  # each setting with the layer it came from
    if resolution is not None:
        lines = [line for line in lines if line.split(":")[0].strip() not in ("provider", "model")]
        for line in resolution().lines():
            label, value = line.split(": ", 1)
            lines.append(f"{label:>10}: {value}")
    if not rt.configured:
        lines.append(f"  provider: none — `{PROG} provider test` works offline")
    print("\n".join(lines))
    return info


@command(
    "new",
    "start a fresh session for this notebook",
    arg("--id", dest="session_id", default=None, metavar="ID", help="with this id"),
)
def new(host: Host, args: Namespace) -> str:
    from openprogram.agent.session_db import default_db
    from openprogram.store.session.ids import mint_session_id, validate_session_id
    from openprogram_magics.notebook import NotebookMeta

    sid = mint_session_id("nb") if args.session_id is None else args.session_id
    if args.session_id is not None and default_db().exists(validate_session_id(sid)):
        raise CommandError(f"session {sid} exists; `{PROG} use {sid}` continues it")
    meta = NotebookMeta(sid)
    host.set_session(meta)
    print(f"openprogram: new session {meta.session_id} for this notebook")
    return meta.session_id


@command("use", "continue session ID in this notebook", arg("session_id", metavar="ID"))
def use(host: Host, args: Namespace) -> str:
    from openprogram.agent.session_db import default_db
    from openprogram.store.session.ids import validate_session_id
    from openprogram_magics.notebook import NotebookMeta

    sid = validate_session_id(args.session_id)
    if not default_db().exists(sid):
        raise CommandError(unknown_session(sid, [str(m["id"]) for m in list_sessions()]))
    before = host.current_session_id()
    host.set_session(NotebookMeta(sid))
    was = f" (it was on {before})" if before and before != sid else ""
    print(f"openprogram: this notebook now continues session {sid}{was}")
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


@command("list", "sessions on this machine, newest first")
def list_(host: Host, args: Namespace) -> list[dict[str, Any]]:
    from openprogram.view.inert import terminal_text

    sessions = list_sessions()
    for meta in sessions:  # a title may come from anyone's session: its escapes are shown
        shown = meta.get("place") or meta.get("title", "")  # the notebook where it is now
        line = f"{meta['id']:<28} turns={meta.get('turns', '?'):<5} {shown}"
        print(terminal_text(line))
    if not sessions:
        print("no sessions yet")
    return sessions


@command(
    "log", "the session's git log, one line per turn", arg("session_id", nargs="?", metavar="ID")
)
def log(host: Host, args: Namespace) -> list[str]:
    from openprogram.agent.session_db import default_db

    sid = session_or_current(host, args.session_id)
    if args.session_id is None and not default_db().exists(sid):
        print(f"openprogram: session {sid} has no turns yet (it is stored at the first turn)")
        return []
    lines = session_log(sid)
    print("\n".join(lines))
    return lines


@command(
    "context",
    "what the next call in a cell of this notebook is sent of earlier turns, and the policy",
    arg("--full", action="store_true", help="do not clip the messages"),
)
def context(host: Host, args: Namespace) -> list[str]:
    lines = context_lines(host.current_meta(), host.runtime(), full=args.full)
    print("\n".join(lines))
    return lines


@command(
    "dag",
    "draw the whole session DAG",
    arg("session_id", nargs="?", metavar="ID"),
    arg("--last", type=int, default=50, metavar="N", help="unfold only the last N turns"),
)
def dag(host: Host, args: Namespace) -> Any:
    from openprogram_magics.stale_command import marked_dag  # stale turns marked
    from openprogram_magics.widget import SavedDag

    return SavedDag(marked_dag(host, session_or_current(host, args.session_id), args.last))


@command(
    "provider",
    "show or choose the provider: test | openai | anthropic | replay",
    arg("name", nargs="?", metavar="NAME"),
    arg("--model", default="", metavar="M"),
)
def provider(host: Host, args: Namespace) -> None:
    from openprogram.providers import PROVIDER_NAMES, create_runtime

    if args.name is None:
        rt = host.runtime()
        print(f"provider: {rt.provider.name if rt.provider else 'none'} model: {rt.model}")
        return
    name, model = args.name, args.model
    if name not in PROVIDER_NAMES:
        raise CommandError(f"unknown provider {name!r}; choose one of {', '.join(PROVIDER_NAMES)}")
    replay = None
    if name == "replay":  # answers from this notebook's session, re-run from its root
        from openprogram_magics.sharing import replay_from_root

        replay = session_or_current(host, None)
        host.set_session(replay_from_root(replay, host.current_meta()))
    host.replay_session = replay  # the runtime is built with it: a value, not the environment
    create_runtime(host.provider_named(name, model or None), model or None)  # fail now
    # the notebook's layer, recorded in its metadata (name and model, never a key); a model
    # not given here comes from the layers below (%config, OPENPROGRAM_MODEL, the default)
    host.choose_provider(name, model or None)
    # calls made outside a turn use the same runtime: the notebook claims them as a host
    print(f"openprogram: provider {name}" + (f" (model {model})" if model else ""))
    host.runtime()  # says once where the settings it does not name come from


@command(
    "push",
    "send the session to refs/openprogram/sessions/ID of a git remote",
    arg("remote", nargs="?", metavar="REMOTE", help="URL, path or remote name (default origin)"),
)
def push(host: Host, args: Namespace) -> str:
    from dataclasses import replace

    from openprogram_magics.sharing import push_session

    meta = host.current_meta()
    message, remember = push_session(session_or_current(host, None), args.remote, _remote(meta))
    if meta is not None and remember and remember != meta.remote:
        host.set_session(replace(meta, remote=remember))
    print(message)
    return message


@command(
    "pull",
    "fetch the session from a git remote and join it (both lines kept)",
    arg("remote", nargs="?", metavar="REMOTE", help="URL, path or remote name (default origin)"),
)
def pull(host: Host, args: Namespace) -> str:
    from openprogram_magics.sharing import pull_session

    meta = host.current_meta()
    got = pull_session(session_or_current(host, None), args.remote, _remote(meta))
    print(got.describe())
    return got.status


@command("export", "write the session as a git bundle", arg("output", metavar="FILE"))
def export(host: Host, args: Namespace) -> str:
    from openprogram_magics.sharing import export_session

    path = export_session(session_or_current(host, None), args.output)
    print(f"wrote {path} ({path.stat().st_size} bytes)")
    return str(path)


@command(
    "import",
    "import a session from a bundle, or --embedded from the saved notebook",
    arg("bundle", nargs="?", metavar="FILE"),
    arg("--embedded", action="store_true", help="the bundle `embed` saved in this notebook"),
    arg("--notebook", metavar="NB.ipynb", help="with --embedded: read this notebook"),
    arg("--as", dest="as_id", metavar="NEW_ID", help="import under another session id"),
    arg("--join", action="store_true", help="with --as: join NEW_ID's unrelated history"),
    arg("--max-mb", type=float, default=10.0, metavar="MB", help="embedded size cap"),
)
def import_(host: Host, args: Namespace) -> str:
    from openprogram_magics.sharing import import_embedded, import_session

    if args.embedded == (args.bundle is not None):
        raise CommandError("usage: %openprogram import FILE | import --embedded")
    if args.embedded:
        got = import_embedded(args.notebook, args.as_id, int(args.max_mb * 1048576), args.join)
    else:
        got = import_session(args.bundle, args.as_id, args.join)
    print(got.describe() + f"; `{PROG} use {got.session_id}` continues it here")
    return got.session_id


@command(
    "embed",
    "keep the session in this notebook (a bundle in this cell's output; save to keep)",
    arg("--max-mb", type=float, default=10.0, metavar="MB", help="refuse above (default 10)"),
)
def embed(host: Host, args: Namespace) -> Any:
    from openprogram_magics.sharing import EmbeddedBundle, embed_payload

    sid = session_or_current(host, None)
    return EmbeddedBundle(embed_payload(sid, int(args.max_mb * 1048576)))


def _remote(meta: NotebookMeta | None) -> str | None:
    return meta.remote if meta is not None else None


@command(
    "auto",
    "make every following cell a turn (no %%openprogram needed)",
    arg("state", choices=["on", "off"]),
)
def auto(host: Host, args: Namespace) -> None:
    host.auto = args.state == "on"
    print(f"openprogram: every cell is a turn: {args.state}")


@command(
    "usage",
    "tokens and cost (USD) by function, turn and session",
    arg("session_id", nargs="?", metavar="ID"),
    arg("--calls", action="store_true", help="list every call too"),
)
def usage(host: Host, args: Namespace) -> dict[str, Any]:
    from openprogram.agent.session_db import default_db
    from openprogram.usage.totals import summarize, usage_table

    sid = session_or_current(host, args.session_id)
    db = default_db()
    if not db.exists(sid):
        raise CommandError(f"session {sid} has no turns yet")
    nodes = db.open(sid).nodes()
    print(f"session {sid}\n" + usage_table(nodes, calls=args.calls))
    return summarize(nodes)


@command(
    "diff",
    "pair the calls of two turns (or --lines, --runs) and say what changed and why",
    arg("a", nargs="?", metavar="A", help="a turn: node id, 5, 5@alice, head; --runs: a run id"),
    arg("b", nargs="?", metavar="B"),
    arg("--lines", action="store_true", help="the lines (branches) ending at A and B"),
    arg("--runs", action="store_true", help="two runs of this notebook (default: the last two)"),
    arg("--all", action="store_true", help="list the unchanged calls too"),
    arg("--widget", action="store_true", help="side by side in a widget (pairs open and close)"),
    arg("--session", default=None, metavar="ID", help="another session than the notebook's"),
)
def diff(host: Host, args: Namespace) -> Any:
    from openprogram.agent.session_db import default_db
    from openprogram.compare.sessions import diff_session, mode_of
    from openprogram_magics.diff_view import DiffView

    sid = session_or_current(host, args.session)
    if not default_db().exists(sid):
        raise CommandError(f"session {sid} has no turns yet")
    report = diff_session(default_db().open(sid), args.a, args.b, mode_of(args.lines, args.runs))
    title = f"openprogram diff · session {sid}"
    if args.widget:
        from openprogram_magics.diff_widget import DiffWidget, SavedDiff

        return SavedDiff(DiffWidget(report, title=title), all_rows=args.all)
    return DiffView(report, title=title, all_rows=args.all)


@command("stop", "stop the background run after its current call (again: kill it now)")
def stop(host: Host, args: Namespace) -> str:
    run = getattr(host, "background", None)
    if run is None:
        raise CommandError(
            "no background run in this kernel (%%openprogram --background starts one)"
        )
    said = str(run.stop())
    print(f"openprogram: {said}")
    return said


# commands kept in their own modules (registered on import, listed before help)
from openprogram_magics import call_command as _call_command  # noqa: E402, F401
from openprogram_magics import chatcommands as _chatcommands  # noqa: E402, F401
from openprogram_magics import stale_command as _stale_command  # noqa: E402, F401


@command("help", "this text")
def help_(host: Host, args: Namespace) -> None:
    print(help_text())
