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

A payload of more than :data:`TEXT_MIN` bytes is stored as JSON *text* (:func:`mime_value`;
:func:`read_saved` reads either form): JupyterLab's output model deep-copies every
object-valued part of a bundle (``JSON.parse(JSON.stringify(...))``) each time the bundle
is read — six times while a notebook opens, ~50 ms each for a 4 MB view — and passes a
string as it is.

Payload keys: ``v`` (1), ``title``, ``head_id``, ``summary``, ``folded``, ``details``
(id → :func:`node_detail` at ``detail_limit``), ``detail_limit``, ``nodes`` (how many the
view has), ``omitted`` (summaries left out), ``details_omitted``, ``widget`` (the live
widget's model id, when one exists: the extension then shows the live view instead), and
``older`` (when the view holds only the session's newest window: the nodes older than it).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any, Final

import orjson

from openprogram.view.layout import Layout
from openprogram.view.summary import node_detail, summarize

DAG_MIME: Final = "application/vnd.openprogram.dag+json"
TURN_BUDGET: Final = 256 * 1024
SESSION_BUDGET: Final = 4 * 1024 * 1024
MAX_SAVED_NODES: Final = 20_000
DETAIL_LIMITS: Final = (4_000, 1_000, 250)
TEXT_MIN: Final = 64 * 1024  # a larger payload is saved as JSON text (see above)


def mime_value(payload: dict[str, Any]) -> dict[str, Any] | str:
    """What the :data:`DAG_MIME` part holds: ``payload``, or its JSON text when large."""
    text = orjson.dumps(payload)
    return text.decode() if len(text) > TEXT_MIN else payload


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
) -> dict[str, Any]:
    """The :data:`DAG_MIME` payload for ``layout``, at most ``budget`` bytes of JSON.

    Pass ``summaries`` when they are already computed (the live widget has them).  Nodes
    in ``light`` are index entries (not read whole): they get no detail.  ``older``: the
    nodes of the session older than the view's window (a view of its newest rows).
    """
    rows = summaries if summaries is not None else summarize(layout)
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
    details, limit = _fit_details(layout.source, newest_first, left)
    payload["details"] = details
    payload["detail_limit"] = limit
    payload["details_omitted"] = len(kept) - len(details)
    return payload


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


def _fit_details(
    source: Mapping[str, Mapping[str, Any]], ids: list[str], budget: int
) -> tuple[dict[str, Any], int]:
    """Details of ``ids`` at the largest clip that fits; at the last clip, as many as fit."""
    from openprogram.store.session.labels import turn_labels

    details: dict[str, Any] = {}
    labels = turn_labels(source[nid] for nid in ids)  # `5@alice` when two people made a 5
    for limit in DETAIL_LIMITS:
        details, used, complete = {}, 2, True
        for nid in ids:
            detail = node_detail(source[nid], limit=limit)
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
