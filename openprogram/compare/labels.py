"""A turn's label, unique across the people of a session: pure logic (moved out of the
store, which never reads it: decision 0063).

Each machine numbers its turns on from the highest it knows, so two people who go on from
turn 4 each make a turn 5.  A number one person alone used stays as it is (``5``); a number
several authors used is labelled by author, ``5@alice`` and ``5@bob`` (the author's key: the
part of the email before the ``@``, else the name's first word, lowercased).  The same rule
names the turns of a log (``turn 5@alice: …``), the sides of ``sessions diff`` and
``--from``; a number given alone when several authors used it is refused with the
candidates listed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_KEY_CHARS = re.compile(r"[^a-z0-9._-]+")
LABEL = re.compile(r"#?(\d{1,9})(?:[@.]([A-Za-z0-9._-]{1,64}))?")
TURN_SUMMARY = re.compile(r"turn (\d{1,9})(?=: |$)")


def author_key(name: str, email: str = "") -> str:
    """``alice`` for ``Alice Liddell <alice@example.org>``: the email's local part, else the
    name's first word, lowercased and kept to ``[a-z0-9._-]`` (empty: no author known)."""
    local = email.partition("@")[0] if "@" in email else ""
    for text in (local, (name.split() or [""])[0]):
        key = _KEY_CHARS.sub("", text.lower()).strip(".")[:32]
        if key:
            return key
    return ""


def node_author_key(metadata: Mapping[str, Any]) -> str:
    """:func:`author_key` of a node's ``metadata.author`` (``{"name", "email"}``)."""
    author = metadata.get("author")
    if not isinstance(author, Mapping):
        return ""
    name, email = author.get("name"), author.get("email")
    return author_key(
        name if isinstance(name, str) else "", email if isinstance(email, str) else ""
    )


def shared_numbers(turns: Iterable[tuple[int, str]]) -> set[int]:
    """The turn numbers more than one author used, of ``(number, author key)`` pairs."""
    keys: dict[int, set[str]] = {}
    for number, key in turns:
        keys.setdefault(number, set()).add(key)
    return {number for number, found in keys.items() if len(found) > 1}


def label(number: int, key: str, shared: set[int]) -> str:
    """``5`` or, when several authors used 5, ``5@key`` (``5@?`` for an unknown author)."""
    return f"{number}@{key or '?'}" if number in shared else str(number)


@dataclass(frozen=True)
class Spec:
    """A label as typed: ``5``, ``#5``, ``5@alice`` or ``5.alice``."""

    number: int
    key: str | None


def parse_label(text: str) -> Spec | None:
    """The turn a label names, or None when ``text`` is no label (a node id, ``head``)."""
    found = LABEL.fullmatch(text.strip())
    if found is None:
        return None
    return Spec(int(found.group(1)), found.group(2).lower() if found.group(2) else None)


def relabel_log(rows: Iterable[tuple[str, str, str]]) -> list[str]:
    """The summaries of a log's commits (``(summary, author name, email)``, any order) with
    ``turn N: …`` made ``turn N@key: …`` where several authors made a turn N."""
    rows = list(rows)
    keyed = []
    for summary, name, email in rows:
        found = TURN_SUMMARY.match(summary)
        keyed.append((int(found.group(1)) if found else None, author_key(name, email)))
    shared = shared_numbers((n, k) for n, k in keyed if n is not None)
    out = []
    for (summary, _name, _email), (number, key) in zip(rows, keyed, strict=True):
        if number is not None and number in shared:
            summary = f"turn {label(number, key, shared)}{summary[len(f'turn {number}') :]}"
        out.append(summary)
    return out


def turn_labels(nodes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Node id -> label (``5@alice``) of the turn-level node dicts (``Call.to_dict()``)
    whose number several authors made: what a DAG's detail shows as the turn.  A dict read
    light from the index (no ``metadata.author``) counts for no author; none: ``{}``."""
    found: list[tuple[str, int, str]] = []
    for node in nodes:
        meta = node.get("metadata")
        if not isinstance(meta, Mapping) or meta.get("kind") not in ("turn", "reply"):
            continue
        number = node.get("turn")
        if type(number) is int and isinstance(node.get("id"), str) and "author" in meta:
            found.append((node["id"], number, node_author_key(meta)))
    shared = shared_numbers((number, key) for _, number, key in found)
    return {nid: label(number, key, shared) for nid, number, key in found if number in shared}
