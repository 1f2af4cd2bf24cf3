"""Stale turns: a cell whose code, a function's docstring or code, or the model or provider
changed since it was recorded.

One rule (:func:`stale_reasons`) for both users of it:

- ``openprogram run --only-stale`` (:class:`openprogram.providers.replay.ReplayProvider`
  with ``live_stale``): at each call, the cell's recordings against the functions in the
  call's chain and the provider the notebook asks for — a stale cell runs live;
- ``%openprogram stale`` and the DAG's ``stale`` badge (:func:`stale_turns`): each cell's
  recordings against the notebook's cells, the functions defined in the kernel now and
  its provider.

A cell is known by the hash of its text (:func:`cell_hash`; ``%%openprogram`` line
included but for a ``--from NODE``, trailing blanks ignored), so a cell moved or with
others inserted around it is the same cell, and an edited cell is a new one.  Its
recordings are every turn recorded of that text: it is stale when no recording matches
what would run now — except a cell whose saved output shows a turn (``Now.shown``): it is
judged by that turn alone, so a colleague's re-run of the same text (an ``--only-stale``
run pulled into this session) does not hide that this notebook shows an older docstring's
output.  Pure: nodes in, findings out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Hashes = tuple[Any, Any]  # (doc_hash, source_hash) of a function node
Model = tuple[str, Any]  # (provider, model)
REPLAYED = "replay"  # the provider, and the model, of an answer taken from a recording
# (a replay's call answered live by its fallback: provider "replay", the fallback's model)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


FROM_OPTION = re.compile(r"\s--from(?:=|\s+)\S+")


def cell_lines(text: str) -> list[str]:
    """The cell's lines as its hash reads them: trailing blanks dropped, and a ``--from
    NODE`` on its ``%%openprogram`` line (where it attaches, not what it runs) left out."""
    lines = [ln.rstrip() for ln in text.strip().splitlines()]
    if lines and lines[0].startswith("%%"):
        lines[0] = FROM_OPTION.sub("", lines[0])
    return lines


def cell_hash(text: str) -> str:
    """The hash a cell of this text is known by (trailing blanks ignored)."""
    return text_hash("\n".join(cell_lines(text)))


@dataclass(frozen=True)
class Cell:
    """Where a call was made: the cell's source hash ("" outside a notebook cell), a label a
    person recognises (``cell [3] (triage("the app…"))``) and the turn's node id."""

    hash: str
    label: str
    turn: str | None


CHAT_CELL = "%%openprogram --chat"  # a chat cell's first line, as most are written
CHAT_TURNS = ("user", "continuation")  # the turn nodes of a chat message (and its goal's)


def turn_cell_text(top: Any) -> str | None:
    """The text of the cell whose turn is ``top``, or None (no cell's turn).

    A plain cell's turn holds its cell as ``input.text``; a chat turn holds the message
    there and its cell in ``metadata.cell`` (a goal's continuation turns too: they belong
    to the cell that started the run).  A chat turn recorded before the cell was kept is
    read as the usual ``%%openprogram --chat`` cell of its message; a continuation turn of
    that time as no cell of its own."""
    if top.kind != "turn":
        return None
    meta = top.metadata if isinstance(top.metadata, dict) else {}
    if isinstance(meta.get("cell"), str):
        return str(meta["cell"])
    text = top.input.get("text") if isinstance(top.input, dict) else None
    if not isinstance(text, str) or top.name == CHAT_TURNS[1]:
        return None
    if top.name == CHAT_TURNS[0] and not text.lstrip().startswith("%%"):
        return f"{CHAT_CELL}\n{text}"
    return text


def cell_of(top: Any) -> Cell:
    """The cell whose turn is ``top`` (the top of a call's chain of callers), or no cell."""
    if top is None:
        return Cell("", "a call outside any turn", None)
    text = turn_cell_text(top)
    if text is None:
        return Cell("", f"the turn of {top.name}", top.id)
    lines = cell_lines(text)
    body = [ln for ln in lines if ln.strip() and not ln.startswith("%%")]
    first = body[0].strip()[:60] if body else ""
    label = f"{top.name} ({first})" if first else str(top.name)
    return Cell(text_hash("\n".join(lines)), label, top.id)


