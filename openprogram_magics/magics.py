"""``%%openprogram`` and ``%openprogram``: notebook cells as turns of a git-backed session.

How a cell becomes a turn without changing how it runs: an input transformer replaces the
``%%openprogram …`` line by one call to :func:`_cell_guard`, so the body is compiled and
run by IPython exactly as a plain cell (display of the last value, tracebacks, top-level
``await``).  The guard begins the turn inside the cell (or raises the one-line
``UsageError`` that stops it); the ``post_run_cell`` hook ends it with the cell's outcome.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar, cast

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, Float, Int, Unicode

if TYPE_CHECKING:  # the engine is imported at the first turn, not at %load_ext
    from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult, InteractiveShell

    from openprogram.agent.background import BackgroundRun
    from openprogram.agentic_programming.provider import Provider
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram.providers.resolution import Resolved
    from openprogram_magics.notebook import NotebookMeta

MAGIC = "%%openprogram"
_F = TypeVar("_F", bound=Callable[..., Any])
# IPython 9 types the decorator factory as returning ``_F | Callable[[_F], _F]``, which a type
# checker cannot call; with a name argument it always returns the marking decorator.
named_line_magic = cast(Callable[[str], Callable[[_F], _F]], line_magic)

GUARD = '__import__("openprogram_magics.magics", fromlist=["_"])._cell_guard({args!r})\n'
# cells whose body is not run in place: --background (on a thread), --chat (a message)
BODY_GUARD = (
    '__import__("openprogram_magics.magics", fromlist=["_"])._body_guard({args!r}, {body!r})\n'
)
BODY_FLAGS = ("--background", "-b", "--chat")


def _ipython_counts_first() -> bool:
    import IPython

    return IPython.version_info[0] >= 9


_COUNTS_FIRST = _ipython_counts_first()


def _forward(name: str) -> Any:
    """A property of the magics that is the attribute ``name`` of its :class:`NotebookTurns`."""

    def get(self: OpenProgramMagics) -> Any:
        return getattr(self.turns, name)

    def set(self: OpenProgramMagics, value: Any) -> None:
        setattr(self.turns, name, value)

    return property(get, set)


@magics_class
class OpenProgramMagics(Magics):
    """Turns of a git-backed OpenProgram session, one per cell."""

    provider = Unicode(
        "",
        help="LLM provider for cell turns, below `%openprogram provider` ('' = the environment's).",
    ).tag(config=True)
    model = Unicode("", help="Model name for the provider ('' = provider default).").tag(
        config=True
    )
    auto = Bool(False, help="Record every cell as a turn, not only %%openprogram cells.").tag(
        config=True
    )
    live_dag = Bool(True, help="Show the turn's DAG live under each cell.").tag(config=True)
    stream = Bool(True, help="Stream a cell's top-level runtime.exec replies as they arrive.").tag(
        config=True
    )
    budget_tokens = Int(0, help="Stop calls before they exceed this many tokens (0 = no cap).").tag(
        config=True
    )
    budget_usd = Float(0.0, help="Stop calls before they exceed this many USD (0 = no cap).").tag(
        config=True
    )
    budget_per = Unicode(
        "session", help="What the budget covers: 'session' or 'run' (one cell's turn)."
    ).tag(config=True)
    requests_per_minute = Float(
        0.0, min=0.0, help="Requests to the provider per minute at most (0: no pacing)."
    ).tag(config=True)
    request_timeout = Float(
        0.0,
        min=0.0,
        help="Seconds a model server may send nothing before a request is given up and "
        "retried (0: OPENPROGRAM_TIMEOUT, else 120).",
    ).tag(config=True)
    history_turns = Int(
        20, min=0, help="Earlier turns an LLM call sees at most (0: none; newest kept)."
    ).tag(config=True)
    history_tokens = Int(
        4000, min=0, help="Estimated tokens of earlier turns a call sees (oldest cut first)."
    ).tag(config=True)
    history_failed = Bool(False, help="Later calls see the turns that failed, too.").tag(
        config=True
    )

    def __init__(self, shell: InteractiveShell | None) -> None:
        super().__init__(shell)
        from openprogram_magics.cellturn import NotebookTurns

        # the turns themselves: a plain object (tested without a shell); this class adapts
        # IPython's hooks and magics to it
        self.turns = NotebookTurns(self, self._user_ns, self._push_metadata)
        self.background: BackgroundRun | None = None  # the latest --background run

    def _user_ns(self) -> dict[str, Any]:
        return self.shell.user_ns if self.shell is not None else {}

    # the turns' state, under the names commands and tests use
    kernel_meta = _forward("kernel_meta")
    turn = _forward("turn")
    _raw_cell = _forward("raw_cell")
    _cell_count = _forward("cell_count")
    _runtime = _forward("cached_runtime")
    _runtime_key = _forward("cached_key")
    replay_session = _forward("replay_session")

    # -- the turn lifecycle ------------------------------------------------------------------
    def pre_run_cell(self, info: ExecutionInfo) -> None:
        raw = info.raw_cell or ""
        # The frontend shows the count the cell started with (``In [n]``); IPython 9
        # counts the cell before ``pre_run_cell`` (when it stores history), IPython 8 after.
        count = getattr(self.shell, "execution_count", None)
        if isinstance(count, int) and getattr(info, "store_history", False) and _COUNTS_FIRST:
            count -= 1
        self.turns.cell_started(raw, count)
        if self.auto and not raw.lstrip().startswith(("%", "!", "?")):
            try:  # no line is added to the cell: its line numbers stay the user's
                self.begin_turn("", raw)
            except UsageError as exc:
                print(f"openprogram: {exc} (this cell runs without a turn)", file=sys.stderr)

    def post_run_cell(self, result: ExecutionResult) -> None:
        self.turns.cell_ended(result.error_in_exec or result.error_before_exec, result.result)

    def bare_call_turn(self, label: str) -> AbstractContextManager[Any] | None:
        """Registered with :func:`openprogram.hosts.register_bare_call_host`: where a call
        made outside any turn records (see :meth:`NotebookTurns.bare_call_turn`)."""
        from openprogram.errors import UserError

        if not self._is_current():
            return None
        try:
            return self.turns.bare_call_turn(label)
        except UserError as exc:
            raise UsageError(str(exc)) from None

    def default_runtime(self) -> Runtime | None:
        """Registered with :func:`openprogram.hosts.register_default_runtime`."""
        return self.turns.default_runtime() if self._is_current() else None

    def _is_current(self) -> bool:
        """Whether this is the running shell's extension (a discarded shell's is not)."""
        from IPython import get_ipython

        return self.shell is not None and get_ipython() is self.shell

    def begin_turn(self, args: str, source: str) -> None:
        """Begin a turn for the cell being run (raises UsageError for the user to see)."""
        from openprogram.errors import UserError

        opts = self.cell_args(args)
        try:
            self.turns.begin_turn(opts.session, source, live=not opts.no_dag, start=opts.start)
        except UserError as exc:
            raise UsageError(str(exc)) from None

    def cell_args(self, args: str) -> _CellArgs:
        return _parse_cell_args(args)

    def cell_session(self, pinned: str | None) -> tuple[NotebookMeta, bool]:
        """See :meth:`NotebookTurns.cell_session`."""
        return self.turns.cell_session(pinned)

    def turn_done(self, meta: NotebookMeta, pinned: bool) -> None:
        self.turns.turn_done(meta, pinned)

    def runtime_key(self) -> tuple[Any, ...]:
        return self.turns.runtime_key()

    def runtime(self) -> Runtime:
        """The notebook's runtime (see :meth:`NotebookTurns.runtime`)."""
        return self.turns.runtime()

    def provider_named(self, name: str, model: str | None) -> str | Provider:
        return self.turns.provider_named(name, model)

    def choose_provider(self, name: str, model: str | None) -> None:
        """``%openprogram provider NAME [--model M]`` (:meth:`NotebookTurns.choose_provider`)."""
        self.turns.choose_provider(name, model)

    def resolution(self) -> Resolved:
        """Provider, model and base URL, each with the layer it came from."""
        return self.turns.resolution()

    def _push_metadata(self, meta: NotebookMeta) -> None:
        from openprogram_magics import bridge

        bridge.push_metadata(meta.file_json())

    # -- the magics ----------------------------------------------------------------------
    @magic_arguments()
    @argument(
        "--session",
        "-s",
        default=None,
        help="Run this cell only in session ID (the notebook keeps its own; `use` re-points).",
    )
    @argument(
        "--from",
        dest="start",
        default=None,
        metavar="NODE",
        help="Continue from the turn of NODE: this cell and the next ones form a branch there.",
    )
    @argument("--no-dag", action="store_true", help="Do not draw the live DAG under the cell.")
    @argument(
        "--background",
        "-b",
        action="store_true",
        help="Run the body on a thread and return at once (%%openprogram stop stops it).",
    )
    @argument(
        "--chat",
        action="store_true",
        help="Send the cell's text to the agent as a chat message of this session.",
    )
    @cell_magic
    def openprogram(self, line: str, cell: str) -> None:
        """Run the cell as one turn of this notebook's OpenProgram session.

        The body runs exactly as a normal cell (your namespace, the last value displayed,
        tracebacks, top-level ``await``); every ``@agentic_function`` call, LLM call and
        ``ask_user`` it makes becomes a node under the turn, the session (a git repository
        under ``$OPENPROGRAM_HOME/sessions``) gets one commit, and the turn's DAG is drawn
        under the cell.  The session id is kept in the notebook's metadata, so reopening
        the notebook or restarting the kernel continues the same session.

        Examples::

            %%openprogram
            triage("the app crashes on save")

            %%openprogram --session research_ab12cd
            survey_topic("agent reliability")

        Line commands: ``%openprogram help``.
        """
        # Reached only when the transformer did not run (e.g. run_cell_magic from code).
        self.begin_turn(line, f"{MAGIC} {line}\n{cell}")
        turn, self.turn = self.turn, None
        assert turn is not None and self.shell is not None
        result = self.shell.run_cell(cell, store_history=False)
        error = result.error_in_exec or result.error_before_exec
        self.turn_done(turn.end(error, result.result), turn.pinned)

    @named_line_magic("openprogram")
    def openprogram_line(self, line: str) -> Any:
        """Manage the notebook's OpenProgram session: ``%openprogram help`` lists commands."""
        from openprogram.errors import OpenProgramError
        from openprogram_magics import commands

        try:
            return _quiet(commands.run(self, line))
        except OpenProgramError as exc:  # a usage mistake, a session not there: one line
            raise UsageError(str(exc)) from None

    # -- what the line commands read and change (commands.Host) ------------------------------
    def current_meta(self) -> NotebookMeta | None:
        """The notebook's session the next turn would continue, if known without minting."""
        return self.turns.current_meta()

    def current_session_id(self) -> str | None:
        """The session the next turn would continue, if known without minting one."""
        meta = self.current_meta()
        return meta.session_id if meta else None

    def set_session(self, meta: NotebookMeta) -> None:
        """Continue ``meta``'s session from the next turn, and tell the frontend."""
        self.turns.set_session(meta)


