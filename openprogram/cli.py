"""The ``openprogram`` console script.

    openprogram sessions list                 id, turns, updated, title — newest first
    openprogram sessions show ID [--last N] [--page P]   meta, counts, problems, the DAG
                     [--html [-o FILE]]       the DAG as one self-contained interactive page
    openprogram sessions log ID               one line per commit
    openprogram sessions usage ID [--calls]   tokens and cost by function, turn, session
                     [--turns N|all]          the newest N turns by turn (default 50)
    openprogram sessions delete ID [--yes] [--force]   --force: turns not pushed too
    openprogram sessions export ID -o FILE    a git bundle of the session
    openprogram sessions export ID --appendix -o methods.md   a methods appendix
    openprogram sessions export ID --pytest tests/test_x.py   a keyless test of its calls
    openprogram sessions import FILE [--as NEW_ID [--join]]
    openprogram sessions push|pull ID [REMOTE] | pull --notebook NB.ipynb [REMOTE]
                     push [--with-replays]   a replay session too (run --replay keeps them here)
    openprogram research ["TASK"] --work-dir DIR [--session ID] [--provider NAME] [--restart]
                         [--brief] [--budget-tokens N] [--budget-usd X] [--budget-per session|run]
    openprogram chat [--session ID] [-m TEXT]... replies stream; ends at EOF or /exit

Adding a command: write ``add_<name>_parser(subparsers)`` that registers a parser whose
handler is set with ``parser.set_defaults(handler=<function(args) -> exit code>)``, and
append it to :data:`COMMANDS`.  Another package adds commands through the entry point group
``openprogram.cli`` (:mod:`openprogram.cli_plugins`): the notebook extension adds ``run NB.ipynb
[-o OUT]`` (execute a notebook, continuing its session), ``git-setup`` and
``git-merge-notebook``.  Keep imports inside the handlers so ``openprogram --help``
stays fast.  A handler reports a mistake the user can fix by raising :class:`CliError` (or
any :class:`~openprogram.errors.UserError` / ``SessionError``): ``main`` prints it as one
line on stderr and exits with status 2.  A provider's or a reply's failure
(:class:`~openprogram.errors.OpenProgramError`) is two lines (what failed; how to see more)
and status 1; ``openprogram --traceback COMMAND`` (or ``OPENPROGRAM_TRACEBACK=1``) raises it
with its traceback instead.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from openprogram import cli_plugins, settings
from openprogram.errors import CliError, UserError

if TYPE_CHECKING:
    from pathlib import Path

    from openprogram.cli_plugins import CliPlugin
    from openprogram.store.session.store import SessionStore

Handler = Callable[[argparse.Namespace], int]
SubParsers = Any  # argparse's private _SubParsersAction


# -- helpers shared by commands -------------------------------------------------------------
def open_store(args: argparse.Namespace) -> SessionStore:
    """The store under ``--home`` or ``$OPENPROGRAM_HOME`` (default ``~/.openprogram``)."""
    from openprogram.store.session.store import SessionStore

    return SessionStore(getattr(args, "home", None))


def fmt_time(value: Any) -> str:
    import time

    if not isinstance(value, int | float) or isinstance(value, bool):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(value))


def error_line(exc: BaseException) -> str:
    """An error's message as :func:`one_line` shows it, credentials (keys, URL passwords)
    masked: the last line of defence before the terminal."""
    from openprogram.context.secrets import redact_secrets

    return one_line(redact_secrets(str(exc)))


def one_line(text: str) -> str:
    """``text`` (a message of ours that may quote a session) on one line for the terminal:
    whitespace runs become one space, any other control character is shown escaped."""
    from openprogram.view.inert import terminal_text

    return terminal_text(" ".join(str(text).split()))


# -- sessions ---------------------------------------------------------------------------------
def clip_middle(text: str, width: int) -> str:
    """``text`` in ``width`` characters, cut in the middle (a path keeps its file name)."""
    if len(text) <= width:
        return text
    head = width // 4
    return text[:head] + "…" + text[len(text) - (width - head - 1) :]


def belongs_to(meta: dict[str, Any]) -> str:
    """What a session is for: its notebook (``notebook <path>``), research task, script,
    chat — from ``meta.json``'s title and source (a problem reading it wins)."""
    if meta.get("problem"):
        return str(meta["problem"])
    title, source = str(meta.get("title") or ""), str(meta.get("source") or "")
    if meta.get("place"):  # where this machine last used it (the notebook where it is now)
        named = meta.get("title_source") in ("model", "user")  # a chat's title, or yours
        return f"{title} · {meta['place']}" if named and title else str(meta["place"])
    if title and title != meta.get("id"):
        if source == "cli" and str(meta.get("id", "")).startswith("research"):
            return f"research: {title}"
        return title
    return source or "-"