def top_of(node_id: str | None, lookup: Callable[[str], Any]) -> Any:
    """The top of ``node_id``'s chain of callers (its turn), or None."""
    top = None
    seen: set[str] = set()
    while node_id is not None and node_id not in seen:
        seen.add(node_id)
        node = lookup(node_id)
        if node is None:
            break
        top, node_id = node, node.caller
    return top


@dataclass
class RecordedCell:
    """What a cell's recorded turns ran: each function's (doc_hash, source_hash) and the
    (provider, model) of its answered calls (replayed answers, and functions whose every
    call was replayed, left out); ``turns``: its turn nodes, oldest first."""

    functions: dict[str, set[Hashes]] = field(default_factory=dict)
    models: set[Model] = field(default_factory=set)
    turns: list[Any] = field(default_factory=list)


def recorded_cells(nodes: Sequence[Any]) -> dict[str, RecordedCell]:
    """Every cell recorded in ``nodes`` (a session's, in seq order), by cell hash."""
    return _recorded(nodes, lambda turn: cell_of(turn).hash)


def recorded_turns(nodes: Sequence[Any]) -> dict[str, RecordedCell]:
    """What each turn of ``nodes`` ran on its own, by turn id (what a cell showing that
    turn's output was made with)."""
    return _recorded(nodes, lambda turn: str(turn.id))


def _recorded(nodes: Sequence[Any], key_of: Callable[[Any], str]) -> dict[str, RecordedCell]:
    by_id = {node.id: node for node in nodes}
    replayed_only = _replayed_only(nodes, by_id)
    cells: dict[str, RecordedCell] = {}
    for node in nodes:
        if node.kind == "turn":
            cells.setdefault(key_of(node), RecordedCell()).turns.append(node)
        if node.kind not in ("function", "llm"):
            continue
        top = top_of(node.caller, by_id.get)
        if top is None or top.kind != "turn":
            continue
        cell = cells.setdefault(key_of(top), RecordedCell())
        if node.kind == "function":
            if node.id not in replayed_only:
                hashes = (node.metadata.get("doc_hash"), node.metadata.get("source_hash"))
                cell.functions.setdefault(node.name, set()).add(hashes)
        elif node.name != REPLAYED:
            cell.models.add((node.name, node.metadata.get("model")))
    return cells


def _replayed_only(nodes: Sequence[Any], by_id: Mapping[str, Any]) -> set[str]:
    """Function nodes whose LLM calls were all answered from a recording (a replay): what
    they ran was not recorded with an answer of its own, so their hashes are no recording."""
    replayed: set[str] = set()
    live: set[str] = set()
    for node in nodes:
        if node.kind != "llm":
            continue
        into = replayed if node.metadata.get("model") == REPLAYED else live
        node_id, seen = node.caller, set()
        while node_id is not None and node_id not in seen:
            seen.add(node_id)
            up = by_id.get(node_id)
            if up is None or up.kind != "function":
                break
            into.add(node_id)
            node_id = up.caller
    return replayed - live


def stale_reasons(
    recorded: RecordedCell | None,
    functions: Iterable[tuple[str, Any, Any]],
    model: Model | None,
) -> list[str]:
    """Why a cell recorded as ``recorded`` (None: its text was never recorded) is stale when
    it would now run ``functions`` (name, doc_hash, source_hash) on ``model`` (provider,
    model; None: not known); empty when it is not.  A function the cell never recorded,
    or one without hashes, is no reason; nor is a model when the cell recorded none."""
    if recorded is None:
        return ["its cell's code changed since it was recorded (no recording of this text)"]
    reasons: list[str] = []
    for name, doc, source in functions:
        known = recorded.functions.get(name)
        if known is None or doc is None or (doc, source) in known:
            continue
        what = "code" if doc in {d for d, _ in known} else "docstring"
        reason = f"the {what} of `{name}` changed"
        if reason not in reasons:
            reasons.append(reason)
    if model is not None and recorded.models and model not in recorded.models:
        was = ", ".join(sorted(_model_text(m) for m in recorded.models))
        reasons.append(f"recorded with {was}, now {_model_text(model)}")
    return reasons


