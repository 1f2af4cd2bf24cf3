"""The local index cache of a session's buckets: ``.state/index/<bucket>.json``, one file a
bucket, in the format of a committed bucket index (:mod:`buckets`) whose header also holds
each turn folder's key (:data:`TurnKey`).  Reading and writing those files, and when a
cached turn still holds; :class:`nodeindex.NodeIndex` decides what to load and save.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from openprogram.store.session.files import atomic_write, dumps, ensure_dir, loads, read_bytes
from openprogram.store.session.index import (
    BUCKET_INDEX_VERSION,
    ENTRY_FIELDS,
    TURN_DIR_NAME,
    Entry,
    valid_columns,
)

CACHE_DIR = "index"  # under .state/
COMMITTED_KEY = re.compile(r"[0-9a-f]{40}(@[0-9]{1,20})?")
# a committed turn: its tree sha (hex), "@<its folder's mtime>" while checked out; else
# (not committed yet) its folder's mtime (ns)
TurnKey = int | str


def same_turn(cached: TurnKey | None, now: TurnKey) -> bool:
    """Whether entries recorded under ``cached`` still hold for a turn keyed ``now``: the
    same key, or the same commit since left out of the working tree."""
    return cached == now or (
        type(now) is str and "@" not in now and type(cached) is str and cached[:40] == now
    )


def cache_path(root: Path, bucket: str) -> Path:
    return root / ".state" / CACHE_DIR / f"{bucket}.json"


def read_cache(root: Path, bucket: str) -> tuple[dict[str, TurnKey], list[Entry]]:
    """The turn keys and entries cached for ``bucket``; nothing when the file is missing,
    of another version, or not ours (the bucket is then scanned)."""
    try:
        head, _, body = read_bytes(str(cache_path(root, bucket))).partition(b"\n")
        header = loads(head)
        dirs = header["dirs"]
        if (
            header.get("v") != BUCKET_INDEX_VERSION
            or header.get("fields") != list(ENTRY_FIELDS)
            or type(dirs) is not dict
            or not all(
                TURN_DIR_NAME.fullmatch(k)
                and (type(v) is int or (type(v) is str and COMMITTED_KEY.fullmatch(v)))
                for k, v in dirs.items()
            )
        ):
            return {}, []
        columns = loads(body)
        if columns == [[] for _ in ENTRY_FIELDS]:
            return dirs, []
        if not valid_columns(bucket, columns):
            return {}, []
        return dirs, list(zip(*columns, strict=True))
    except Exception:  # missing, or not ours: the bucket is scanned
        return {}, []


def write_cache(root: Path, bucket: str, keys: dict[str, TurnKey], rows: list[Entry]) -> None:
    """Write the cache of ``bucket``: its turn ``keys`` and its entries ``rows``."""
    columns: list[list[Any]] = [list(c) for c in zip(*rows, strict=True)] or [
        [] for _ in ENTRY_FIELDS
    ]
    header: dict[str, Any] = {"v": BUCKET_INDEX_VERSION, "fields": list(ENTRY_FIELDS)}
    header["dirs"] = keys
    ensure_dir(root, f".state/{CACHE_DIR}")
    atomic_write(cache_path(root, bucket), dumps(header) + b"\n" + dumps(columns) + b"\n")