def sessions_list(args: argparse.Namespace) -> int:
    from openprogram.view.inert import terminal_text

    store = open_store(args)
    rows = store.list_sessions()
    if not rows:
        print(f"no sessions under {store.root}")
        return 0
    ids = [terminal_text(m["id"]) for m in rows]
    width = max(len("ID"), *(len(i) for i in ids))
    print(f"{'ID':<{width}}  {'TURNS':>5}  {'UPDATED':<16}  BELONGS TO")
    for meta, shown_id in zip(rows, ids, strict=True):
        turns = meta.get("turns")
        belongs = clip_middle(terminal_text(belongs_to(meta)), 80)
        print(
            f"{shown_id:<{width}}  {turns if isinstance(turns, int) else '?':>5}  "
            f"{fmt_time(meta.get('updated_at')):<16}  {belongs}"
        )
    return 0


MAX_PAGE = 10**12  # of --page, and of --last: far past any session, within SQLite's integers


def _open_session(args: argparse.Namespace) -> Any:
    import warnings

    store = open_store(args)
    with warnings.catch_warnings():  # problems are listed by `show` itself
        warnings.simplefilter("ignore")
        return store.open(args.session_id)


def sessions_show(args: argparse.Namespace) -> int:
    from openprogram.view.bulk import paused_gc
    from openprogram.view.inert import terminal_text

    if not 1 <= args.page <= MAX_PAGE:  # (SQLite's integers end at 2**63)
        raise CliError(f"--page {args.page}: pages count from 1 (the newest rows) to {MAX_PAGE:,}")
    args.last = min(args.last, MAX_PAGE)  # more turns than any session has: all of them
    session = _open_session(args)
    if args.html:
        return _show_html(session, args)
    meta = session.meta
    with paused_gc():
        totals = session.totals()  # the index: no node file is read for these

    def say(line: str) -> None:  # every field of a line comes from the session
        print(terminal_text(line))

    say(f"session  {session.id}")
    say(f"title    {meta.get('title') or ''}")
    say(f"agent    {meta.get('agent_id', '-')}   source {meta.get('source', '-')}")
    created, updated = fmt_time(meta.get("created_at")), fmt_time(meta.get("updated_at"))
    say(f"created  {created}   updated {updated}")
    say(f"turns    {meta.get('turns', '?')}   head {session.head_id}")
    say(f"path     {session.path}")
    from openprogram.store.session.remotes import local_replays, replay_of

    source = replay_of(meta)
    if source is not None:  # `openprogram run --replay`'s turns: kept on this machine
        say(f"replay   of session {source} (kept here: `sessions push` needs --with-replays)")
    replays = local_replays(session.path.parent, session.id)
    if replays:
        say(f"replays  {len(replays)} here, never pushed: {', '.join(replays[-5:])}")
    say(
        f"nodes    {totals['nodes']}: "
        + ", ".join(f"{k} {n}" for k, n in sorted(totals["kinds"].items()))
        + " | "
        + ", ".join(f"{s} {n}" for s, n in sorted(totals["statuses"].items()))
    )
    if session.problems:
        print(f"problems ({len(session.problems)}):")
        for problem in session.problems:
            print(f"  {one_line(problem)}")
    else:
        print("problems none")
    for line in running_elsewhere(session.path):
        say(line)
    print()
    with paused_gc():
        print(whole_tree(session, args.last, page=args.page, total=totals["nodes"]))
    return 0


