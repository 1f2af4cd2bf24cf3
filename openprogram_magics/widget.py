"""The live session-DAG widget (anywidget), with a static fallback in the same mime bundle.

Protocol (custom messages, JSON):

- kernel → browser ``{"type": "upsert", "nodes": [summary, ...], "removed": [id, ...]}``:
  only the summaries whose content or position changed (``removed`` only when non-empty).
- browser → kernel ``{"type": "select", "id"}``; kernel → browser
  ``{"type": "detail", "id", "detail": {...} | None, "error"?: str}``.
- browser → kernel ``{"type": "more", "id", "field"}``: the same detail reply, with that
  field up to 1 MB.
- browser → kernel ``{"type": "search", "q"}``: the summaries not sent yet (calls folded away
  in a large session) that the browser's filter would match, sent as an ``upsert``.
- browser → kernel ``{"type": "rows", "ids": [...]}``: rows drawn whose summary is ``light``
  (built from the session's index: no preview, duration, tokens or run); the kernel reads
  those nodes and sends their full summaries as an ``upsert``.
- browser → kernel ``{"type": "older"}`` (scrolled to the top of a view of the newest
  window); kernel → browser ``{"type": "older", "nodes": [summary, ...], "older": n}``: the
  view widened by the previous window (every summary whose row moved), ``n`` nodes still
  older.

A large session is drawn from its index (:func:`show_dag`): only its newest window (whole
index buckets holding at least :data:`WINDOW_TOPS` turn-level nodes, ``older`` counts the
rest), widened by :data:`OLDER_TOPS` turn-level nodes each time the browser scrolls to the
top; node files are read only for the rows a view shows (the last :data:`SHOWN_ROWS`
visible rows, rows the browser asks for, a clicked node).  Above
:data:`ALL_SUMMARIES_MAX` nodes, and in a window, the calls a fold hides are summarized
when they are unfolded, not up front.

Synced traits: ``summary`` (every node's summary, row order), ``head_id``, ``title``,
``folded`` (ids; the browser folds and unfolds locally and saves this trait), ``selected``,
``detail`` and ``older`` (nodes of the session older than the view holds).  During live
updates the ``summary`` trait is *not* re-synced per node — that would re-send the whole
graph each time; :meth:`DagWidget.upsert` sends the diff as
a message and marks the trait stale, and :meth:`DagWidget.flush` (called automatically
after the running cell, through IPython's ``post_execute`` event) syncs it once, so views
opened later start from the current graph.  ``flush`` also refreshes the static fallback
of displays made with :meth:`DagWidget.display`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import count
from operator import itemgetter
from typing import Any

import anywidget
import traitlets

from openprogram.view.bulk import paused_gc
from openprogram.view.layout import (
    KNOWN_KINDS,
    KNOWN_STATUSES,
    compute_layout,
    node_kind,
    node_status,
)
from openprogram.view.page import dag_css, dag_module_source
from openprogram.view.placed import Layout, Placed
from openprogram.view.saved import DAG_MIME, SESSION_BUDGET, mime_value, saved_view
from openprogram.view.static import render_static_html, render_text_tree
from openprogram.view.summary import (
    DETAIL_FIELDS,
    content_summary,
    index_summary,
    node_detail,
    position_summary,
)

SHOWN_ROWS = 300  # the static drawing's and text tree's rows: read whole up front
ALL_SUMMARIES_MAX = 5_000  # up to this many nodes, even folded-away ones are summarized
ROWS_PER_REQUEST = 200  # light rows the browser may ask for at once
SEARCH_SENT_MAX = 1_000  # summaries a search sends at most
EAGER_MAX = 5_000  # show_dag reads every node of a session up to this size
WINDOW_TOPS = SHOWN_ROWS  # a larger session's view starts with this many turn-level nodes
OLDER_TOPS = SHOWN_ROWS  # and widens by this many each time the browser asks for older rows

Loader = Callable[[list[str]], Mapping[str, Mapping[str, Any]]]  # ids -> the readable ones
# turn-level nodes wanted -> (the newest light nodes holding them, how many nodes are older)
Pager = Callable[[int], tuple[list[dict[str, Any]], int]]

__all__ = ["DagWidget", "SavedDag", "show_dag"]


class DagWidget(anywidget.AnyWidget):  # type: ignore[misc]
    """The session DAG, drawn live; click a node for its detail, fold a subtree, search."""

    _esm = dag_module_source()  # dag.js with style.json inlined
    # text, not a path: anywidget ties every instance to a path's change signal, for good
    # (a kernel kept every DAG widget it ever made, closed or not)
    _css = dag_css()

    summary: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    head_id = traitlets.Unicode(None, allow_none=True).tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    folded = traitlets.List(traitlets.Unicode()).tag(sync=True)
    selected = traitlets.Unicode(None, allow_none=True).tag(sync=True)
    detail = traitlets.Dict(default_value=None, allow_none=True).tag(sync=True)
    older = traitlets.Int(0).tag(sync=True)

    def __init__(
        self,
        nodes: Iterable[Mapping[str, Any]] = (),
        head_id: str | None = None,
        title: str = "",
        last_turns: int | None = None,
        session_id: str | None = None,
        *,
        load: Loader | None = None,
        pager: Pager | None = None,
        tops: int = 0,
        **kwargs: Any,
    ) -> None:
        """``load`` (ids → the full dicts of the readable ones) makes ``nodes`` *light* ones
        (``Session.light_nodes()``): read whole only when a view shows them.  ``pager``
        (with ``load``) says ``nodes`` are the newest window of a session
        (``Session.light_window(tops)``, ``older`` nodes before it): :meth:`load_older`
        widens it."""
        self._lock = threading.RLock()
        self._widening = False  # load_older sets the folds of the rows it adds
        self._batch = False  # inside upsert_many: head_id changes do not re-lay out alone
        self._flush_hooked = False
        layout = self._start(nodes, head_id, last_turns, session_id, load, pager, tops)
        super().__init__(
            summary=list(self._current.values()),
            head_id=head_id,
            title=title,
            folded=sorted(layout.folded),
            **kwargs,
        )
        self.on_msg(self._on_custom_msg)
        self.observe(self._on_head, names="head_id")
        self.observe(self._on_folded, names="folded")

    def restart(
        self,
        nodes: Iterable[Mapping[str, Any]] = (),
        head_id: str | None = None,
        title: str = "",
        last_turns: int | None = None,
        session_id: str | None = None,
    ) -> None:
        """Show another graph, as a new widget with these arguments would: how a kernel
        reuses a widget no output shows any more (:mod:`openprogram_magics.live_views`)
        instead of making one per cell (each AnyWidget is a class of its own, and the
        cyclic collector is all that frees one)."""
        with self._lock, self.hold_sync():
            layout = self._start(nodes, head_id, last_turns, session_id, None, None, 0)
            self._batch = self._widening = True  # the graph is laid out already
            try:
                self.head_id = head_id
                self.folded = sorted(layout.folded)
            finally:
                self._batch = self._widening = False
            self.title = title
            self.summary = list(self._current.values())
            self.selected = None
            self.set_trait("detail", None)  # (typed as a dict; None is allowed)
            self.older = 0

    def _start(
        self,
        nodes: Iterable[Mapping[str, Any]],
        head_id: str | None,
        last_turns: int | None,
        session_id: str | None,
        load: Loader | None,
        pager: Pager | None,
        tops: int,
    ) -> Layout:
        """Take the graph to show (what the traits are then set from)."""
        self.session_id = session_id  # where a detail rebuilds an llm node's whole prompt
        self._pager, self._tops = pager, tops
        self._nodes: list[Mapping[str, Any]] = list(nodes)
        self._load = load
        if load is None:
            self._where = {
                n.get("id"): i for i, n in enumerate(self._nodes) if isinstance(n, Mapping)
            }
            self._light: set[str] = set()
        else:  # index entries (dicts with an id each): C loops, 100,000 of them
            self._where = dict(zip(map(itemgetter("id"), self._nodes), count(), strict=False))
            self._light = set(self._where)
        self._content: dict[str, dict[str, Any]] = {}
        self._dirty = False  # the summary trait lags the graph (see flush)
        self._handles: list[Any] = []
        layout = compute_layout(self._nodes, head_id, last_turns=last_turns)
        self._layout = layout
        if self._light:
            self._read(layout.visible_ids(max(layout.rows - SHOWN_ROWS, 0)))
        self._current = self._summaries(layout, {})
        return layout

    # -- live updates -------------------------------------------------------------------

    def upsert(self, node: Mapping[str, Any], *, head_id: str | None = None) -> list[dict]:
        """Add or replace one node (and move HEAD); send the browser what changed."""
        return self.upsert_many([node], head_id=head_id)

    def upsert_many(
        self, nodes: Iterable[Mapping[str, Any]], *, head_id: str | None = None
    ) -> list[dict]:
        """Add or replace nodes in one re-layout; returns the summaries that were sent."""
        with self._lock:
            nodes = list(nodes)
            if head_id is None or head_id == self.head_id:
                in_place = self._update_in_place(nodes)
                if in_place is not None:
                    return in_place
            for node in nodes:
                nid = node.get("id")
                if nid in self._where:
                    self._nodes[self._where[nid]] = node
                else:
                    self._where[nid] = len(self._nodes)
                    self._nodes.append(node)
                if isinstance(nid, str):
                    self._content.pop(nid, None)
                    self._light.discard(nid)
            if head_id is not None:
                self._batch = True
                try:
                    self.head_id = head_id
                finally:
                    self._batch = False
            return self._refresh(send=True)

    def flush(self) -> None:
        """Sync the ``summary`` trait once and refresh the static fallback of displays."""
        with self._lock:
            changed = self._sync_summary()
            handles = list(self._handles)
        if changed:
            for handle in handles:
                handle.update(self)

    def display(self) -> None:
        """Display the widget; later :meth:`flush` calls also refresh its static HTML/text."""
        from IPython.display import display

        handle = display(self, display_id=True)
        if handle is not None:
            self._handles.append(handle)

    # -- details --------------------------------------------------------------------------

    def select(self, node_id: str) -> dict[str, Any] | None:
        """Select a node and send its detail to the browser (what a click does)."""
        self.selected = node_id
        return self._reply_detail(node_id, None)

    def show_more(self, node_id: str, field: str) -> dict[str, Any] | None:
        """Send ``field`` of a node's detail up to 1 MB (the "show more" button)."""
        return self._reply_detail(node_id, field)

    def node(self, node_id: str) -> Mapping[str, Any] | None:
        """The node dict shown for ``node_id`` (read whole if the view had it light)."""
        with self._lock:
            if node_id in self._light:
                self._read([node_id])
            return self._layout.source.get(node_id)

    def show_rows(self, ids: Iterable[str]) -> list[dict]:
        """Read the light nodes among ``ids`` whole and send their full summaries (what the
        browser asks for the rows it draws); returns the summaries sent."""
        with self._lock:
            wanted = [nid for nid in ids if isinstance(nid, str) and nid in self._light]
            self._read(wanted[:ROWS_PER_REQUEST])
            changed = []
            for nid in wanted[:ROWS_PER_REQUEST]:
                place = self._layout.placed.get(nid)
                if place is None or nid not in self._current:
                    continue
                summary = self._summary(place)
                if summary != self._current[nid]:
                    self._current[nid] = summary
                    changed.append(summary)
            if changed:
                self._dirty = True
                self._schedule_flush()
                self.send({"type": "upsert", "nodes": changed})
            return changed

    def search(self, query: str) -> list[dict]:
        """Send the summaries not sent yet whose name, kind, status, preview or id contain
        ``query`` (case-insensitive, as the browser filters); returns them."""
        q = query.strip().lower()
        if not q:
            return []
        with self._lock:
            layout, sent = self._layout, self._current
            found: list[dict[str, Any]] = []
            for p in layout.placed.values():
                if p.id in sent:
                    continue
                content = self._content.get(p.id)
                name = layout.source[p.id].get("name") if content is None else content["name"]
                preview = content.get("preview", "") if content is not None else ""
                if q in f"{name} {p.kind} {p.status} {preview} {p.id}".lower():
                    sent[p.id] = summary = self._summary(p)
                    found.append(summary)
                    if len(found) >= SEARCH_SENT_MAX:
                        break
            if found:
                self._dirty = True
                self._schedule_flush()
                self.send({"type": "upsert", "nodes": found})
            return found

    def load_older(self) -> list[dict]:
        """Widen a view of the newest window by the previous :data:`OLDER_TOPS` turn-level
        nodes (what scrolling to the top asks): those come folded, as the older turns of
        the first window; sends every summary that changed (rows move down) and the count
        of nodes still older; returns those summaries.  Node files are not read."""
        with self._lock, paused_gc():
            if self._pager is None or not self.older:
                self.send({"type": "older", "nodes": [], "older": self.older})
                return []
            self._tops += OLDER_TOPS
            window, older = self._pager(self._tops)
            where, light = self._where, self._light
            added = [n for n in window if n["id"] not in where]
            # the window's rows in seq order (the one-pass layout's input): nodes read whole
            # stay whole, light ones take the new entry (a predecessor cut at the old edge
            # is known now); a node the index does not list (yet) keeps its place last
            listed = {n["id"] for n in window}
            nodes = [
                n if n["id"] not in where or n["id"] in light else self._nodes[where[n["id"]]]
                for n in window
            ]
            nodes += [n for n in self._nodes if n.get("id") not in listed]
            self._nodes = nodes
            self._where = dict(zip(map(itemgetter("id"), nodes), count(), strict=False))
            self._light = light | {n["id"] for n in added}
            folds = set(self.folded) | {n["id"] for n in added if n.get("caller") is None}
            layout = self._layout = compute_layout(nodes, self.head_id, folded=folds)
            self._widening = True
            try:
                self.folded = sorted(f for f in layout.folded if f in layout.placed)
            finally:
                self._widening = False
            old = self._current
            self._current = self._summaries(layout, old)
            changed = [s for nid, s in self._current.items() if old.get(nid) != s]
            self.older = older
            self._dirty = True
            self._schedule_flush()
            self.send({"type": "older", "nodes": changed, "older": older})
            return changed

    # -- static fallback ------------------------------------------------------------------

    def to_html(self) -> str:
        return render_static_html(
            (), self.head_id, title=self.title, layout=self._layout, older=self.older
        )

    def to_text(self) -> str:
        return render_text_tree((), self.head_id, layout=self._layout, older=self.older)

    def to_saved(self, budget: int = SESSION_BUDGET) -> dict[str, Any]:
        """The :data:`DAG_MIME` payload: what the extension draws once the kernel is gone."""
        with self._lock:
            return saved_view(
                self._layout,
                title=self.title,
                budget=budget,
                summaries=list(self._current.values()),
                widget=self.model_id,
                light=self._light,
                older=self.older,
            )

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict] | None:
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
        with self._lock, paused_gc():
            self._sync_summary()
            data = {
                **data,
                "text/plain": self.to_text(),
                "text/html": self.to_html(),
                DAG_MIME: mime_value(self.to_saved()),
            }
        return data, meta

    # -- internals ------------------------------------------------------------------------

    def _summaries(self, layout: Layout, shown: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """Summaries of the visible nodes and of those in ``shown`` (sent before); of every
        node while the graph has at most :data:`ALL_SUMMARIES_MAX` and is not a window."""
        if self._pager is None and len(layout.placed) <= ALL_SUMMARIES_MAX:
            return {p.id: self._summary(p) for p in layout.placed.values()}
        places = layout.visible()
        if shown:
            places += [layout.placed[n] for n in shown if n in layout.placed]
            places = sorted({p.id: p for p in places}.values(), key=lambda p: p.order)
        return {p.id: self._summary(p) for p in places}

    def _summary(self, place: Placed) -> dict[str, Any]:
        content = self._content.get(place.id)
        if content is None:
            node = self._layout.source[place.id]
            if place.id in self._light:  # from the index: the browser may ask for the rest
                content = {**index_summary(node), "light": True}
            else:
                content = content_summary(node)
            self._content[place.id] = content
        return {**position_summary(place), **content}

    def _read(self, ids: Iterable[str]) -> None:
        """Replace light nodes by the whole ones (``load``); unreadable ones stay light."""
        wanted = [nid for nid in ids if nid in self._light]
        if self._load is None or not wanted:
            return
        layout = self._layout
        for nid, node in self._load(wanted).items():
            if nid not in self._light:
                continue
            self._light.discard(nid)
            self._content.pop(nid, None)
            self._nodes[self._where[nid]] = node
            layout.source[nid] = node
            place = layout.placed.get(nid)
            if place is not None and not place.flags:
                place.kind, place.status = node_kind(node), node_status(node)

    def _refresh(self, *, send: bool) -> list[dict]:
        """Re-lay out; send the summaries that changed (when ``send``); mark the trait stale."""
        with self._lock, paused_gc():
            self._layout = compute_layout(self._nodes, self.head_id, folded=self.folded)
            old = self._current
            new = self._summaries(self._layout, old)
            changed = [s for nid, s in new.items() if old.get(nid) != s]
            removed = [nid for nid in old if nid not in new]
            self._current = new
            if not (changed or removed):
                return []
            self._dirty = True
            self._schedule_flush()
            if not send:
                # the browser re-flows rows itself; it only lacks nodes it never had
                changed = [s for s in changed if s["id"] not in old]
                if changed:
                    self.send({"type": "upsert", "nodes": changed})
                return []
            msg: dict[str, Any] = {"type": "upsert", "nodes": changed}
            if removed:
                msg["removed"] = removed
            self.send(msg)
            return changed

    def _update_in_place(self, nodes: list[Mapping[str, Any]]) -> list[dict] | None:
        """Replace nodes whose place cannot move, without a re-layout; None if any could.

        A live update is mostly a node ending (status, output, duration): the same id,
        ``seq``, ``caller`` and ``predecessor`` keep the node's row, lane and column, so only
        its summary is redone — not the whole layout (~50 ms at 5,000 nodes).  Nodes with
        layout flags, or that would get some (unknown kind or status), take the slow path.
        """
        layout = self._layout
        for node in nodes:
            nid = node.get("id")
            if not isinstance(nid, str):
                return None
            place = layout.placed.get(nid)
            old = layout.source.get(nid)
            meta = node.get("metadata")
            if (
                old is None
                or place is None
                or place.flags
                or nid not in self._where
                or type(node.get("seq")) is not int
                or any(node.get(k) != old.get(k) for k in ("seq", "caller", "predecessor"))
                or not (meta is None or isinstance(meta, Mapping))
                or node_kind(node) not in KNOWN_KINDS
                or node_status(node) not in KNOWN_STATUSES
            ):
                return None
        changed: dict[str, dict[str, Any]] = {}
        for node in nodes:
            nid = node["id"]
            self._nodes[self._where[nid]] = node
            self._light.discard(nid)
            layout.source[nid] = node
            place = layout.placed[nid]
            place.kind, place.status = node_kind(node), node_status(node)
            content = self._content[nid] = content_summary(node)
            lazy = self._pager is not None or len(layout.placed) > ALL_SUMMARIES_MAX
            if nid not in self._current and place.hidden and lazy:
                continue  # folded away and never sent: sent when unfolded
            summary = {**position_summary(place), **content}
            if self._current.get(nid) != summary:
                self._current[nid] = changed[nid] = summary
        if changed:
            self._dirty = True
            self._schedule_flush()
            self.send({"type": "upsert", "nodes": list(changed.values())})
        return list(changed.values())

    def _sync_summary(self) -> bool:
        if not self._dirty:
            return False
        self._dirty = False
        self.summary = list(self._current.values())
        return True

    def _schedule_flush(self) -> None:
        if self._flush_hooked:
            return
        try:
            from IPython import get_ipython
        except ImportError:  # pragma: no cover - IPython ships with ipywidgets
            return
        shell = get_ipython()
        if shell is None:
            return  # not in a kernel: callers flush() themselves
        shell.events.register("post_execute", self._after_cell)
        self._flush_hooked = True

    def _after_cell(self) -> None:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            shell.events.unregister("post_execute", self._after_cell)
        self._flush_hooked = False
        self.flush()

    def _on_head(self, change: Mapping[str, Any]) -> None:
        if not self._batch:
            self._refresh(send=True)

    def _on_folded(self, change: Mapping[str, Any]) -> None:
        # The browser re-flows rows itself when folding; only keep our copy in step.
        if not self._widening:
            self._refresh(send=False)

    def _on_custom_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "rows":
            self._on_rows(content)
            return
        if isinstance(content, dict) and content.get("type") == "search":
            self.search(str(content.get("q", "")))
            return
        if isinstance(content, dict) and content.get("type") == "older":
            self.load_older()
            return
        if not isinstance(content, dict) or not isinstance(content.get("id"), str):
            return
        if content.get("type") == "select":
            self.select(content["id"])
        elif content.get("type") == "more":
            self.show_more(content["id"], str(content.get("field")))

    def _on_rows(self, content: Mapping[str, Any]) -> None:
        ids = content.get("ids")
        if isinstance(ids, list):
            self.show_rows(ids)

    def _reply_detail(self, node_id: str, field: str | None) -> dict[str, Any] | None:
        node = self.node(node_id)
        if node_id in self._light:
            node = None  # listed in the index, but its file could not be read
        if node is None or (field is not None and field not in DETAIL_FIELDS):
            error = f"no node {node_id!r} here" if node is None else f"no field {field!r}"
            if node_id in self._light:
                error = f"node {node_id!r} could not be read (see `openprogram sessions show`)"
            self.send({"type": "detail", "id": node_id, "detail": None, "error": error})
            return None
        detail = node_detail(self._with_prompt(node), full_field=field)
        from openprogram.compare.labels import turn_labels

        with self._lock:  # `5@alice` when two people made a turn 5 (the nodes read whole)
            label = turn_labels(list(self._layout.source.values())).get(node_id)
        if label is not None:
            detail["turn"] = label
        self.send({"type": "detail", "id": node_id, "detail": detail})
        self.detail = detail
        return detail

    def _with_prompt(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        """An ``llm`` node stores its own messages and names the earlier turns it was given;
        the detail shows the whole prompt, rebuilt from the session."""
        meta = node.get("metadata")
        if self.session_id is None or not isinstance(meta, Mapping) or "context" not in meta:
            return node
        try:
            from openprogram.agent.session_db import default_db
            from openprogram.agentic_programming.prompt import sent_messages
            from openprogram.context.nodes import Call

            session = default_db().open(self.session_id)
            messages = sent_messages(session, Call.from_dict(dict(node)))
        except Exception:  # a detail never fails over a prompt it cannot rebuild
            return node
        return {**node, "metadata": {**meta, "messages": messages}}


def show_dag(
    session_id: str | None = None,
    *,
    nodes: Sequence[Mapping[str, Any]] | None = None,
    head_id: str | None = None,
    last_turns: int | None = 50,
    title: str | None = None,
    eager_max: int = EAGER_MAX,
) -> DagWidget:
    """A :class:`DagWidget` of a stored session (by id) or of the given ``nodes``.

    Only the last ``last_turns`` turns start unfolded (``None`` unfolds everything).  A
    session of more than ``eager_max`` nodes is drawn from its index, its newest window
    first (:data:`WINDOW_TOPS` turn-level nodes, or ``last_turns`` if more; older rows on
    scroll): node files are read only for the rows shown (see :class:`DagWidget`'s
    ``load`` and ``pager``).
    """
    load: Loader | None = None
    pager: Pager | None = None
    tops = older = 0
    with paused_gc():
        if nodes is None:
            if session_id is None:
                raise ValueError(
                    "show_dag() needs a session id, or the nodes to draw (nodes=[...])"
                )
            from openprogram.agent.session_db import default_db

            session = default_db().open(session_id)
            head_id = session.head_id if head_id is None else head_id
            named = session.meta.get("title")
            if title is None and named and named != session_id:
                title = f"{session_id} · {named}"
            if session.totals()["nodes"] > eager_max:  # from the index: no node read
                tops = max(WINDOW_TOPS, last_turns or 0)
                nodes, older = session.light_window(tops)
                load, pager = _loader(session), session.light_window
            else:
                nodes = [c.to_dict() for c in session.nodes()]
        return DagWidget(
            nodes,
            head_id=head_id,
            title=title if title is not None else session_id or "",
            last_turns=last_turns,
            session_id=session_id,
            load=load,
            pager=pager,
            tops=tops,
            older=older,
        )


def _loader(session: Any) -> Loader:
    def load(node_ids: list[str]) -> dict[str, Mapping[str, Any]]:
        # the unreadable ones are left out (listed in session.problems); those left out
        # of the working tree come from git in one batch
        return {nid: call.to_dict() for nid, call in session.get_many(node_ids).items()}

    return load


class SavedDag:
    """Displays a :class:`DagWidget` without its widget view (what ``%openprogram dag`` shows).

    The bundle is the DAG data, static HTML and text: the extension draws the data and
    switches to the live widget (found by the model id in the data) while this kernel
    has it; no saved widget view can say "model not found" later, and nbconvert draws the
    static DAG even when widget state was saved.  Keeps the widget alive.
    """

    def __init__(self, widget: DagWidget) -> None:
        self.widget = widget

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict] | None:
        bundle = self.widget._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, meta = bundle
        keep = {k: v for k, v in data.items() if not k.startswith("application/vnd.jupyter.widget")}
        return keep, meta
