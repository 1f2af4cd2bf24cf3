"""``%%openprogram`` and ``%openprogram``: notebook cells as turns of a git-backed session.

How a cell becomes a turn without changing how it runs: an input transformer replaces the
``%%openprogram …`` line by one call to :func:`_cell_guard`, so the body is compiled and
run by IPython exactly as a plain cell (display of the last value, tracebacks, top-level
``await``).  The guard begins the turn inside the cell (or raises the one-line
``UsageError`` that stops it); the ``post_run_cell`` hook ends it with the cell's outcome.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, Unicode

if TYPE_CHECKING:  # the engine is imported at the first turn, not at %load_ext
    from openprogram_magics.notebook import NotebookMeta

MAGIC = "%%openprogram"
_F = TypeVar("_F", bound=Callable[..., Any])
# IPython 9 types the decorator factory as returning ``_F | Callable[[_F], _F]``, which a type
# checker cannot call; with a name argument it always returns the marking decorator.
named_line_magic = cast(Callable[[str], Callable[[_F], _F]], line_magic)

GUARD = '__import__("openprogram_magics.magics", fromlist=["_"])._cell_guard({args!r})\n'
AUTO_GUARD = '__import__("openprogram_magics.magics", fromlist=["_"])._cell_guard("", auto=True)\n'

HELP = """\
%openprogram COMMAND — the notebook's OpenProgram session

  status              session id, where it is stored, turns, HEAD, provider
  new                 start a fresh session for this notebook
  use ID              continue session ID in this notebook
  list                sessions on this machine, newest first
  log [ID]            the session's git log, one line per turn
  dag [ID] [--last N] draw the whole session DAG
  provider NAME [--model M]   test | openai | anthropic | replay
  auto on|off         make every following cell a turn (no %%openprogram needed)
  help                this text