def running_elsewhere(session_path: Path) -> list[str]:
    """What other processes are running in the session now (their rows in the live
    database: a research stage, a kernel's cell), before their turn commits; [] when
    nothing is running."""
    import time

    from openprogram.context.nodes import OPEN_STATUSES
    from openprogram.store.session.live import opened
    from openprogram.store.session.safegit import is_real_dir

    if not is_real_dir(session_path / ".state"):
        return []
    with opened(session_path / ".state") as live:
        found = live.live_rows()
    lines: list[str] = []
    for pid, records in found:
        last = {str(r.get("id")): r for r in records if isinstance(r.get("metadata"), dict)}
        running = [r for r in last.values() if r["metadata"].get("status") in OPEN_STATUSES]
        if not running:
            continue
        lines.append(f"running  in process {pid}, not committed yet:")
        for record in running[-12:]:
            meta = record["metadata"]
            took = int(time.time() - float(record.get("created_at") or time.time()))
            lines.append(
                f"  {meta.get('kind', '?')} {record.get('name') or '?'} · "
                f"{meta.get('status')} {took // 60}m{took % 60:02d}s"
            )
    return lines


def whole_tree(
    session: Any,
    last_turns: int | None,
    light: list[Any] | None = None,
    max_lines: int = 300,
    *,
    page: int = 1,
    total: int | None = None,
) -> str:
    """The session's DAG as a text tree: page ``page`` of ``max_lines`` rows counted from
    the newest, laid out from the index (``light``, else the newest buckets of
    ``session.light_window`` that hold those rows), node files read only for the rows
    printed (a 100,000-turn session has 500,000 nodes; a page shows 300)."""
    from openprogram.view import compute_layout, render_text_tree

    older = 0
    if light is None:
        light, older = session.light_window(page * max_lines + max(last_turns or 0, 0))
    layout = compute_layout(light, session.head_id, last_turns=last_turns)
    stop = max(layout.rows - (page - 1) * max_lines, 0)
    start = max(stop - max_lines, 0)
    printed = session.get_many(p.id for p in layout.visible(start, stop))
    for node_id, node in printed.items():  # a node not read is listed from the index
        layout.source[node_id] = node.to_dict()
    return render_text_tree(
        light, session.head_id, layout=layout, max_lines=max_lines, stop=stop,
        total=total, older=older, page=page,
    )  # fmt: skip


def _show_html(session: Any, args: argparse.Namespace) -> int:
    from openprogram.view.page import render_page

    title = f"session {session.id}"
    if session.meta.get("title") and session.meta["title"] != session.id:
        title += f" · {one_line(session.meta['title'])[:80]}"
    nodes = [c.to_dict() for c in session.nodes()]
    page = render_page(nodes, session.head_id, title=title, last_turns=args.last)
    if args.output in (None, "-"):
        sys.stdout.write(page)
        return 0
    from pathlib import Path

    target = Path(args.output)
    target.write_text(page, encoding="utf-8")
    print(f"wrote {target} ({len(nodes)} nodes; open it in a browser, it works offline)")
    return 0


def sessions_log(args: argparse.Namespace) -> int:
    import time

    from openprogram.compare.labels import relabel_log
    from openprogram.store.session.history import commit_log
    from openprogram.view.inert import terminal_text

    store = open_store(args)
    path = store.session_path(args.session_id)
    if not (path / ".git").is_dir():
        store.open(args.session_id)  # raises SessionNotFound with the how-to
    entries = commit_log(path)
    authors = [terminal_text(entry.author) or "?" for entry in entries]  # who ran each turn
    width = min(max(map(len, authors), default=0), 24)
    summaries = relabel_log((e.summary, e.author, e.email) for e in entries)  # `turn 5@bob`
    for entry, author, summary in zip(entries, authors, summaries, strict=True):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.time))
        print(f"{entry.sha[:7]} {when} {author:<{width}}  {terminal_text(summary)}")
    return 0


