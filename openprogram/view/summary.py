"""Node dict → what the browser needs: a compact summary per node, full detail on demand.

Summaries are sent for every node, so they are small (a 5,000-node session stays well
under 2 MB of JSON): keys that would be empty are left out, names and previews are clipped.
Summary keys:

``id kind name status`` always; ``x y lane order`` position from the layout (``y`` is
``null`` when a fold hides the node, ``order`` is the row with nothing folded);
``preview`` (≤ 120 characters), ``ms`` (duration), ``tokens`` (input + output), ``cost`` (USD),
``caller`` (layout nesting parent) or ``pred`` (chain parent), ``kids`` (directly nested
calls), ``desc`` (all nested calls below), ``flags`` (bad data, unknown kind...) when set;
for turn-level kinds (``turn root reply``) ``at`` (when it ran, epoch seconds) and ``run``
(``metadata.run``: the kernel process that ran it, so views can mark restarts and re-runs);
``by`` (``metadata.author``'s name, on a turn's top node: who ran it, so the lines of a
shared session differ); ``stale`` (``metadata.stale``, set on the copy ``%openprogram dag``
draws: why the turn would not replay as recorded, :mod:`openprogram.compare.stale`).
A view drawn from the session's index adds ``light`` to the nodes it has not read whole
(no preview, duration, tokens, cost or run yet; see ``openprogram_magics.widget``).

:func:`node_detail` is what the click panel shows; every long value is a *text field*
``{"text", "length", "truncated"}`` clipped at :data:`DETAIL_LIMIT` characters, and
``node_detail(node, full_field=name)`` returns that one field up to :data:`MORE_LIMIT`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from openprogram.view.layout import node_kind, node_status
from openprogram.view.placed import Layout, Placed

PREVIEW_CHARS: Final = 120
PREVIEW_BYTES: Final = 180  # UTF-8 bytes: keeps a CJK-heavy session under the 2 MB budget
NAME_CHARS: Final = 80
NAME_BYTES: Final = 120
DETAIL_LIMIT: Final = 20_000
MORE_LIMIT: Final = 1_000_000
_TURN_LEVEL: Final = frozenset({"turn", "root", "reply"})
MAX_MESSAGES: Final = 200  # prompt messages shown in a detail (first 20 + last 180)
DETAIL_FIELDS: Final = ("doc", "input", "output", "messages", "error", "traceback", "extra")
# metadata keys shown by node_detail in their own place (the rest goes to "extra")
_SHOWN_META: Final = frozenset(
    {"kind", "status", "doc", "duration_ms", "error", "traceback", "usage", "cost", "model"}
    | {"messages"}
)


def clip(text: str, chars: int, max_bytes: int | None = None) -> str:
    """``text`` cut to ``chars`` characters (and ``max_bytes`` UTF-8 bytes), ``…`` if cut."""
    cut = text if len(text) <= chars else text[: chars - 1] + "…"
    if max_bytes is not None and not cut.isascii() and len(cut.encode()) > max_bytes:
        cut = cut.encode()[: max_bytes - 3].decode(errors="ignore") + "…"
    return cut


def flat_text(value: Any, budget: int) -> str:
    """A one-line rendering of any JSON-ish value, built only up to ``budget`` characters."""
    parts: list[str] = []
    left = budget

    def emit(text: str) -> None:
        nonlocal left
        if left > 0:
            parts.append(text[:left])
            left -= len(parts[-1])

    def walk(v: Any, depth: int) -> None:
        if left <= 0:
            return
        if isinstance(v, str):
            emit(v[:left])
        elif v is None or isinstance(v, bool | int | float):
            emit(json.dumps(v))
        elif depth > 8:
            emit("…")
        elif isinstance(v, Mapping):
            emit("{")
            for i, (k, item) in enumerate(v.items()):
                if left <= 0:
                    break
                emit(f"{', ' if i else ''}{k}: ")
                walk(item, depth + 1)
            emit("}")
        elif isinstance(v, list | tuple):
            emit("[")
            for i, item in enumerate(v):
                if left <= 0:
                    break
                emit(", " if i else "")
                walk(item, depth + 1)
            emit("]")
        else:
            emit(repr(v)[:left])

    walk(value, 0)
    return "".join(parts)


def preview_text(node: Mapping[str, Any]) -> str:
    """The one line a user wants to see next to a node (error, reply, question, cell...)."""
    meta = _meta(node)
    kind, status = node_kind(node), node_status(node)
    inp, out = node.get("input"), node.get("output")
    if (status == "error" or kind == "error") and meta.get("error") is not None:
        values: list[Any] = [meta["error"]]
    elif kind == "ask_user":
        values = [inp] if out is None else [inp, "→", out]
    elif kind in ("turn", "root"):
        if isinstance(inp, Mapping) and isinstance(inp.get("text"), str):
            inp = inp["text"]  # a notebook cell's turn: {"text": source, "execution_count": n}
        values = [inp if inp is not None else out]
    else:
        values = [out if out is not None else inp]
    text = " ".join(flat_text(v, PREVIEW_CHARS * 4) for v in values if v is not None)
    return clip(" ".join(text.split()), PREVIEW_CHARS, PREVIEW_BYTES)


def token_usage(node: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(input_tokens, output_tokens)`` from ``metadata.usage``, if it holds any."""
    usage = _meta(node).get("usage")
    if not isinstance(usage, Mapping):
        return None
    counts = [usage.get("input_tokens"), usage.get("output_tokens")]
    if not any(type(c) is int for c in counts):
        return None
    return tuple(c if type(c) is int else 0 for c in counts)  # type: ignore[return-value]