Settings are traitlets: %config OpenProgramMagics.provider = "test"
"""


@magics_class
class OpenProgramMagics(Magics):
    """Turns of a git-backed OpenProgram session, one per cell."""

    provider = Unicode("", help="LLM provider for cell turns ('' = from the environment).").tag(
        config=True
    )
    model = Unicode("", help="Model name for the provider ('' = provider default).").tag(
        config=True
    )
    auto = Bool(False, help="Record every cell as a turn, not only %%openprogram cells.").tag(
        config=True
    )
    live_dag = Bool(True, help="Show the turn's DAG live under each cell.").tag(config=True)

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.kernel_meta: NotebookMeta | None = None  # set by new/use and by every turn
        self.turn: Any = None  # the CellTurn in progress
        self._raw_cell = ""
        self._in_cell = False  # between pre_run_cell and post_run_cell (never for silent runs)
        self._runtime: Any = None
        self._runtime_key: tuple[str, str] | None = None
        self._noted: set[str] = set()

    # -- the turn lifecycle ------------------------------------------------------------------
    def pre_run_cell(self, info: Any) -> None:
        self._raw_cell = info.raw_cell or ""
        self._in_cell = True

    def post_run_cell(self, result: Any) -> None:
        self._in_cell = False
        turn, self.turn = self.turn, None
        if turn is None:
            return
        error = result.error_in_exec or result.error_before_exec
        self.kernel_meta = turn.end(error, result.result)
        self._push_metadata()

    def begin_turn(self, args: str, source: str) -> None:
        """Begin a turn for the cell being run (raises UsageError for the user to see)."""
        from openprogram.errors import UserError

        if self.turn is not None:  # a turn whose post_run_cell never came (nested run)
            self.turn.end(None)
            self.turn = None
        opts = _parse_cell_args(args)
        try:
            meta = self._resolve(opts.session)
            from openprogram_magics.turn import CellTurn

            turn = CellTurn(
                meta,
                source=source,
                execution_count=getattr(self.shell, "execution_count", None),
                runtime=self.runtime(),
                live=self.live_dag and not opts.no_dag,
            )
            turn.begin()
        except UserError as exc:
            raise UsageError(str(exc)) from None
        self.turn = turn

    def _resolve(self, pinned: str | None) -> Any:
        from openprogram.store.session.ids import mint_session_id
        from openprogram_magics.notebook import (
            MetadataError,
            NotebookMeta,
            notebook_path_from_env,
            parse_metadata,
            read_file_metadata,
            resolve,
        )

        frontend = file_meta = None
        if self.kernel_meta is None:  # `use`/`new`/an earlier turn in this kernel wins
            try:
                frontend = self._frontend_meta()
                if frontend is None:
                    user_ns = self.shell.user_ns if self.shell is not None else {}
                    path = notebook_path_from_env(user_ns)
                    if path is not None:
                        file_meta = parse_metadata(
                            read_file_metadata(path), where=f"{path.name} metadata"
                        )
            except MetadataError:
                if pinned is None:
                    raise
                # --session ID does not need the notebook's metadata: bad metadata is
                # replaced by the pinned id (pushed back after the turn)
        res = resolve(pinned=pinned, kernel=self.kernel_meta, frontend=frontend, file=file_meta)
        if res.note and res.note not in self._noted:
            self._noted.add(res.note)
            print(f"openprogram: {res.note}")
        if res.meta is None:
            meta = NotebookMeta(mint_session_id("nb"))
            print(
                f"openprogram: new session {meta.session_id} (kept with this notebook: in its "
                "metadata and in each turn's output)"
            )
            return meta
        return res.meta

    def _frontend_meta(self) -> Any:
        """What the frontend handed this kernel, validated (MetadataError if unusable).

        A message the bridge refused (not an object, too large...) stops turns too, rather
        than quietly minting a session whose id would then overwrite the notebook's.
        """
        from openprogram_magics import bridge
        from openprogram_magics.notebook import MetadataError, parse_metadata

        state = bridge.frontend_state()
        if state is None:
            return None
        if state.problem is not None:
            raise MetadataError(
                f"the notebook's metadata.openprogram is unusable ({state.problem}); "
                "run `%openprogram new` to start a fresh session for this notebook"
            )
        return parse_metadata(state.metadata) if state.metadata is not None else None

    def runtime(self) -> Any:
        from openprogram.providers import create_runtime

        key = (self.provider, self.model)
        if self._runtime is None or key != self._runtime_key:
            self._runtime = create_runtime(
                self.provider or None, self.model or None, required=False
            )
            self._runtime_key = key
        return self._runtime

    def _push_metadata(self) -> None:
        from openprogram_magics import bridge

        if self.kernel_meta is not None:
            bridge.push_metadata(self.kernel_meta.to_json())

    # -- the magics ----------------------------------------------------------------------
    @magic_arguments()
    @argument("--session", "-s", default=None, help="Pin this cell to session ID.")
    @argument("--no-dag", action="store_true", help="Do not draw the live DAG under the cell.")
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
        assert self.shell is not None
        result = self.shell.run_cell(cell, store_history=False)
        self.kernel_meta = turn.end(result.error_in_exec or result.error_before_exec, result.result)
        self._push_metadata()

    @named_line_magic("openprogram")
    def openprogram_line(self, line: str) -> Any:
        """Manage the notebook's OpenProgram session: ``%openprogram help`` lists commands."""
        from openprogram.errors import UserError

        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"cannot parse arguments: {exc}") from None
        command, rest = (words[0], words[1:]) if words else ("status", [])
        handler = getattr(self, f"_cmd_{command}", None)
        if handler is None:
            raise UsageError(f"unknown command {command!r}; `%openprogram help` lists them")
        try:
            return _quiet(handler(rest))
        except UserError as exc:
            raise UsageError(str(exc)) from None

    # -- line commands ---------------------------------------------------------------------
    def _cmd_help(self, _args: list[str]) -> None:
        print(HELP)

    def _current_id(self) -> str | None:
        try:
            meta = self._resolve_quiet()
        except Exception:
            return None
        return meta.session_id if meta else None

    def _resolve_quiet(self) -> Any:
        if self.kernel_meta is not None:
            return self.kernel_meta
        return self._frontend_meta()

    def _cmd_status(self, _args: list[str]) -> dict[str, Any]:
        from openprogram.agent.session_db import default_db

        sid = self._current_id()
        rt = self.runtime()
        info: dict[str, Any] = {
            "session_id": sid,
            "provider": rt.provider.name if rt.configured else None,
            "model": rt.model or None,
            "auto": self.auto,
        }
        db = default_db()
        if sid and db.exists(sid):
            session = db.open(sid)
            info.update(
                path=str(session.path),
                turns=sum(1 for e in session.index() if e["kind"] == "turn"),
                head=session.head_id,
            )
        elif sid:
            info["path"] = f"{db.root / sid} (created at the first turn)"
        lines = [f"{k:>10}: {v}" for k, v in info.items()]
        if not rt.configured:
            lines.append("  provider: none — `%openprogram provider test` works offline")
        print("\n".join(lines))
        return info

    def _cmd_new(self, _args: list[str]) -> str:
        from openprogram.store.session.ids import mint_session_id
        from openprogram_magics.notebook import NotebookMeta

        self.kernel_meta = NotebookMeta(mint_session_id("nb"))
        self._push_metadata()
        print(f"openprogram: new session {self.kernel_meta.session_id} for this notebook")
        return self.kernel_meta.session_id

    def _cmd_use(self, args: list[str]) -> str:
        from openprogram.agent.session_db import default_db
        from openprogram.store.session.ids import validate_session_id
        from openprogram_magics.notebook import NotebookMeta

        if len(args) != 1:
            raise UsageError("usage: %openprogram use SESSION_ID")
        sid = validate_session_id(args[0])
        self.kernel_meta = NotebookMeta(sid)
        self._push_metadata()
        exists = default_db().exists(sid)
        print(
            f"openprogram: using session {sid}"
            + ("" if exists else " (new: created at the next turn)")
        )
        return sid

    def _cmd_list(self, _args: list[str]) -> list[dict[str, Any]]:
        from openprogram.agent.session_db import default_db

        sessions = default_db().list_sessions()
        for meta in sessions:
            print(f"{meta['id']:<28} turns={meta.get('turns', '?'):<5} {meta.get('title', '')}")
        if not sessions:
            print("no sessions yet")
        return sessions

    def _cmd_log(self, args: list[str]) -> list[str]:
        from openprogram.agent.session_db import default_db

        sid = args[0] if args else self._current_id()
        if not sid:
            raise UsageError("no session yet; run a %%openprogram cell or `%openprogram use ID`")
        import git

        repo = git.Repo(default_db().open(sid).path)
        lines = [
            f"{c.hexsha[:8]} "
            + (c.summary if isinstance(c.summary, str) else c.summary.decode(errors="replace"))
            for c in repo.iter_commits("main")
        ]
        repo.close()
        print("\n".join(lines))
        return lines

    def _cmd_provider(self, args: list[str]) -> None:
        from openprogram.providers import PROVIDER_NAMES, create_runtime

        if not args:
            rt = self.runtime()
            print(f"provider: {rt.provider.name if rt.configured else 'none'} model: {rt.model}")
            return
        name, model = args[0], ""
        if len(args) == 3 and args[1] == "--model":
            model = args[2]
        elif len(args) != 1:
            raise UsageError("usage: %openprogram provider NAME [--model MODEL]")
        if name not in PROVIDER_NAMES:
            raise UsageError(
                f"unknown provider {name!r}; choose one of {', '.join(PROVIDER_NAMES)}"
            )
        create_runtime(name, model or None)  # fail now, not at the next cell
        self.provider, self.model = name, model
        # calls made outside a turn (the process's ad-hoc session) use the same provider
        os.environ["OPENPROGRAM_PROVIDER"] = name
        if model:
            os.environ["OPENPROGRAM_MODEL"] = model
        else:  # the provider's own default, not the model chosen for another provider
            os.environ.pop("OPENPROGRAM_MODEL", None)
        print(f"openprogram: provider {name}" + (f" (model {model})" if model else ""))

    def _cmd_auto(self, args: list[str]) -> None:
        if args not in (["on"], ["off"]):
            raise UsageError("usage: %openprogram auto on|off")
        self.auto = args == ["on"]
        print(f"openprogram: every cell is a turn: {'on' if self.auto else 'off'}")

    def _cmd_dag(self, args: list[str]) -> Any:
        from openprogram_magics.widget import show_dag

        last = 50
        if "--last" in args:
            i = args.index("--last")
            try:
                last = int(args[i + 1])
            except (IndexError, ValueError):
                raise UsageError("usage: %openprogram dag [ID] [--last N]") from None
            args = args[:i] + args[i + 2 :]
        sid = args[0] if args else self._current_id()
        if not sid:
            raise UsageError("no session yet; run a %%openprogram cell or `%openprogram use ID`")
        return show_dag(sid, last_turns=last)


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
    no_dag: bool


