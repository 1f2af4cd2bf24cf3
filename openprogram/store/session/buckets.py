"""Sealed buckets: the committed index of a history bucket (``history/<bucket>/index.json``).

Two JSON lines: a header (format version, field names, and the sha of the bucket's git tree
*without* ``index.json``), then the light entries of the bucket's nodes as columns.  A
bucket whose committed index records the tree it has in HEAD is *sealed*: its entries can
be taken without reading a node file.  Sealing reads the committed blobs (the file on disk
when it is the blob) and is done by the detached maintenance, never on a commit's path.
The content is data from wherever the session came from: it is used only after the sha
and shape checks (:func:`index.valid_columns`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from openprogram.context.nodes import Call, NodeFormatError
from openprogram.store.session.files import dumps, loads, read_bytes
from openprogram.store.session.history import (
    TREE_MODE,
    Repository,
    TreeEntries,
    cat_file_batch,
    object_sha,
    tree_sha,
)
from openprogram.store.session.index import (
    BUCKET_INDEX,
    BUCKET_INDEX_VERSION,
    BUCKET_NAME,
    ENTRY_FIELDS,
    F_SEQ,
    TURN_DIR_NAME,
    Entry,
    entry_of,
    valid_columns,
)


def bucket_trees(repo: Repository, commit: bytes | None = None) -> dict[str, bytes]:
    """Bucket name -> its tree sha in HEAD, or in ``commit`` (empty without a commit or a
    ``history``)."""
    if commit is None:
        history = repo.tree_at("history")
    else:
        found = repo.read_tree(repo.commit_tree_of(commit)).get("history")
        history = repo.read_tree(found[0]) if found and found[1] == TREE_MODE else {}
    return {
        name: sha
        for name, (sha, mode) in history.items()
        if mode == TREE_MODE and BUCKET_NAME.fullmatch(name)
    }


def _file_if_blob(path: str, blob: bytes) -> bytes | None:
    """The checked-out file at ``path`` when it is ``blob`` (no inflating), else None."""
    try:
        data = read_bytes(path)
    except OSError:
        return None
    return data if object_sha(b"blob", data) == blob else None


def _blob_or_file(repo: Repository, blob: bytes, path: str) -> bytes:
    """The content of ``blob``: the checked-out file when it is that blob."""
    data = _file_if_blob(path, blob)
    return repo.read(blob) if data is None else data


def _blobs_or_files(
    repo: Repository, root: Path, files: list[tuple[str, bytes]]
) -> dict[bytes, bytes]:
    """Blob -> content of ``files`` ((path, blob) each): the checked-out file when it is
    that blob, the others read by one ``git cat-file --batch`` (git inflates packed deltas
    in C; gitdb took ~0.4 ms an object: a bucket of 500 nodes ~0.25 s), one by one where
    git could not."""
    found: dict[bytes, bytes] = {}
    wanted: dict[bytes, None] = {}  # (in order, once each)
    for rel, blob in files:
        data = _file_if_blob(f"{root}/{rel}", blob)
        if data is None:
            wanted[blob] = None
        else:
            found[blob] = data
    fetched = cat_file_batch(repo.worktree, [blob.hex().encode() for blob in wanted])
    for blob, got in zip(wanted, fetched, strict=True):
        found[blob] = got[2] if got is not None and got[1] == b"blob" else repo.read(blob)
    return found


def sealed_columns(
    repo: Repository,
    root: Path,
    bucket: str,
    tree: bytes,
    turns_on_disk: set[str] | None,
    fetched: bytes | None = None,
) -> list[list[Any]] | None:
    """The entries (columns) of the committed index of ``bucket`` whose tree is ``tree``,
    or None when there is none, it is malformed, or it does not match the tree (or, unless
    ``turns_on_disk`` is None, a folder on disk is not one of the tree's: files the tree
    lacks; folders of the tree missing on disk are fine, their nodes are read from git).
    With ``turns_on_disk`` None only the header is checked and ``[]`` means sealed.
    ``fetched``: the index's content read already (used when it is the committed blob)."""
    try:
        contents = repo.read_tree(tree)
        index = contents.pop(BUCKET_INDEX, None)
        if index is None or index[1] == TREE_MODE:
            return None
        if turns_on_disk is not None and not turns_on_disk <= contents.keys():
            return None
        if fetched is not None and object_sha(b"blob", fetched) == index[0]:
            data = fetched  # read with others by one `git cat-file --batch` (deltas in C)
        else:
            data = _blob_or_file(repo, index[0], f"{root}/history/{bucket}/{BUCKET_INDEX}")
        head, _, body = data.partition(b"\n")
        header = loads(head)
        if (
            type(header) is not dict
            or header.get("v") != BUCKET_INDEX_VERSION
            or header.get("fields") != list(ENTRY_FIELDS)
            or header.get("tree") != tree_sha(contents).hex()
        ):
            return None
        if turns_on_disk is None:
            return []
        columns = loads(body)
    except Exception:  # unreadable objects, bad JSON: the bucket is scanned instead
        return None
    return columns if valid_columns(bucket, columns) else None


def seal(repo: Repository, root: Path, bucket: str, tree: bytes) -> bytes | None:
    """The committed index for ``bucket`` (tree ``tree`` in HEAD), or None when it has a
    valid one already or cannot have one (a node that does not parse, an unexpected
    name: the bucket stays scanned)."""
    if sealed_columns(repo, root, bucket, tree, None) is not None:
        return None
    contents = repo.read_tree(tree)
    contents.pop(BUCKET_INDEX, None)
    files: list[tuple[str, bytes]] = []  # (path, blob) of the bucket's node files
    for turn, (turn_tree, mode) in contents.items():
        if mode != TREE_MODE or not TURN_DIR_NAME.fullmatch(turn):
            return None
        for name, (blob, blob_mode) in repo.read_tree(turn_tree).items():
            if not name.endswith(".json") or name.startswith("."):
                continue  # what a scan skips
            if blob_mode == TREE_MODE:
                return None
            files.append((f"history/{bucket}/{turn}/{name}", blob))
    data = _blobs_or_files(repo, root, files)
    rows: list[Entry] = []
    for rel, blob in files:
        try:
            call = Call.from_dict(loads(data[blob]))
        except (ValueError, NodeFormatError):
            return None
        rows.append(entry_of(call, rel))
    if not valid_columns(bucket, [list(column) for column in zip(*rows, strict=True)]):
        return None
    return seal_data(rows, contents)


def seal_data(rows: list[Entry], contents: TreeEntries) -> bytes:
    """The committed index of a bucket whose tree (without ``index.json``) holds
    ``contents`` and whose nodes have the entries ``rows``."""
    rows = sorted(rows, key=lambda e: e[F_SEQ])
    columns = [list(column) for column in zip(*rows, strict=True)]
    header: dict[str, object] = {"v": BUCKET_INDEX_VERSION, "tree": tree_sha(contents).hex()}
    header["fields"] = list(ENTRY_FIELDS)
    return dumps(header) + b"\n" + dumps(columns) + b"\n"


def columns_to_entries(columns: list[list[Any]]) -> list[Entry]:
    return list(zip(*columns, strict=True))