class _QuietDict(dict):  # type: ignore[type-arg]
    def _ipython_display_(self) -> None:  # already printed: no second copy as Out[n]
        pass


class _QuietList(list):  # type: ignore[type-arg]
    def _ipython_display_(self) -> None:
        pass


class _QuietStr(str):
    __slots__ = ()

    def _ipython_display_(self) -> None:
        pass


def _quiet(value: Any) -> Any:
    """A command's value (``x = %openprogram status`` works) that is not displayed again
    under the text the command already printed."""
    if isinstance(value, dict):
        return _QuietDict(value)
    if isinstance(value, list):
        return _QuietList(value)
    if isinstance(value, str):
        return _QuietStr(value)
    return value


class _CellArgs:
    session: str | None
    start: str | None
    no_dag: bool
    background: bool
    chat: bool


def _parse_cell_args(line: str) -> _CellArgs:
    try:
        return parse_argstring(OpenProgramMagics.openprogram, line)  # type: ignore[no-any-return]
    except Exception as exc:  # argparse errors → one line, with the option meant if a typo
        raise UsageError(f"%%openprogram: {exc}{_meant(str(exc))}") from None


def _meant(error: str) -> str:
    """`` (did you mean --background?)`` for the first of the words argparse did not
    recognise (``error``) that is close to an option of the cell magic; else empty."""
    import difflib

    _, found, rest = error.partition("unrecognized arguments:")
    options = list(OpenProgramMagics.openprogram.parser._option_string_actions)
    for word in rest.split() if found else []:
        close = difflib.get_close_matches(word.split("=", 1)[0], options, n=1)
        if word.startswith("--") and close:
            return f" (did you mean {close[0]}?)"
    return ""


