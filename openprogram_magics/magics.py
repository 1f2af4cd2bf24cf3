"""``%%openprogram`` and ``%openprogram``: notebook cells as turns of a git-backed session.

This module parses and hands off.  :class:`OpenProgramMagics` holds the notebook's
settings (traitlets: ``%config OpenProgramMagics.…``) and adapts IPython's hooks and magics
to the plain objects that do the work:

- :class:`~openprogram_magics.cellturn.NotebookTurns` (``self.turns``): which session a
  cell's turn goes to, the provider and runtime, beginning and ending each turn;
- :mod:`openprogram_magics.cells`: the kinds of ``%%openprogram`` cell (plain,
  ``--background``, ``--chat``), reached through an input transformer so the body runs
  exactly as a plain cell;
- :mod:`openprogram_magics.commands`: the ``%openprogram`` line commands, one module each.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar, cast

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from traitlets import Bool, Float, Int, TraitError, Unicode, validate

from openprogram_magics.cells import plain
from openprogram_magics.cells.options import cell_options
from openprogram_magics.cellturn import NotebookTurns

if TYPE_CHECKING:  # the engine is imported at the first turn, not at %load_ext
    from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult, InteractiveShell

    from openprogram.agent.background import BackgroundRun
    from openprogram.agentic_programming.provider import Provider
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram.providers.resolution import Resolved
    from openprogram_magics.notebook import NotebookMeta

_F = TypeVar("_F", bound=Callable[..., Any])
# IPython 9 types the decorator factory as returning ``_F | Callable[[_F], _F]``, which a type
# checker cannot call; with a name argument it always returns the marking decorator.
named_line_magic = cast(Callable[[str], Callable[[_F], _F]], line_magic)


def _ipython_counts_first() -> bool:
    import IPython

    return IPython.version_info[0] >= 9


_COUNTS_FIRST = _ipython_counts_first()


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

    @validate("requests_per_minute")
    def _a_rate_a_user_may_set(self, proposal: Any) -> float:
        """Refused as it is set (``%config`` logs why and keeps the old value)."""
        from openprogram.agentic_programming.ratelimit import checked_rate
        from openprogram.errors import UserError

        try:
            return checked_rate(proposal["value"], "requests_per_minute") or 0.0
        except UserError as exc:
            raise TraitError(str(exc)) from None

    def __init__(self, shell: InteractiveShell | None) -> None:
        super().__init__(shell)
        # the turns themselves: a plain object (tested without a shell) reading the settings
        # above; this class adapts IPython's hooks and magics to it
        self.turns = NotebookTurns(self, self._user_ns, self._push_metadata)
        self.background: BackgroundRun | None = None  # the latest --background run
        self.chat_goal: Any = None  # what `%openprogram goal` set for the chat cells

    def _user_ns(self) -> dict[str, Any]:
        return self.shell.user_ns if self.shell is not None else {}

    def _push_metadata(self, meta: NotebookMeta) -> None:
        from openprogram_magics import bridge

        bridge.push_metadata(meta.file_json())

    # -- IPython's hooks, and the engine's host registry --------------------------------------
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
                plain.begin(self.turns, "", raw)
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

    # -- the magics ----------------------------------------------------------------------
    @cell_options
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
        assert self.shell is not None
        plain.run_body(self.shell, self.turns, line, cell)

    @named_line_magic("openprogram")
    def openprogram_line(self, line: str) -> Any:
        """Manage the notebook's OpenProgram session: ``%openprogram help`` lists commands."""
        from openprogram.errors import OpenProgramError
        from openprogram_magics import commands
        from openprogram_magics.quiet import quiet

        try:
            return quiet(commands.run(self, line))
        except OpenProgramError as exc:  # a usage mistake, a session not there: one line
            raise UsageError(str(exc)) from None

    # -- what a line command reads and changes (commands.Host) ---------------------------
    @property
    def replay_session(self) -> str | None:
        """The session ``%openprogram provider replay`` answers from."""
        return self.turns.replay_session

    @replay_session.setter
    def replay_session(self, value: str | None) -> None:
        self.turns.replay_session = value

    def runtime(self) -> Runtime:
        """The notebook's runtime (:meth:`NotebookTurns.runtime`)."""
        return self.turns.runtime()

    def provider_named(self, name: str, model: str | None) -> str | Provider:
        return self.turns.provider_named(name, model)

    def choose_provider(self, name: str, model: str | None) -> None:
        """``%openprogram provider NAME [--model M]`` (:meth:`NotebookTurns.choose_provider`)."""
        self.turns.choose_provider(name, model)

    def resolution(self) -> Resolved:
        """Provider, model and base URL, each with the layer it came from."""
        return self.turns.resolution()

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
