"""The DAG data a notebook keeps: one mime part that the shipped extension draws without a kernel.

``application/vnd.openprogram.dag+json`` (:data:`DAG_MIME`) holds what the live widget
would have synced — the nodes' summaries in row order, the folds, HEAD, the title — plus
the click panel's detail of each node, clipped.  The JupyterLab / Notebook 7 extension
renders it with the same ``dag.js`` as the live widget (no kernel, no trust needed).

Bounded so a notebook stays reasonable (a 200-cell notebook holds 200 turns, not 200
copies of the session):

- a turn's output carries only that turn's nodes, at most :data:`TURN_BUDGET` bytes of
  JSON (256 KiB); the whole-session view (``%openprogram dag``) at most
  :data:`SESSION_BUDGET` (4 MiB), summaries of at most :data:`MAX_SAVED_NODES` nodes (the
  rows nearest HEAD when there are more);
- summaries come first; details then get the largest per-field clip of
  :data:`DETAIL_LIMITS` under which they all fit, and at the smallest clip the nodes
  nearest HEAD (the newest rows) are kept first; ``details_omitted`` counts the rest.

The payload is stored as compact JSON *text* (:func:`mime_value`; :func:`read_saved` reads
an object too, as older notebooks hold): one line in the ``.ipynb``, so a re-run changes one
line of it, not every line of a pretty-printed object whose blocks, keyed by node ids, move
about; and JupyterLab's output model deep-copies every object-valued part of a bundle
(``JSON.parse(JSON.stringify(...))``) each time the bundle is read — six times while a
notebook opens, ~50 ms each for a 4 MB view — but passes a string as it is.

A saved detail (:func:`saved_detail`) is the click panel's detail without what the saved
view knows otherwise or what only numbers the node in the session (``seq``, ``role``,
``caller``...), its ``extra`` compact, without the author (the summary's ``by`` names
them) and without the context policy's bookkeeping (the ids and token counts of the turns
the prompt held, which move on every run; the prompt is in ``messages``).

Payload keys: ``v`` (1), ``title``, ``head_id``, ``summary``, ``folded``, ``details``
(id → :func:`saved_detail` at ``detail_limit``), ``detail_limit``, ``nodes`` (how many the
view has), ``omitted`` (summaries left out), ``details_omitted`` (the last three left out
when empty or 0), ``widget`` (the live
widget's model id, when one exists: the extension then shows the live view instead), and
``older`` (when the view holds only the session's newest window: the nodes older than it).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any, Final

import orjson

from openprogram.view.placed import Layout
from openprogram.view.summary import _SHOWN_META, node_detail, summarize, text_field

DAG_MIME: Final = "application/vnd.openprogram.dag+json"
TURN_BUDGET: Final = 256 * 1024
SESSION_BUDGET: Final = 4 * 1024 * 1024
MAX_SAVED_NODES: Final = 20_000
DETAIL_LIMITS: Final = (4_000, 1_000, 250)
#: detail keys a saved detail leaves out (see the module docstring)
UNSAVED_DETAIL: Final = ("expanded", "seq", "role", "caller", "predecessor", "created_at")
#: payload keys left out when empty or 0 (a reader takes ``.get(key, 0)`` / ``[]``)
UNSAVED_DEFAULTS: Final = ("folded", "omitted", "details_omitted")
#: metadata a saved detail's ``extra`` leaves out
UNSAVED_EXTRA: Final = ("context", "author")


def mime_value(payload: dict[str, Any]) -> str:
    """What the :data:`DAG_MIME` part holds: ``payload`` as compact JSON text (one line)."""
    try:
        return orjson.dumps(payload).decode()
    except TypeError:  # what orjson refuses, such as ints beyond 64 bits
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def saved_detail(node: Mapping[str, Any], *, limit: int, cell: bool = False) -> dict[str, Any]:
    """:func:`node_detail` of ``node`` as a saved view keeps it (see the module docstring);
    ``cell``: ``node`` is the turn of the cell the view is saved under, whose input (the
    cell's text) the cell shows."""
    detail = node_detail(node, limit=limit)
    for key in UNSAVED_DETAIL:
        detail.pop(key, None)
    if cell or "messages" in detail:  # the cell's text; a call's prompt holds its input
        detail.pop("input", None)
    meta = node.get("metadata")
    if "extra" in detail and isinstance(meta, Mapping):
        extra = {k: meta[k] for k in meta if k not in _SHOWN_META and k not in UNSAVED_EXTRA}
        if extra.get("finish_reason") == "stop":  # a reply that ended as replies do
            del extra["finish_reason"]
        if extra:
            text = json.dumps(extra, ensure_ascii=False, separators=(",", ":"), default=repr)
            detail["extra"] = text_field(text, limit)
        else:
            del detail["extra"]
    if "tokens" in detail:  # (the panel shows input and output)
        detail["tokens"] = {k: v for k, v in detail["tokens"].items() if k != "total"}
    for key, field in detail.items():
        if isinstance(field, dict) and "truncated" in field:
            detail[key] = _compact(field)
    return detail


def _compact(field: dict[str, Any]) -> dict[str, Any]:
    """A text field (or the prompt) without the counts the view reads only when clipped."""
    out = {k: v for k, v in field.items() if field["truncated"] or k not in ("length", "truncated")}
    if not out.get("omitted"):
        out.pop("omitted", None)
        out.pop("omitted_at", None)
    if "items" in out:
        out["items"] = [
            {**item, "content": _compact(item["content"])} if "content" in item else item
            for item in out["items"]
        ]
    return out


def read_saved(value: Any) -> dict[str, Any]:
    """The payload of a :data:`DAG_MIME` part, stored as an object or as JSON text."""
    data = json.loads(value) if isinstance(value, str) else value
    if not isinstance(data, dict):
        raise ValueError("not a saved DAG view")
    return data


def saved_view(
    layout: Layout,
    *,
    title: str = "",
    budget: int = TURN_BUDGET,
    summaries: list[dict[str, Any]] | None = None,
    widget: str | None = None,
    light: Collection[str] = (),
    older: int = 0,
    cell: str | None = None,
) -> dict[str, Any]:
    """The :data:`DAG_MIME` payload for ``layout``, at most ``budget`` bytes of JSON.

    Pass ``summaries`` when they are already computed (the live widget has them).  Nodes
    in ``light`` are index entries (not read whole): they get no detail.  ``older``: the
    nodes of the session older than the view's window (a view of its newest rows).
    ``cell``: the turn of the cell the view is saved under; the cell shows its text, so
    neither its row nor its detail repeat it.
    """
    rows = summaries if summaries is not None else summarize(layout)
    if cell is not None:
        rows = [_without_preview(row) if row["id"] == cell else row for row in rows]
    total = len(rows)
    kept, kept_size = _fit_summaries(rows, budget * 3 // 4)
    payload: dict[str, Any] = {
        "v": 1,
        "title": title,
        "head_id": layout.head_id,
        "summary": [],
        "folded": sorted(f for f in layout.folded if f in layout.placed),
        "nodes": total,
        "omitted": total - len(kept),
    }
    if widget:
        payload["widget"] = widget
    if older:
        payload["older"] = older
    left = budget - _size(payload) - kept_size - 64
    payload["summary"] = kept
    newest_first = [s["id"] for s in reversed(kept) if s["id"] not in light]
    details, limit = _fit_details(layout.source, newest_first, left, cell)
    payload["details"] = details
    payload["detail_limit"] = limit
    payload["details_omitted"] = len(kept) - len(details)
    return {k: v for k, v in payload.items() if k not in UNSAVED_DEFAULTS or v}


def _fit_summaries(rows: list[dict[str, Any]], budget: int) -> tuple[list[dict[str, Any]], int]:
    """All rows if at most :data:`MAX_SAVED_NODES` fit ``budget`` (almost always); else the
    last rows (nearest HEAD, where the view opens) that do, in row order; and their size."""
    if len(rows) > MAX_SAVED_NODES:
        rows = sorted(rows, key=lambda row: row["order"])[-MAX_SAVED_NODES:]
    size = _size(rows)
    if size <= budget:
        return rows, size
    out: list[dict[str, Any]] = []
    used = 2
    for row in reversed(sorted(rows, key=lambda row: row["order"])):
        size = _size(row) + 1
        if used + size > budget:
            break
        used += size
        out.append(row)
    return out[::-1], used


def _without_preview(row: dict[str, Any]) -> dict[str, Any]:
    """A cell's turn row without its preview (the cell's text) — unless it is an error."""
    return row if row.get("status") == "error" else {k: v for k, v in row.items() if k != "preview"}


def _fit_details(
    source: Mapping[str, Mapping[str, Any]], ids: list[str], budget: int, cell: str | None
) -> tuple[dict[str, Any], int]:
    """Details of ``ids`` at the largest clip that fits; at the last clip, as many as fit."""
    from openprogram.compare.labels import turn_labels

    details: dict[str, Any] = {}
    labels = turn_labels(source[nid] for nid in ids)  # `5@alice` when two people made a 5
    for limit in DETAIL_LIMITS:
        details, used, complete = {}, 2, True
        for nid in ids:
            detail = saved_detail(source[nid], limit=limit, cell=nid == cell)
            if nid in labels:
                detail["turn"] = labels[nid]
            used += _size(detail) + len(nid) + 4
            if used > budget:
                complete = False
                break
            details[nid] = detail
        if complete:
            return details, limit
    return details, DETAIL_LIMITS[-1]


def _size(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON (orjson's output; json's for what orjson
    refuses, such as ints beyond 64 bits)."""
    try:
        return len(orjson.dumps(value))
    except TypeError:
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
