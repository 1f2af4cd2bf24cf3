"""A notebook's turns as a plain object: which session a cell's turn goes to, the provider
the notebook uses, the runtime built from it, and beginning and ending each cell's turn.

:class:`NotebookTurns` needs no IPython shell: it reads the settings (provider, model,
budget, pacing, history policy: the magics' traitlets) from a :class:`Settings` object
and the user's namespace through a callable, and hands each metadata change to a
callback (the magics push it to the frontend).  :class:`~openprogram_magics.magics.
OpenProgramMagics` is the adapter that calls it from IPython's hooks and magics; a cell kind
(:mod:`openprogram_magics.cells`) reads it as ``host.turns``.

The provider a cell chose reaches its calls as a value: the turn's runtime is built here
and installed in the turn state; a call made outside any cell (a thread the cell
started, a ``session_context()`` in a plain cell) gets the same runtime through the
engine's host registry (:meth:`NotebookTurns.default_runtime`).  Nothing is written to
``os.environ``.

Provider, model and base URL follow :mod:`openprogram.providers.resolution`: the notebook
(``%openprogram provider NAME [--model M]``, kept in its metadata) > ``%config
OpenProgramMagics.provider/model`` > the environment > the provider's default, each setting
on its own; how one layer overrides another is said once, in one line.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from openprogram.agentic_programming.provider import Provider
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram.providers.resolution import Layer, Resolved
    from openprogram_magics.notebook import NotebookMeta
    from openprogram_magics.turn import CellTurn


class Settings(Protocol):
    """What the turns read of the notebook's configuration (the magics' traitlets)."""

    provider: str
    model: str
    live_dag: bool
    stream: bool
    budget_tokens: int
    budget_usd: float
    budget_per: str
    requests_per_minute: float
    request_timeout: float
    history_turns: int
    history_tokens: int
    history_failed: bool


class NotebookTurns:
    """The turn state of one notebook's kernel (one per magics object)."""

    def __init__(
        self,
        settings: Settings,
        user_ns: Callable[[], Mapping[str, Any]] = dict,
        on_meta: Callable[[NotebookMeta], None] | None = None,
    ) -> None:
        self.settings = settings
        self.user_ns = user_ns
        self.on_meta = on_meta  # the notebook's metadata changed (the frontend stores it)
        self.kernel_meta: NotebookMeta | None = None  # set by new/use and by every turn
        # sessions this kernel chose (new/use, a turn) or found not to be another
        # notebook's (a copy of a notebook forks a new one: openprogram_magics.copies)
        self.vetted: set[str] = set()
        self.turn: CellTurn | None = None  # the turn in progress
        self.raw_cell = ""
        self.in_cell = False  # between the cell's start and end (never for silent runs)
        self.cell_count: int | None = None  # the running cell's In [n]
        self.cached_runtime: Runtime | None = None
        self.cached_key: tuple[Any, ...] | None = None
        self.noted: set[str] = set()
        self.replay_session: str | None = None  # what `provider replay` answers from
        # the notebook's layer: `%openprogram provider`, or adopted from its metadata; every
        # session this notebook continues records it
        self.chosen: tuple[str, str | None] | None = None

    # -- a cell's turn -------------------------------------------------------------------
    def cell_started(self, raw_cell: str, count: int | None) -> None:
        self.raw_cell, self.cell_count, self.in_cell = raw_cell, count, True

    def cell_ended(self, error: BaseException | None, result: Any) -> None:
        """The cell is over: end its turn (if it had one) with the cell's outcome."""
        self.in_cell = False
        turn, self.turn = self.turn, None
        if turn is not None:
            self.turn_done(turn.end(error, result), turn.pinned)

    def begin_turn(
        self, pinned: str | None, source: str, *, live: bool = True, start: str | None = None
    ) -> CellTurn:
        """Begin a turn for the cell being run (UserError: the cell should not run).

        ``pinned``: the cell's ``--session ID``; ``live``: draw the DAG as it grows (when
        the notebook's setting allows it); ``start``: the cell's ``--from NODE`` (the turn
        follows NODE's turn, and the notebook's next turns follow it: a branch there).
        """
        from openprogram_magics.sessions import notebook_title
        from openprogram_magics.turn import CellTurn

        if self.turn is not None:  # a turn whose cell end never came (nested run)
            self.turn.end(None)
            self.turn = None
        if start:  # --from NODE names a turn of this session: continued on purpose, so a
            current = self.current_meta()  # copy made to branch there is not forked
            if current is not None:
                self.vetted.add(current.session_id)
        meta, pinned_elsewhere = self.cell_session(pinned)
        if start:
            from openprogram.compare.sessions import branch_point

            meta = replace(meta, last_turn_id=branch_point(meta.session_id, start))
        turn = CellTurn(
            meta,
            source=source,
            execution_count=self.cell_count,
            runtime=self.runtime(),
            live=self.settings.live_dag and live,
            stream=self.settings.stream,
            title=notebook_title(self.user_ns()),
            pinned=pinned_elsewhere,
        )
        turn.begin()
        self.turn = turn
        return turn

    def turn_done(self, meta: NotebookMeta, pinned: bool) -> None:
        """A cell's turn is written: the notebook's next turn chains after it and the
        frontend records it -- unless the cell was pinned to another session."""
        if not pinned:
            self.set_session(meta)

    def set_session(self, meta: NotebookMeta, *, vetted: bool = True) -> None:
        """Continue ``meta``'s session from the next turn, and tell the frontend (with the
        provider chosen before the notebook had a session).  ``vetted``: chosen here (a
        turn, new/use), not only read from the notebook (which may be a copy)."""
        if vetted:
            self.vetted.add(meta.session_id)
        if self.chosen is not None:
            meta = replace(meta, provider=self.chosen[0], model=self.chosen[1])
        self.kernel_meta = meta
        if self.on_meta is not None:
            self.on_meta(meta)

    def bare_call_turn(self, label: str) -> AbstractContextManager[Any] | None:
        """What the engine's host registry asks for a call made outside any turn.

        In a cell (on the kernel's main thread) the call records into the notebook's
        session, as a turn of its own labelled with the cell, begun now and ended with
        the cell.  None elsewhere (another thread, between cells): the process's ad-hoc
        session, with the runtime :meth:`default_runtime` gives.
        """
        if not self.in_cell or threading.current_thread() is not threading.main_thread():
            return None
        if self.turn is None:
            self.begin_turn(None, self.raw_cell)  # the turn state is set right here
            return nullcontext()
        return self.turn.joined()

    def default_runtime(self) -> Runtime | None:
        """What the engine's host registry asks for a turn entered without a runtime (a
        ``session_context()`` in a plain cell, a call from a thread between cells): the
        notebook's runtime once a provider is chosen here, else None (the environment's)."""
        chosen_here = self.resolution().provider.layer in ("notebook", "config")
        return self.runtime() if chosen_here else None

    # -- the session -------------------------------------------------------------------
    def cell_session(self, pinned: str | None) -> tuple[NotebookMeta, bool]:
        """The session a cell's turn goes to (every cell mode), and whether the cell pins
        one other than the notebook's (``--session ID``: that cell only).  The notebook's
        own carries its provider and model."""
        meta, elsewhere = self.resolve(pinned)
        if elsewhere:
            return meta, True
        self.adopt_provider(meta)
        if self.chosen is not None:  # the notebook's choice goes into its metadata
            meta = replace(meta, provider=self.chosen[0], model=self.chosen[1])
        return meta, False

    def resolve(self, pinned: str | None) -> tuple[NotebookMeta, bool]:
        """The session (minted when none is known; each note said once) and whether it is
        a pinned one other than the notebook's."""
        from openprogram.store.session.files import mint_session_id
        from openprogram_magics.notebook import NotebookMeta
        from openprogram_magics.sessions import resolve_session

        res = resolve_session(pinned, self.kernel_meta, self.user_ns())
        elsewhere = res.source == "pinned" and (
            res.stored is None or res.stored.session_id != pinned
        )
        if elsewhere and pinned is not None:
            refuse_unknown(pinned)  # never created by a typo: `new --id` does it on purpose
        notes = [res.note]
        chosen_here = res.meta is not None and res.meta.session_id in self.vetted  # new, use
        if res.meta is not None and res.source != "pinned" and not chosen_here:
            from openprogram_magics.sharing import elsewhere_note

            notes.append(elsewhere_note(res.meta.session_id, res.meta.remote) or "")
        for note in notes:
            if note and note not in self.noted:
                self.noted.add(note)
                print(f"openprogram: {note}")
        if (
            res.meta is not None
            and res.source != "pinned"
            and res.meta.session_id not in self.vetted
        ):
            self.vetted.add(res.meta.session_id)  # asked once per kernel: is this a copy?
            forked = self.fork_if_copy(res.meta)
            if forked is not None:
                self.vetted.add(forked.session_id)
                return forked, elsewhere
        if res.meta is None:
            meta = NotebookMeta(mint_session_id("nb"))
            print(
                f"openprogram: new session {meta.session_id} (kept with this notebook, in its "
                "metadata and each turn's output, when JupyterLab, Notebook 7 or `openprogram "
                "run` saves it; `jupyter nbconvert --execute` starts a new one each run)"
            )
            return meta, elsewhere
        return res.meta, elsewhere

    def fork_if_copy(self, meta: NotebookMeta) -> NotebookMeta | None:
        """A new session for this notebook when it is a copy of another that still names
        ``meta``'s session (:mod:`openprogram_magics.copies`; said in one line); None when
        it is that notebook, a renamed one, or its place is not known."""
        from openprogram.agent.session_db import default_db
        from openprogram_magics.copies import fork_copy, original_of
        from openprogram_magics.sessions import notebook_title, place_of

        db = default_db()
        if not db.exists(meta.session_id):
            return None
        title = notebook_title(self.user_ns())
        original = original_of(meta.session_id, place_of(title), db.place(meta.session_id))
        if original is None:
            return None
        forked, note = fork_copy(meta, original, title)
        print(f"openprogram: {note}")
        return forked

    def current_meta(self) -> NotebookMeta | None:
        """The notebook's session (id, last turn, remote) the next turn would continue, if
        known without minting one."""
        try:
            from openprogram_magics.sessions import resolve_session

            return resolve_session(None, self.kernel_meta, self.user_ns()).meta
        except Exception:  # unusable metadata: the next cell says so
            return None

    # -- the provider and the runtime ------------------------------------------------------
    def adopt_provider(self, meta: NotebookMeta | None) -> None:
        """The provider and model go with the notebook: one its metadata names is the
        notebook's layer when none was chosen in this kernel (said once)."""
        if self.chosen is not None or meta is None or not meta.provider:
            return
        self.chosen = (meta.provider, meta.model)
        self.note(
            f"provider {meta.provider}"
            + (f" (model {meta.model})" if meta.model else "")
            + " from this notebook's metadata"
        )

    def note(self, text: str) -> None:
        if text not in self.noted:
            self.noted.add(text)
            print(f"openprogram: {text}")

    def choose_provider(self, name: str, model: str | None) -> None:
        """``%openprogram provider NAME [--model M]``: the notebook's layer (recorded in
        its metadata: name and model, never a key)."""
        self.chosen = (name, model)
        meta = self.current_meta()
        if meta is not None:
            self.set_session(meta, vetted=False)  # the notebook's, as read: maybe a copy

    def layers(self) -> list[Layer]:
        """The notebook's layer and ``%config``'s (:mod:`openprogram.providers.resolution`)."""
        from openprogram.providers.resolution import Layer

        if self.chosen is None:  # after a restart: the notebook says which it uses
            self.adopt_provider(self.kernel_meta or self.current_meta())
        notebook = Layer("notebook", *self.chosen) if self.chosen else Layer("notebook")
        s = self.settings
        return [notebook, Layer("config", s.provider or None, s.model or None)]

    def resolution(self) -> Resolved:
        """Provider, model and base URL, each with the layer it came from."""
        from openprogram.providers import resolve_settings

        return resolve_settings(layers=self.layers())

    def runtime_key(self) -> tuple[Any, ...]:
        """The settings the cached runtime was built from (a change rebuilds it)."""
        s = self.settings
        budget = (s.budget_tokens, s.budget_usd, s.budget_per)
        return (
            *self.layers(),
            *budget,
            s.requests_per_minute,
            s.request_timeout,
            self.replay_session,
        )

    def use_runtime(self, runtime: Runtime | None) -> None:
        """The cells' calls use ``runtime`` until a setting :meth:`runtime_key` reads
        changes (``%openprogram provider``, ``%config``); None: built from the settings."""
        self.cached_runtime = runtime
        self.cached_key = self.runtime_key() if runtime is not None else None

    def provider_named(self, name: str, model: str | None) -> str | Provider:
        """What ``create_runtime`` gets for the provider ``name``: the name, or for
        ``replay`` a provider built with the session it answers from (when chosen here)."""
        if name == "replay" and self.replay_session:
            from openprogram.providers import create_provider

            return create_provider("replay", model, session_id=self.replay_session)
        return name

    def runtime(self) -> Runtime:
        """The notebook's runtime: its provider and model, and its context policy (the
        ``history_*`` settings, which a function or a call can narrow)."""
        from openprogram.context.policy import ContextPolicy
        from openprogram.providers import create_runtime
        from openprogram.usage.budget import budget_from

        s = self.settings
        key = self.runtime_key()
        if self.cached_runtime is None or key != self.cached_key:
            settings = self.resolution()
            for text in settings.notes:
                self.note(text)
            name, model = settings.provider.value, settings.model.value
            replay = name == "replay" and self.replay_session
            self.cached_runtime = create_runtime(
                self.provider_named(name, model) if replay and name else None,
                required=False,
                layers=self.layers(),
                budget=budget_from(s.budget_tokens, s.budget_usd, s.budget_per),
                requests_per_minute=s.requests_per_minute or None,
                timeout=s.request_timeout or None,
            )
            self.cached_key = key
        self.cached_runtime.context = ContextPolicy(
            turns=s.history_turns, tokens=s.history_tokens, failed=s.history_failed
        )
        return self.cached_runtime


def refuse_unknown(session_id: str) -> None:
    """A cell's ``--session ID`` must name a session this machine has (as ``use``)."""
    from openprogram.agent.session_db import default_db
    from openprogram_magics.commands import CommandError, unknown_session
    from openprogram_magics.sessions import list_sessions

    if not default_db().exists(session_id):
        known = [str(m["id"]) for m in list_sessions()]
        line = unknown_session(session_id, known)
        raise CommandError(f"{line}, `%openprogram import FILE` brings one from a bundle")