def transform_cell(lines: list[str]) -> list[str]:
    """Replace the ``%%openprogram`` line by the guard (the body is left untouched, so
    line numbers stay the user's; the guard puts the magic line back for tracebacks)."""
    if not lines:
        return lines
    lines = _without_own_load_ext(lines)
    first = lines[0].strip()
    if first.startswith(MAGIC) and not first.endswith("?"):
        rest = first[len(MAGIC) :]
        if rest and not rest[0].isspace():
            return lines  # %%openprogramsomething: not ours
        if any(flag in rest.split() for flag in BODY_FLAGS):
            return [BODY_GUARD.format(args=rest.strip(), body="".join(lines[1:]))]
        return [GUARD.format(args=rest.strip()), *lines[1:]]
    return lines


_OWN_LOAD_EXT = re.compile(r"^\s*%load_ext\s+openprogram_magics\s*$")


def _without_own_load_ext(lines: list[str]) -> list[str]:
    """``%load_ext openprogram_magics`` says nothing when the extension is loaded already.

    A reopened notebook's kernel has it loaded before the first cell runs (the frontend's
    request handing over the notebook's metadata loads it), so that cell's ``%load_ext``
    would print IPython's "already loaded… use %reload_ext" every time.  This transformer
    is installed only while the extension is loaded, so the line is blanked (line numbers
    kept); IPython's ``%load_ext`` itself is never wrapped (IPython 9.19 registers it lazily,
    and a wrapper of the lazy entry resolved back to itself: RecursionError).  A cell that
    also unloads or reloads an extension is left alone."""
    if not any(_OWN_LOAD_EXT.match(line) for line in lines):
        return lines
    if any("%unload_ext" in line or "%reload_ext" in line for line in lines):
        return lines
    return ["\n" if _OWN_LOAD_EXT.match(line) else line for line in lines]