def _parse_cell_args(line: str) -> _CellArgs:
    try:
        return parse_argstring(OpenProgramMagics.openprogram, line)  # type: ignore[no-any-return]
    except Exception as exc:  # argparse errors → one line
        raise UsageError(f"%%openprogram: {exc}") from None


def transform_cell(lines: list[str]) -> list[str]:
    """Replace the ``%%openprogram`` line by the guard (the body is left untouched).

    With ``%openprogram auto on``, a guard line is prepended to ordinary code cells too.
    """
    if not lines:
        return lines
    first = lines[0].strip()
    if first.startswith(MAGIC) and not first.endswith("?"):
        rest = first[len(MAGIC) :]
        if rest and not rest[0].isspace():
            return lines  # %%openprogramsomething: not ours
        return [GUARD.format(args=rest.strip()), *lines[1:]]
    magics = _instance()
    if magics is not None and magics.auto and not first.startswith(("%", "!", "?")):
        return [AUTO_GUARD, *lines]
    return lines


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


def _cell_guard(args: str, auto: bool = False) -> None:
    """First statement of a ``%%openprogram`` cell: begin its turn."""
    magics = _instance()
    if magics is None:
        if auto:
            return
        raise UsageError("openprogram_magics is not loaded: run `%load_ext openprogram_magics`")
    if auto and not magics._in_cell:
        return  # a silent request (a frontend's): no post_run_cell would ever end the turn
    magics.begin_turn(args, magics._raw_cell)