def _model_text(model: Model) -> str:
    provider, name = model
    return f"{provider}/{name}" if name else str(provider)


@dataclass(frozen=True)
class Now:
    """What would run now: the notebook's cell texts (None: not known — the cell check is
    left out), each function defined now by name (its ``__agentic_hashes__``), and the
    provider and model (None: not known).  ``shown``: the turn each cell's output shows,
    by the hash of the cell's text now (:func:`cell_hash`) — such a cell is judged by that
    turn alone, not by whatever else was recorded of its text (a colleague's re-run)."""

    cells: Sequence[str] | None = None
    functions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    model: Model | None = None
    shown: Mapping[str, str] = field(default_factory=dict)


@dataclass
class StaleTurn:
    turn: Any  # the newest turn node recorded of the cell
    label: str  # the cell, as a person recognises it
    reasons: list[str]
    gone: bool = False  # its text is not in the notebook now

    def line(self) -> str:
        return f"turn {self.turn.turn} ({self.turn.id}) {self.label}: " + "; ".join(self.reasons)


@dataclass
class StaleReport:
    stale: list[StaleTurn]
    checked: int  # cells recorded (one newest turn each)
    unrecorded: int | None  # notebook cells with no recording (None: cells not known)
    cells_known: bool

    def by_turn(self) -> dict[str, str]:
        """Turn id → why it is stale (what the DAG's ``stale`` badge says)."""
        return {s.turn.id: "; ".join(s.reasons) for s in self.stale}

    def lines(self) -> list[str]:
        head = f"{len(self.stale)} of {self.checked} recorded cell(s) stale"
        if not self.cells_known:
            head += " (the notebook's cells are not known here: cell code not checked)"
        out = [head]
        out += [f"  {s.line()}" for s in self.stale]
        if self.unrecorded:
            out.append(f"  {self.unrecorded} turn cell(s) of the notebook have no recording (live)")
        return out


def stale_turns(nodes: Sequence[Any], now: Now) -> StaleReport:
    """The newest recorded turn of each cell of ``nodes`` (a session's, in seq order) whose
    cell would not replay as recorded ``now`` (see :func:`stale_reasons`)."""
    cells = recorded_cells(nodes)
    texts = {cell_hash(t) for t in now.cells} if now.cells is not None else None
    shown = _shown_turns(nodes, now.shown)
    out: list[StaleTurn] = []
    checked = 0
    for key, recorded in cells.items():
        if not recorded.turns or not key:
            continue
        checked += 1
        newest = recorded.turns[-1]
        if key in shown:  # the cell shows one turn's output: judged by that turn
            recorded = shown[key]
            newest = recorded.turns[-1]
        label = cell_of(newest).label
        if texts is not None and key not in texts:
            reasons = ["its cell is no longer in the notebook as recorded (edited or removed)"]
            out.append(StaleTurn(newest, label, reasons, gone=True))
            continue
        if any(s.turn.id == newest.id for s in out):  # its earlier text's, listed already
            continue
        if cell_of(newest).hash != key:  # its output came from an earlier text of the cell
            reasons = [f"its cell's code changed since turn {newest.turn}, whose output it shows"]
            out.append(StaleTurn(newest, label, reasons))
            continue
        functions = [
            (name, now.functions[name].get("doc_hash"), now.functions[name].get("source_hash"))
            for name in recorded.functions
            if name in now.functions
        ]
        reasons = stale_reasons(recorded, functions, now.model)
        if reasons:
            out.append(StaleTurn(newest, label, reasons))
    out.sort(key=lambda s: s.turn.seq)
    unrecorded = None
    if texts is not None:
        unrecorded = len({t for t in texts if t not in cells})
    return StaleReport(out, checked, unrecorded, texts is not None)


def _shown_turns(nodes: Sequence[Any], shown: Mapping[str, str]) -> dict[str, RecordedCell]:
    """Cell hash -> what the turn that cell shows ran (turns this session does not hold,
    e.g. not pulled yet, left out: those cells are judged by every recording of their
    text)."""
    if not shown:
        return {}
    turns = recorded_turns(nodes)
    return {key: turns[tid] for key, tid in shown.items() if turns.get(tid, RecordedCell()).turns}