def _instance() -> OpenProgramMagics | None:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None:
        return None
    found = shell.magics_manager.registry.get("OpenProgramMagics")
    return found if isinstance(found, OpenProgramMagics) else None


def _cell_guard(args: str) -> None:
    """First statement of a ``%%openprogram`` cell: begin its turn."""
    _show_magic_line(sys._getframe(1).f_code.co_filename, f"{MAGIC} {args}".rstrip())
    magics = _instance()
    if magics is None:
        raise UsageError("openprogram_magics is not loaded: run `%load_ext openprogram_magics`")
    magics.begin_turn(args, magics._raw_cell)


def _body_guard(args: str, body: str) -> Any:
    """The whole of a ``--background`` or ``--chat`` cell: its body is handed over, not run."""
    magics = _instance()
    if magics is None:
        raise UsageError("openprogram_magics is not loaded: run `%load_ext openprogram_magics`")
    opts = magics.cell_args(args)
    source = f"{MAGIC} {args}\n{body}"
    if opts.background and opts.chat:
        raise UsageError("%%openprogram: --background and --chat do not go together")
    if opts.start:
        raise UsageError("%%openprogram: --from goes with a plain cell (not -b or --chat)")
    if opts.background:
        from openprogram_magics.background_cell import start_background_cell

        magics.background = start_background_cell(magics, args, body, source)
        return None
    from openprogram_magics.chat_cell import run_chat_cell

    return run_chat_cell(magics, args, body, source)


def _show_magic_line(filename: str, line: str) -> None:
    """Tracebacks quote the cell from ``linecache``: make its first line the user's
    ``%%openprogram`` line again instead of this guard call."""
    import linecache

    entry = linecache.cache.get(filename)
    lines = entry[2] if isinstance(entry, tuple) and len(entry) == 4 else None
    if not isinstance(lines, list) or not lines or "_cell_guard(" not in lines[0]:
        return
    lines[0] = line + "\n"  # in place: no second list and entry kept per cell