def sessions_usage(args: argparse.Namespace) -> int:
    from openprogram.usage.totals import index_usage_report, report_table, usage_table

    session = _open_session(args)
    if args.calls:  # each call's model: the llm nodes are read
        print(usage_table(session.nodes(), calls=True))
    else:  # the totals the index keeps, the calls of its newest buckets: no node file read
        totals, newest = session.usage_window(args.turns)
        print(report_table(index_usage_report(totals, newest, args.turns)))
    return 0


TURNS_SHOWN = 50  # the newest turns ``sessions usage`` lists by default


def _turns_shown(text: str) -> int | None:
    """``--turns``: how many of the newest turns, or ``all`` (None)."""
    if text == "all":
        return None
    if not text.isdigit() or not 0 < int(text) < 10**9:
        raise argparse.ArgumentTypeError(f"a number of turns or 'all', not {text!r}")
    return int(text)


def sessions_delete(args: argparse.Namespace) -> int:
    store = open_store(args)
    path = store.session_path(args.session_id)
    if not path.is_dir():
        store.open(args.session_id)  # raises SessionNotFound with the how-to
    lost = ""  # the turns no remote holds: `sessions delete` names them and asks
    if not args.force and (path / ".git").is_dir():
        from openprogram.store.session.remotes import unpushed_turns

        unpushed = unpushed_turns(path)
        lost = unpushed.describe() if unpushed.turns else ""
    if lost and (args.yes or not sys.stdin.isatty()):
        raise CliError(
            f"not deleted: session {args.session_id} has {lost}; they would be lost "
            "(push them first, or pass --force)"
        )
    if not args.yes:  # (with turns to lose, only at a terminal)
        question = f"delete session {args.session_id} ({path})"
        question += f"? {lost} would be lost" if lost else "?"
        try:
            answer = input(f"{question} [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            raise CliError(f"not deleted: {args.session_id} (pass --yes to skip the question)")
    place = store.place(args.session_id)
    store.delete_session(args.session_id)
    print(f"deleted session {args.session_id}")
    if place.startswith("notebook "):  # its file still names it: say what its next cell does
        print(
            f"{place[9:]} still names it: its next turn starts a new session "
            f"{args.session_id} from turn 1 (`%openprogram new` there starts one of another id)"
        )
    return 0


def sessions_export(args: argparse.Namespace) -> int:
    if args.pytest:  # a keyless test of the session (openprogram.programs.pytest_export)
        from openprogram.programs.pytest_export import export_command

        store = open_store(args)
        return export_command(store, args.session_id, args.pytest, args.functions, args.record)
    if args.output is None:
        raise CliError("sessions export: -o FILE is required (or --pytest FILE)")
    if args.appendix:
        return sessions_appendix(args)
    if args.line is not None:
        raise CliError("--line goes with --appendix")
    from openprogram.store.session.sync import export_bundle

    path = export_bundle(open_store(args), args.session_id, args.output)
    print(
        f"wrote {path} ({path.stat().st_size} bytes); import it with "
        f"`openprogram sessions import {path.name}`"
    )
    return 0


def sessions_appendix(args: argparse.Namespace) -> int:
    """A methods appendix of a line (``openprogram.compare.appendix``): Markdown, or HTML
    when the file ends in ``.html``."""
    from pathlib import Path

    from openprogram.agentic_programming.prompt import sent_messages
    from openprogram.compare.appendix import (
        build_appendix,
        render_html,
        render_markdown,
        turn_commits,
    )
    from openprogram.store.session.history import commit_log

    session = _open_session(args)
    nodes = session.nodes()
    log = commit_log(session.path)
    app = build_appendix(
        nodes,
        session_id=args.session_id,
        tip=args.line or "head",
        head_id=session.head_id,
        title=str(session.meta.get("title") or ""),
        commits=turn_commits([(e.sha, e.summary) for e in log]),
        head_commit=log[0].sha if log else "",
        messages_of=lambda node: sent_messages(session, node),
    )
    target = Path(args.output)
    html = target.suffix.lower() in (".html", ".htm")
    text = render_html(app, nodes, session.head_id) if html else render_markdown(app)
    target.write_text(text, encoding="utf-8")
    calls = sum(len(t.calls) for t in app.turns)
    print(f"wrote {target} (methods appendix: {len(app.turns)} turns, {calls} LLM calls)")
    return 0


def sessions_diff(args: argparse.Namespace) -> int:
    """Pair two turns, lines or runs of a session call by call (``openprogram.compare``)."""
    from openprogram.compare.render import render_text
    from openprogram.compare.sessions import diff_session, mode_of

    words = [w for w in (args.session_id, args.a, args.b) if w is not None] + args.trailing
    if not words:
        raise CliError("sessions diff: which session? (sessions diff ID [A B] [--lines|--runs])")
    if len(words) > 3:
        raise CliError(f"sessions diff: one session and two turns, got {shlex.join(words)}")
    args.session_id, args.a, args.b = [*words, None, None][:3]
    mode = mode_of(args.lines, args.runs)
    report = diff_session(_open_session(args), args.a, args.b, mode)
    print(render_text(report, all_rows=args.all))
    return 0


class _ModeFlag(argparse.Action):
    """``--lines`` / ``--runs``: set the mode; the words after the flag are positionals."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, True)
        namespace.trailing = [*namespace.trailing, *values]


def sessions_import(args: argparse.Namespace) -> int:
    from openprogram.store.session.sync import import_bundle

    got = import_bundle(open_store(args), args.bundle, as_id=args.as_id, join=args.join)
    print(got.describe())
    return 0


def _remote(args: argparse.Namespace) -> tuple[str, str, str]:
    """(session id, url, allowed protocols) from ID/--notebook and REMOTE."""
    import os

    from openprogram.sharing import notebook_session, resolve_remote

    recorded = None
    where = os.getcwd()
    session_id = args.session_id
    if getattr(args, "notebook", None):
        from pathlib import Path

        found, recorded = notebook_session(args.notebook)
        where = str(Path(args.notebook).resolve().parent)
        if session_id is not None and args.remote is None:  # `pull --notebook nb REMOTE`
            args.remote, session_id = session_id, None
        session_id = session_id or found
    if session_id is None:
        raise CliError("name a session: ID or --notebook NB.ipynb")
    url, protocols = resolve_remote(args.remote, where, recorded=recorded)
    return session_id, url, protocols


def sessions_push(args: argparse.Namespace) -> int:
    from openprogram.store.session.sync import push

    session_id, url, protocols = _remote(args)
    with_replays = bool(getattr(args, "with_replays", False))
    print(push(open_store(args), session_id, url, protocols, with_replays=with_replays))
    return 0


def sessions_pull(args: argparse.Namespace) -> int:
    from openprogram.store.session.sync import pull

    session_id, url, protocols = _remote(args)
    print(pull(open_store(args), session_id, url, protocols).describe())
    return 0


def add_sessions_parser(sub: SubParsers) -> None:
    sessions = sub.add_parser("sessions", help="list, inspect and delete sessions")
    commands = sessions.add_subparsers(dest="sessions_command", metavar="COMMAND")
    sessions.set_defaults(handler=lambda _args: _usage(sessions))

    p = commands.add_parser("list", help="every session, newest first")
    p.set_defaults(handler=sessions_list)
    p = commands.add_parser("show", help="meta, node counts, problems and the DAG of a session")
    p.add_argument("session_id", metavar="ID")
    p.add_argument(
        "--last", type=int, default=50, metavar="N", help="unfold only the last N turns (50)"
    )
    p.add_argument(
        "--page", type=int, default=1, metavar="P",
        help="the P-th 300 rows counted from the newest (1: the newest)",
    )  # fmt: skip
    p.add_argument(
        "--html",
        action="store_true",
        help="write the whole session as one self-contained, interactive HTML page",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="with --html: the file (default: stdout)")
    p.set_defaults(handler=sessions_show)
    p = commands.add_parser("log", help="the session's git log, one line per commit")
    p.add_argument("session_id", metavar="ID")
    p.set_defaults(handler=sessions_log)
    p = commands.add_parser("usage", help="tokens and cost by function, turn and session")
    p.add_argument("session_id", metavar="ID")
    p.add_argument("--calls", action="store_true", help="list every call too")
    p.add_argument(
        "--turns",
        type=_turns_shown,
        default=TURNS_SHOWN,
        metavar="N|all",
        help=f"list the newest N turns by turn (default {TURNS_SHOWN}; all: every turn)",
    )
    p.set_defaults(handler=sessions_usage)
    p = commands.add_parser("delete", help="delete a session (asks first)")
    p.add_argument("session_id", metavar="ID")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask")
    p.add_argument("--force", action="store_true", help="delete turns never pushed too")
    p.set_defaults(handler=sessions_delete)
    p = commands.add_parser(
        "export", help="write a session as a git bundle (--appendix: a methods appendix)"
    )
    p.add_argument("session_id", metavar="ID")
    p.add_argument("-o", "--output", metavar="FILE", help="the bundle to write")
    p.add_argument("--pytest", metavar="FILE", help="write a keyless pytest module instead")
    p.add_argument("--functions", metavar="WHERE", help="with --pytest: module, .py or notebook")
    p.add_argument("--record", action="store_true", help="with --pytest: call a real model first")
    p.add_argument(
        "--appendix",
        action="store_true",
        help="write a methods appendix of a line instead: Markdown, or HTML for FILE.html",
    )
    p.add_argument("--line", metavar="NODE", help="with --appendix: the line ending at NODE")
    p.set_defaults(handler=sessions_export)
    p = commands.add_parser("diff", help="compare two turns, lines (--lines) or runs (--runs)")
    p.add_argument("session_id", metavar="ID", nargs="?")
    p.add_argument("a", metavar="A", nargs="?", help="a turn (id, 5, 5@alice, head); --runs: a run")
    p.add_argument("b", metavar="B", nargs="?")
    # `ID --lines A B` as well as `--lines ID A B`: argparse gives no positional after an
    # option, so the mode flags take the words that follow them (joined in the handler)
    for flag, what in (
        ("--lines", "the lines ending at A and B"),
        ("--runs", "two runs of the notebook (default: last two)"),
    ):
        p.add_argument(flag, action=_ModeFlag, nargs="*", metavar=("A", "B"), help=what)
    p.set_defaults(trailing=[], lines=False, runs=False)
    p.add_argument("--all", action="store_true", help="list unchanged calls too")
    p.set_defaults(handler=sessions_diff)
    p = commands.add_parser("import", help="import a session from a git bundle")
    p.add_argument("bundle", metavar="FILE")
    p.add_argument("--as", dest="as_id", metavar="NEW_ID", help="under another session id")
    p.add_argument("--join", action="store_true", help="with --as: join its unrelated history")
    p.set_defaults(handler=sessions_import)
    remote_help = "a URL, a path, or a remote of the git repository here (default: origin)"
    for name, handler, what in (
        ("push", sessions_push, "send a session to refs/openprogram/sessions/ID of a remote"),
        ("pull", sessions_pull, "fetch a session from a remote and join it to the local one"),
    ):
        p = commands.add_parser(name, help=what)
        p.add_argument("session_id", metavar="ID", nargs="?")
        p.add_argument("remote", metavar="REMOTE", nargs="?", help=remote_help)
        p.add_argument("--notebook", metavar="NB.ipynb", help="the session this notebook names")
        if name == "push":
            p.add_argument(
                "--with-replays",
                action="store_true",
                help="push a replay session too (`run --replay` keeps them on this machine)",
            )
        p.set_defaults(handler=handler)


# -- research ---------------------------------------------------------------------------------
def research_cmd(args: argparse.Namespace) -> int:
    """Run the research workflow as one turn of a (new or continued) session."""
    from pathlib import Path

    from openprogram.programs.research import run_research
    from openprogram.programs.research.artifacts import ResearchWork
    from openprogram.programs.research.harness import stages_to_run
    from openprogram.providers import create_runtime
    from openprogram.store.session.files import mint_session_id
    from openprogram.usage.budget import budget_from

    budget = budget_from(args.budget_tokens, args.budget_usd, args.budget_per)
    # no provider: a how-to error before any write
    runtime = create_runtime(args.provider, budget=budget, timeout=args.request_timeout)
    if args.task is None and not (Path(args.work_dir) / "task.txt").is_file():
        raise CliError(f"no task given and none in {args.work_dir}: pass the TASK")
    # the folder checked before a session is named: another task's done stages refused
    work = ResearchWork(args.work_dir, args.task, redo=args.restart)
    if not (args.restart or args.search_arxiv or stages_to_run(work)):  # no session for nothing
        print(f"nothing to run: every stage in {args.work_dir} is done (--restart: again)")
        return 0
    session_id = args.session or mint_session_id("research")
    print(f"session: {session_id} (--session {session_id} to continue)", flush=True)
    db = open_store(args) if getattr(args, "home", None) else None
    from openprogram.view.run_progress import showing_progress

    with showing_progress("research", lambda: session_id):  # stage, calls, tokens so far
        result = run_research(
            args.task,
            work_dir=args.work_dir,
            session_id=session_id,
            runtime=runtime,
            db=db,
            resume=not args.restart,
            search_arxiv=args.search_arxiv,
            brief=args.brief,
        )
    print(f"ran: {', '.join(result.stages) or 'nothing (every stage was done)'}")
    print(f"{len(result.files)} files under {args.work_dir}:")
    for path in result.files:
        print(f"  {path}")
    return 0


def add_research_parser(sub: SubParsers) -> None:
    p = sub.add_parser(
        "research", help="survey, gaps, ideas, experiment design, paper, review (resumable)"
    )
    p.add_argument(
        "task", nargs="?", help="the research task, in words (default: the work dir's task)"
    )
    p.add_argument("--work-dir", required=True, metavar="DIR", help="where the files go")
    p.add_argument("--session", metavar="ID", help="continue this session (default: a new one)")
    p.add_argument("--provider", metavar="NAME", help="test, openai, anthropic (default: env)")
    p.add_argument("--restart", action="store_true", help="run every stage again (default: resume)")
    p.add_argument(
        "--brief",
        action="store_true",
        help="short lists and strings in every stage's reply (for a small local model)",
    )
    p.add_argument(
        "--search-arxiv",
        type=int,
        default=0,
        metavar="N",
        help="first search arXiv for N papers (network; $OPENPROGRAM_ARXIV_URL: another server)",
    )
    add_budget_options(p)
    add_request_timeout_option(p)
    p.set_defaults(handler=research_cmd)


def add_request_timeout_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--request-timeout",
        type=float,
        metavar="S",
        help="seconds the model server may send nothing before a request is retried "
        "(default: OPENPROGRAM_TIMEOUT, else 120; replies from compatible servers stream)",
    )


def add_budget_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget-tokens", type=int, metavar="N", help="stop before N tokens are used")
    p.add_argument("--budget-usd", type=float, metavar="X", help="stop before X USD are spent")
    p.add_argument(
        "--budget-per",
        choices=["session", "run"],
        default=None,
        help="what the budget covers (default: session)",
    )


# -- chat ---------------------------------------------------------------------------------------
def chat_cmd(args: argparse.Namespace) -> int:
    """Chat with the agent in a session: each message is a dispatcher turn; replies stream."""
    from openprogram.agent.chat import chat_turn
    from openprogram.agentic_programming.mcp.spec import parse_assignment
    from openprogram.providers import create_runtime
    from openprogram.store.session.files import mint_session_id, validate_session_id

    goal = chat_goal(args)  # a bad limit: one line, before anything else
    mcp = [parse_assignment(text) for text in args.mcp or ()]  # a bad spec: one line too
    # no provider: a how-to error before any write
    runtime = create_runtime(args.provider, timeout=args.request_timeout, mcp=mcp)
    session_id = validate_session_id(args.session) if args.session else mint_session_id("chat")
    print(f"session: {session_id} (--session {session_id} to continue)", flush=True)
    messages = iter(args.message) if args.message else None
    while True:
        if messages is not None:
            text = next(messages, None)
        else:
            try:
                text = input("you> ")
            except EOFError:
                text = None
        if text is None or text.strip() in ("/exit", "/quit"):
            return 0
        if not text.strip():
            continue
        result, streamed = chat_turn(text, session_id=session_id, runtime=runtime, goal=goal)
        if not streamed:
            print(result.text)
        if result.goal is not None and result.goal["status"] != "question":
            goal = None  # the run ended (met, a limit, a stop): later messages are plain
        if result.status != "completed":
            from openprogram.context.outcome import ended_sentence

            ended = ended_sentence("the reply", result.status, result.error)
            print(f"openprogram: {one_line(ended)}", file=sys.stderr)
            if messages is not None:
                return 1


def add_chat_parser(sub: SubParsers) -> None:
    p = sub.add_parser("chat", help="chat with the agent in a session (replies stream)")
    p.add_argument("--session", metavar="ID", help="continue this session (a notebook's too)")
    p.add_argument("--provider", metavar="NAME", help="test, openai, anthropic (default: env)")
    p.add_argument(
        "-m",
        "--message",
        action="append",
        metavar="TEXT",
        help="send TEXT and exit (repeatable); without it, read messages from the terminal",
    )
    p.add_argument(
        "--goal",
        metavar="TEXT",
        help="keep working on TEXT: after each reply a check decides whether it is met; "
        "if not, a continuation turn follows",
    )
    p.add_argument(
        "--goal-turns", type=int, default=None, metavar="N", help="at most N continuation turns"
    )
    p.add_argument(
        "--mcp",
        action="append",
        metavar="NAME=CMD ARGS",
        help="offer the tools of an MCP server (stdio: NAME=COMMAND ARGS…; streamable HTTP: "
        "NAME=URL); repeatable; stopped when the command exits",
    )
    add_request_timeout_option(p)
    p.set_defaults(handler=chat_cmd)


def chat_goal(args: argparse.Namespace) -> Any:
    """``--goal`` as a ``Goal`` (None without one); a bad limit is a one-line error."""
    from openprogram.agent.dispatcher.goal import DEFAULT_MAX_TURNS, Goal

    if args.goal is None:
        return None
    turns = DEFAULT_MAX_TURNS if args.goal_turns is None else args.goal_turns
    return Goal(args.goal, max_turns=turns)


# -- the command table -------------------------------------------------------------------------
COMMANDS: list[Callable[[SubParsers], None]] = [
    add_sessions_parser,
    add_research_parser,
    add_chat_parser,
]


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def build_parser(plugins: Sequence[CliPlugin] | None = None) -> argparse.ArgumentParser:
    from openprogram import __version__

    parser = argparse.ArgumentParser(
        prog="openprogram",
        description="Agentic programming with git-backed sessions.",
    )
    parser.add_argument("--version", action="version", version=f"openprogram {__version__}")
    parser.add_argument(
        "--home",
        metavar="DIR",
        help="where sessions live (default: $OPENPROGRAM_HOME or ~/.openprogram)",
    )
    parser.add_argument(
        "--traceback",
        action="store_true",
        help="show the traceback of a provider's or a reply's error (default: one line; "
        "also OPENPROGRAM_TRACEBACK=1)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    for plugin in cli_plugins.plugins() if plugins is None else plugins:
        plugin.add_parsers(sub)  # other packages' commands (the notebook's `run`)
    parser.set_defaults(handler=lambda _args: _usage(parser))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from openprogram.errors import OpenProgramError, SessionError

    plugins = cli_plugins.plugins()
    args = build_parser(plugins).parse_args(argv)
    handler: Handler = args.handler
    words = sys.argv[1:] if argv is None else argv
    cli_plugins.before_command(plugins, args.command, words)
    try:
        return handler(args)
    except (CliError, UserError, SessionError) as exc:
        print(f"openprogram: {error_line(exc)}", file=sys.stderr)
        return 2
    except OpenProgramError as exc:  # a provider's or a reply's failure: one line, not a trace
        import os

        if getattr(args, "traceback", False) or settings.current().traceback:
            raise
        print(
            f"openprogram: {type(exc).__name__}: {error_line(exc)[:600]}\n"
            "  (openprogram --traceback ... shows the traceback)",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `openprogram sessions show ID | head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
