"""``replay``: answer every LLM call from the llm nodes recorded in a session (no key).

A call is identified by what identifies it in the notebook, not by the history before it:

* **the cell** — a hash of the turn's source text (the ``%%openprogram`` cell as written,
  trailing blanks ignored).  The source is what stays the same when cells are inserted
  before or after it; the cell's index and ``In [n]`` change, and the turn node records the
  source but no cell id (a notebook copied or rebuilt by a tool gets new ids).  An edited
  cell is a new cell; outside a notebook cell (a plain ``session_context``) it is empty;
* **the function** the call is made in (``<turn>`` at a cell's top level);
* **its own prompt** — what the call itself renders: the docstring, the frame's earlier
  steps and the content, *without* the earlier turns of the session (a cell inserted
  before changes those, not the call);
* **its place** — the n-th LLM call of that function in the cell.

Cell, function, own prompt and the request's settings (tools, ``tool_choice``, response
format, ``max_tokens``, temperature…: :mod:`openprogram.providers.replay_match`) select the
recordings; among them the one at the same place whose whole prompt (with its history) is
the same is preferred, then the same place, then the same whole prompt, then the earliest;
each recording answers once.  A recording made streamed answers a call that is not, and
the other way round; a recording older than the settings' record matches on its prompt.
A call whose cell has no recording for it (an edited cell) is answered by the same call
recorded in another cell, if there is one.  A call with no recorded answer raises
:class:`ReplayMiss`, naming the cell and the function and the nearest recording (its turn,
cell and call: same cell and function first, then the same function; the same own prompt
first, then the nearest), the first field where it differs (``temperature: recorded 0.2,
now 0.7``) and a diff of the two prompts; with a ``fallback`` provider (``openprogram run
--replay --record-misses``) the miss is answered live instead, and recorded as usual.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openprogram.agentic_programming.prompt import sent_messages
from openprogram.agentic_programming.request_fields import request_settings
from openprogram.compare.diffs import diff_lines
from openprogram.compare.diffs import prompt_text as prompt_text  # one rendering of a prompt
from openprogram.compare.stale import Cell as Cell
from openprogram.compare.stale import cell_of as cell_of
from openprogram.compare.stale import recorded_cells, stale_reasons, top_of
from openprogram.compare.stale import text_hash as text_hash
from openprogram.context.secrets import redact_secrets
from openprogram.errors import ReplayMiss
from openprogram.providers.base import LLMRequest, LLMResponse, Provider
from openprogram.providers.replay_match import first_difference, replayed_response, settings_match
from openprogram.store.session.store import default_db
from openprogram.store.vars import get_call_id, get_store, get_turn_id

Key = tuple[str, str, str]  # (cell hash, function, own prompt hash)
TURN_FRAME = "<turn>"


def own_messages(request: LLMRequest) -> list[Any]:
    """The request's messages without the session's earlier turns (``request.history``)."""
    span = request.history
    if span is None:
        return list(request.messages)
    start, end = span
    return [*request.messages[:start], *request.messages[end:]]


@dataclass
class Recorded:
    node_id: str
    cell: Cell
    function: str
    place: int  # the n-th LLM call of ``function`` in the cell
    own: str  # the call's own prompt (docstring, earlier steps, content)
    prompt: str  # the whole prompt it was sent (with the earlier turns)
    reply: str
    turn: int = 0
    messages: list[Any] = field(default_factory=list)  # the own prompt's messages
    settings: dict[str, Any] | None = None  # None: recorded before settings were kept
    tool_calls: list[Any] = field(default_factory=list)
    finish_reason: str | None = None
    shown: str = ""  # how a miss names it, when not by turn, cell and call


def frame_name(node: Any) -> str:
    """The function a call made in frame ``node`` is made in (``<turn>``: a cell's own)."""
    if node is None or node.kind in ("turn", "root"):
        return TURN_FRAME
    return str(node.name)


def recorded_calls(nodes: list[Any], messages_of: Callable[[Any], Any]) -> list[Recorded]:
    """The answered llm nodes of a session (``nodes`` in seq order), each with its key parts
    (``messages_of(node)``: the whole prompt it was sent).  Rejected attempts (a
    ``choices`` reply that was not a choice) are answers too."""
    by_id = {node.id: node for node in nodes}
    places: dict[tuple[str, str], int] = {}
    cells: dict[str, Cell] = {}
    out: list[Recorded] = []
    for node in nodes:
        if node.kind != "llm":
            continue
        frame = by_id.get(node.caller) if node.caller is not None else None
        function = frame_name(frame) if node.caller is None or frame else "<unknown>"
        top = top_of(node.caller, by_id.get)
        if top is None:
            cell = cell_of(None)
        else:
            cell = cells.get(top.id) or cells.setdefault(top.id, cell_of(top))
        group = (top.id if top is not None else f"turn {node.turn}", function)
        place = places.get(group, 0)
        places[group] = place + 1
        answered = node.status == "completed" or node.metadata.get("rejected")
        if not answered or node.output is None:
            continue
        meta = node.metadata
        messages = meta.get("messages") if isinstance(meta.get("messages"), list) else []
        settings = meta.get("request") if isinstance(meta.get("request"), dict) else None
        out.append(
            Recorded(
                node.id,
                cell,
                function,
                place,
                prompt_text(messages),
                prompt_text(messages_of(node)),
                str(node.output),
                turn=int(node.turn or 0),
                messages=messages,
                settings=settings,
                tool_calls=list(meta.get("tool_calls") or []),
                finish_reason=None if meta.get("rejected") else meta.get("finish_reason"),
            )
        )
    return out


def closest(prompt: str, candidates: list[Recorded], part: str = "own") -> Recorded | None:
    """The candidate whose ``part`` (``own`` or ``prompt``) is nearest to ``prompt``."""
    best, score = None, -1.0
    for rec in candidates:
        matcher = difflib.SequenceMatcher(None, getattr(rec, part), prompt, autojunk=False)
        if matcher.real_quick_ratio() <= score or matcher.quick_ratio() <= score:
            continue
        ratio = matcher.ratio()
        if ratio > score:
            best, score = rec, ratio
    return best


def prompt_diff(recorded: str, now: str) -> str:
    """The two prompts' diff, as ``sessions diff`` shows one (``-`` recorded, ``+`` now)."""
    return "\n".join(diff_lines(recorded, now))


class ReplayProvider:
    name = "replay"

    def __init__(
        self,
        session_id: str,
        *,
        db: Any = None,
        fallback: Provider | None = None,
        live_stale: bool = False,
    ) -> None:
        session = (db or default_db()).open(session_id)
        self.session_id = session_id
        self.model = "replay"
        self.fallback = fallback
        # `openprogram run --only-stale`: every call of a stale cell goes to ``fallback``
        self.live_stale = live_stale and fallback is not None
        self._stale_turns: dict[str, bool] = {}
        self._recorded = recorded_cells(session.nodes()) if self.live_stale else {}

        def messages_of(node: Any) -> Any:
            return sent_messages(session, node)

        self._calls = recorded_calls(session.nodes(), messages_of)
        self._unused: dict[Key, list[Recorded]] = {}
        self._anywhere: dict[tuple[str, str], list[Recorded]] = {}
        for rec in self._calls:
            own = text_hash(rec.own)
            self._unused.setdefault((rec.cell.hash, rec.function, own), []).append(rec)
            self._anywhere.setdefault((rec.function, own), []).append(rec)
        self._places: dict[tuple[str, str], int] = {}

    def complete(
        self, request: LLMRequest, on_delta: Callable[[str], None] | None = None
    ) -> LLMResponse:
        writer = get_store()
        session = writer.session if writer is not None else None
        frame = get_call_id()
        frame_node = _get(session, frame) if frame is not None else None
        function = frame_name(frame_node) if frame is None or frame_node else "<unknown>"
        top = top_of(frame, lambda node_id: _get(session, node_id))
        cell = cell_of(top)
        group = (top.id if top is not None else f"turn {get_turn_id()}", function)
        place = self._places.get(group, 0)
        self._places[group] = place + 1
        mine = own_messages(request)
        now = Asked(
            redact_secrets(prompt_text(mine)),
            redact_secrets(prompt_text(request.messages)),
            mine,
            request_settings(request),
        )
        if self.live_stale and self.fallback is not None and self._is_stale(cell, frame, session):
            return self.fallback.complete(request, on_delta)
        found = self._take(cell, function, place, now)
        if found is not None:
            return replayed_response(found.reply, found.tool_calls, found.finish_reason, on_delta)
        if self.fallback is not None:
            return self.fallback.complete(request, on_delta)
        raise ReplayMiss(self._miss(cell, function, place, now))

    def _is_stale(self, cell: Cell, frame: str | None, session: Any) -> bool:
        """Whether the cell a call is made in is stale (:func:`stale_reasons`: no recording
        of its text, a function in the call's chain whose docstring or code differ from
        every recording of it in that cell, or another provider or model than the cell
        recorded).  Once stale, every later call of that turn is too."""
        key = cell.turn or ""
        if self._stale_turns.get(key):
            return True
        chain: list[tuple[str, Any, Any]] = []
        node_id = frame
        seen: set[str] = set()
        while node_id is not None and node_id not in seen:
            seen.add(node_id)
            node = _get(session, node_id)
            if node is None:
                break
            if node.kind == "function":
                meta = node.metadata
                chain.append((node.name, meta.get("doc_hash"), meta.get("source_hash")))
            node_id = node.caller
        model = None
        if self.fallback is not None:
            model = (self.fallback.name, getattr(self.fallback, "model", None))
        stale = bool(stale_reasons(self._recorded.get(cell.hash), chain, model))
        self._stale_turns[key] = stale
        return stale

    def _take(self, cell: Cell, function: str, place: int, now: Asked) -> Recorded | None:
        """The recording that answers this call (used up, when it is of this cell)."""
        own_hash, prompt = text_hash(now.own), now.prompt
        fits = [
            r
            for r in self._unused.get((cell.hash, function, own_hash), [])
            if settings_match(r.settings, now.settings)
        ]
        if fits:
            queue = self._unused[(cell.hash, function, own_hash)]
            pick = _first(fits, lambda r: r.place == place and r.prompt == prompt)
            pick = pick or _first(fits, lambda r: r.place == place)
            pick = pick or _first(fits, lambda r: r.prompt == prompt) or fits[0]
            queue.remove(pick)
            return pick
        # an edited cell: the same call recorded in another cell answers, and stays there
        calls = self._anywhere.get((function, own_hash), [])
        elsewhere = [
            r
            for r in calls
            if r.cell.hash != cell.hash and settings_match(r.settings, now.settings)
        ]
        return _first(elsewhere, lambda r: r.prompt == prompt) or (
            elsewhere[0] if elsewhere else None
        )

    def _miss(self, cell: Cell, function: str, place: int, now: Asked) -> str:
        where = f"{cell.label}, LLM call {place + 1} of function {function}"
        how = (
            "(run with a real provider, or `openprogram run --replay --record-misses`, "
            "to record one)"
        )
        head = f"replay: session {self.session_id} has no recorded answer for {where}"
        if not self._calls:
            return f"{head}: it records no LLM calls; run with a real provider to record one"
        same_cell = [r for r in self._calls if r.cell.hash == cell.hash and r.function == function]
        pool = same_cell or [r for r in self._calls if r.function == function] or self._calls
        return f"{head}; {miss_detail(pool, now)}\n{how}"


@dataclass(frozen=True)
class Asked:
    """A request as replay compares it: its own prompt and whole prompt as (redacted) text,
    its own messages and its settings."""

    own: str
    prompt: str
    messages: list[Any]
    settings: dict[str, Any]


def nearest(pool: list[Recorded], now: Asked) -> Recorded:
    """The recording of ``pool`` (not empty) nearest to the request: the same own prompt
    and settings, then the same own prompt, then the nearest own prompt."""
    same = [r for r in pool if r.own == now.own]
    alike = [r for r in same if settings_match(r.settings, now.settings)]
    if alike:
        return closest(now.prompt, alike, "prompt") or alike[0]
    if same:
        return same[0]
    found = closest(now.own, pool)
    assert found is not None
    return found


def miss_detail(pool: list[Recorded], now: Asked) -> str:
    """What a miss says of the nearest recording in ``pool``: which it is (turn, cell,
    call, node), the first field where it differs and the prompts' diff."""
    near = nearest(pool, now)
    named = f"the nearest recording is {_named(near)}"
    differs = first_difference(near.messages, near.settings, now.messages, now.settings)
    if near.own == now.own and differs is None:  # the same request, made more often now
        detail = f"{named}: the same request, but its answers are used up"
        if near.prompt != now.prompt:
            detail += "; the earlier turns it was sent differ:\n" + prompt_diff(
                near.prompt, now.prompt
            )
        return detail
    if differs is None:  # equal as JSON, unequal as text: the texts say where
        return f"{named}; its prompt differs:\n" + prompt_diff(near.own, now.own)
    detail = f"{named}; first difference: {differs.line()}"
    if near.settings is None:
        detail += " (recorded before request settings were kept: only its prompt is compared)"
    if near.own != now.own:
        detail += "\n" + prompt_diff(near.own, now.own)
    return detail


def _named(rec: Recorded) -> str:
    if rec.shown:
        return rec.shown
    turn = f"turn {rec.turn}, " if rec.turn else ""
    return (
        f"{turn}{rec.cell.label}, call {rec.place + 1} of function {rec.function} "
        f"(node {rec.node_id})"
    )


def _first(items: list[Recorded], test: Callable[[Recorded], bool]) -> Recorded | None:
    return next((item for item in items if test(item)), None)


def _get(session: Any, node_id: str) -> Any:
    if session is None:
        return None
    try:
        return session.get(node_id)
    except Exception:
        return None