def index_summary(node: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a summary an index entry gives (``Session.light_nodes()``: kind, name,
    status, when a turn ran): all that :func:`content_summary` finds in such an entry."""
    name = node.get("name")
    out: dict[str, Any] = {
        "kind": clip(node_kind(node), 40),
        "name": clip(
            name if isinstance(name, str) else flat_text(name, NAME_CHARS), NAME_CHARS, NAME_BYTES
        ),
        "status": clip(node_status(node), 40),
    }
    if out["kind"] in _TURN_LEVEL:
        at = node.get("created_at")
        if isinstance(at, int | float) and not isinstance(at, bool) and at > 0:
            out["at"] = round(at)
    return out


def content_summary(node: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a summary that depends only on the node's content (cacheable per node)."""
    out = index_summary(node)
    text = preview_text(node)
    if text:
        out["preview"] = text
    duration = _meta(node).get("duration_ms")
    if isinstance(duration, int | float) and not isinstance(duration, bool) and duration >= 0:
        out["ms"] = round(duration)
    usage = token_usage(node)
    if usage is not None:
        out["tokens"] = usage[0] + usage[1]
    cost = _meta(node).get("cost")
    if isinstance(cost, int | float) and not isinstance(cost, bool) and cost >= 0:
        out["cost"] = float(cost)
    if out["kind"] in _TURN_LEVEL:
        run = _meta(node).get("run")
        if isinstance(run, str) and run:
            out["run"] = clip(run, 40)
    stale = _meta(node).get("stale")  # set on a drawn copy: why the turn is stale now
    if isinstance(stale, str) and stale:
        out["stale"] = clip(stale, 200)
    by = author_name(node)  # recorded on the nodes that make a turn (top-level ones)
    if by:
        out["by"] = by
    return out


def author_name(node: Mapping[str, Any]) -> str:
    """Who ran a turn (``metadata.author``, recorded by the store), as a view shows it."""
    author = _meta(node).get("author")
    name = author.get("name") if isinstance(author, Mapping) else None
    return clip(" ".join(name.split()), 60, 90) if isinstance(name, str) else ""


def position_summary(place: Placed) -> dict[str, Any]:
    """The part of a summary that comes from the layout."""
    out: dict[str, Any] = {
        "id": place.id,
        "x": place.x,
        "y": place.y,
        "lane": place.lane,
        "order": place.order,
    }
    if place.caller is not None:
        out["caller"] = place.caller
    elif place.pred is not None:
        out["pred"] = place.pred
    if place.children:
        out["kids"] = place.children
        out["desc"] = place.descendants
    if place.flags:
        out["flags"] = list(place.flags)
    return out


def node_summary(node: Mapping[str, Any], place: Placed) -> dict[str, Any]:
    return {**position_summary(place), **content_summary(node)}


def summarize(layout: Layout) -> list[dict[str, Any]]:
    """Summaries of every node (hidden ones included, so the browser can unfold) in row order."""
    return [node_summary(layout.source[p.id], p) for p in layout.placed.values()]


def text_field(value: Any, limit: int = DETAIL_LIMIT) -> dict[str, Any]:
    """``{"text", "length", "truncated"}``: strings as they are, anything else as JSON."""
    text = _as_text(value)
    return {"text": text[:limit], "length": len(text), "truncated": len(text) > limit}


def messages_field(messages: Any, limit: int = DETAIL_LIMIT) -> dict[str, Any]:
    """The rendered prompt: each message ``{"role", "content": text field}``.

    The character budget is shared fairly: short messages are shown whole, the long ones
    are clipped to the same length.  Past :data:`MAX_MESSAGES`, the middle is omitted.
    """
    items = list(messages) if isinstance(messages, list | tuple) else [messages]
    count, omitted = len(items), 0
    max_items = MAX_MESSAGES if limit <= DETAIL_LIMIT else MAX_MESSAGES * 10
    if count > max_items:
        head = max_items // 10
        omitted = count - max_items
        items = items[:head] + items[count - (max_items - head) :]
    roles: list[str] = []
    texts: list[str] = []
    for item in items:
        if isinstance(item, Mapping):
            roles.append(clip(str(item.get("role", "?")), 40))
            content = item.get("content")
        else:
            roles.append("?")
            content = item
        texts.append(_as_text(content))
    cap = _fair_cap([len(t) for t in texts], limit)
    total = sum(len(t) for t in texts)
    shown: list[dict[str, Any]] = [
        {"role": r, "content": {"text": t[:cap], "length": len(t), "truncated": len(t) > cap}}
        for r, t in zip(roles, texts, strict=True)
    ]
    return {
        "items": shown,
        "count": count,
        "omitted": omitted,
        "omitted_at": max_items // 10 if omitted else None,
        "length": total,
        "truncated": omitted > 0 or any(s["content"]["truncated"] for s in shown),
    }


def node_detail(
    node: Mapping[str, Any], full_field: str | None = None, *, limit: int = DETAIL_LIMIT
) -> dict[str, Any]:
    """Everything the click panel shows about ``node``, long values clipped at ``limit``.

    ``full_field`` (one of :data:`DETAIL_FIELDS`) returns that field up to
    :data:`MORE_LIMIT` characters instead (the "show more" button).
    """
    if full_field is not None and full_field not in DETAIL_FIELDS:
        raise ValueError(f"unknown detail field {full_field!r}; one of {DETAIL_FIELDS}")
    meta = _meta(node)
    kind = node_kind(node)

    def limit_of(name: str) -> int:
        return MORE_LIMIT if name == full_field else limit

    detail: dict[str, Any] = {
        "id": node.get("id"),
        "kind": kind,
        "name": node.get("name"),
        "status": node_status(node),
        "expanded": full_field,
    }
    for key in ("role", "seq", "turn", "caller", "predecessor", "created_at"):
        if node.get(key) is not None:
            detail[key] = node[key]
    for key in ("duration_ms", "model", "cost"):
        if meta.get(key) is not None:
            detail[key] = meta[key] if isinstance(meta[key], int | float | str) else repr(meta[key])
    usage = token_usage(node)
    if usage is not None:
        detail["tokens"] = {"input": usage[0], "output": usage[1], "total": sum(usage)}
    values = {
        "doc": meta.get("doc"),
        "input": node.get("input"),
        "output": node.get("output"),
        "error": meta.get("error"),
        "traceback": meta.get("traceback"),
        "extra": {k: v for k, v in meta.items() if k not in _SHOWN_META} or None,
    }
    for name, value in values.items():
        if value is not None:
            detail[name] = text_field(value, limit_of(name))
    if meta.get("messages") is not None:
        detail["messages"] = messages_field(meta["messages"], limit_of("messages"))
    return detail


def _meta(node: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = node.get("metadata")
    return meta if type(meta) is dict or isinstance(meta, Mapping) else {}


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):  # circular or otherwise unserializable
        return repr(value)


def _fair_cap(lengths: Sequence[int], budget: int) -> int:
    """The largest cap c with sum(min(length, c)) <= budget (water-filling)."""
    left, remaining = budget, len(lengths)
    for length in sorted(lengths):
        if length * remaining > left:
            return left // remaining
        left -= length
        remaining -= 1
    return max(lengths, default=0)
