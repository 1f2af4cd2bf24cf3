"""Loose objects and packs of a session repository.

A commit's objects are written as one small pack (:func:`write_pack`: git's documented
pack v2 and index v2 formats, undeltified), so a turn creates two object files whatever
its number of nodes; the index is renamed into place before the pack, so a reader that
lists packs (git looks for ``.idx`` files with a ``.pack``, gitdb for ``.pack`` files)
never sees a pack without its index, and the ref moves only after both.  One loose object
(``zlib`` of ``<kind> <size>\\0<data>``, named by its SHA-1, as git writes them) is what
other writers (a merge, tests) store.  A writer merges its own commits' packs
(:func:`combine_packs`: their bytes copied, eight at a time, in levels) after each commit,
outside the session lock, so a long run keeps few packs whatever the maintenance does; the
detached maintenance merges the rest and packs loose objects (:func:`pack_loose`).
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterable
from pathlib import Path

from openprogram.store.session.safegit import run_git

MAX_PACKS = 20  # more packs than this and packing merges them (geometric repack)
# A pack this big is never merged again (git's gc.bigPackThreshold): what one maintenance
# rewrites stays bounded whatever the session's size.  Merging them all, a 20,000-turn
# session's maintenance rewrote ~60 MB, searching deltas across ~200,000 objects (~3 s
# on 2 cores, beside the writer); a big pack holds ~4,000 turns' objects, so 100,000 turns
# leave ~25 of them beside at most MAX_PACKS small ones.
BIG_PACK_BYTES = 16 << 20
# A writer merges its own commits' packs MERGE_FAN at a time, in levels (packs of 8, 64,
# 512 commits): at most 7 a level and one per 512 commits, which the maintenance merges
# (git's C, in its own process: a 4,096-commit merge here, ~45,000 objects, held the
# writer's GIL for tens of ms while its turns waited)
MERGE_FAN = 8
MERGE_LEVELS = 3  # (own packs of 1, 8 and 64 commits merged: the biggest a writer makes is 512)
PACK_TYPES = {b"commit": 1, b"tree": 2, b"blob": 3, b"tag": 4}
STRAY_INDEX_S = 3600.0  # an .idx without its .pack older than this: a writer died between


def write_loose(objects: str, kind: bytes, data: bytes) -> bytes:
    """Write one loose object into the ``objects`` folder; returns its binary sha.  (A
    background ``prune-packed`` may remove an empty fan-out folder between making it and
    the rename: retried.)"""
    header = b"%s %d\0" % (kind, len(data))
    digest = hashlib.sha1(header)
    digest.update(data)
    binsha, hexsha = digest.digest(), digest.hexdigest()
    target = f"{objects}/{hexsha[:2]}/{hexsha[2:]}"
    if os.path.exists(target):
        return binsha
    tmp = f"{objects}/tmp_obj_{os.getpid()}_{threading.get_ident()}_{os.urandom(3).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        os.write(fd, zlib.compress(header + data, 1))
    finally:
        os.close(fd)
    for attempt in range(20):
        try:
            os.rename(tmp, target)
            break
        except FileNotFoundError:
            if attempt == 19:
                os.unlink(tmp)
                raise
            os.makedirs(f"{objects}/{hexsha[:2]}", exist_ok=True)
    return binsha


def _pack_entry(kind: bytes, data: bytes) -> bytes:
    """One undeltified object of a pack: its type-and-size header, then ``zlib(data)``."""
    size = len(data)
    byte = (PACK_TYPES[kind] << 4) | (size & 0x0F)
    size >>= 4
    header = bytearray()
    while size:
        header.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    header.append(byte)
    return bytes(header) + zlib.compress(data, 1)


def pack_index(entries: list[tuple[bytes, int, int]], pack_sha: bytes) -> bytes:
    """The v2 ``.idx`` of a pack: ``entries`` are (binsha, crc32, offset) of its objects."""
    entries = sorted(entries)
    fanout = [0] * 256
    for binsha, _crc, _offset in entries:
        fanout[binsha[0]] += 1
    total = 0
    for i in range(256):
        total += fanout[i]
        fanout[i] = total
    large: list[int] = []
    offsets = []
    for _sha, _crc, offset in entries:
        if offset < 0x80000000:
            offsets.append(offset)
        else:  # past 2 GiB: an index into the table of 8-byte offsets
            offsets.append(0x80000000 | len(large))
            large.append(offset)
    body = b"".join(
        [
            b"\377tOc",
            struct.pack(">I", 2),
            struct.pack(">256I", *fanout),
            b"".join(e[0] for e in entries),
            struct.pack(f">{len(entries)}I", *(e[1] for e in entries)),
            struct.pack(f">{len(offsets)}I", *offsets),
            struct.pack(f">{len(large)}Q", *large),
            pack_sha,
        ]
    )
    return body + hashlib.sha1(body).digest()


def write_pack(objects: str, items: Iterable[tuple[bytes, bytes, bytes]]) -> str | None:
    """Write ``items`` ((binsha, kind, data) each) as one pack with its index into
    ``objects/pack``; returns the pack's name (``pack-<sha>``), None when there was nothing.

    The ``.idx`` is renamed into place first, then the ``.pack``: git uses a pack only once
    both exist, gitdb lists ``.pack`` files; the caller moves its ref after this returns,
    so what a ref names is always in a complete pack."""
    parts: list[bytes] = []
    entries: list[tuple[bytes, int, int]] = []
    offset = 12
    seen: set[bytes] = set()
    for binsha, kind, data in items:
        if binsha in seen:
            continue
        seen.add(binsha)
        entry = _pack_entry(kind, data)
        entries.append((binsha, zlib.crc32(entry), offset))
        parts.append(entry)
        offset += len(entry)
    return _install(objects, parts, entries)


def _install(objects: str, parts: list[bytes], entries: list[tuple[bytes, int, int]]) -> str | None:
    """Put the pack of the object entries ``parts`` (their (binsha, crc32, offset) in
    ``entries``) and its index in place, the index first (see :func:`write_pack`)."""
    if not entries:
        return None
    body = b"PACK" + struct.pack(">II", 2, len(entries)) + b"".join(parts)
    pack_sha = hashlib.sha1(body).digest()
    name = f"pack-{pack_sha.hex()}"
    folder = f"{objects}/pack"
    tag = f"{os.getpid()}_{threading.get_ident()}_{os.urandom(3).hex()}"
    done = []
    try:
        for suffix, data in ((".idx", pack_index(entries, pack_sha)), (".pack", body + pack_sha)):
            tmp = f"{folder}/tmp_{suffix[1:]}_{tag}"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            except FileNotFoundError:  # no pack folder yet (a repository made by hand)
                os.makedirs(folder, exist_ok=True)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            done.append(tmp)
            os.rename(tmp, f"{folder}/{name}{suffix}")
            done[-1] = ""
    finally:
        for tmp in done:
            if tmp:
                os.unlink(tmp)
    return name


def _read_own_pack(folder: str, name: str) -> tuple[list[bytes], tuple[int, ...], list[int], bytes]:
    """The object names, CRCs and offsets (in the index's order) and the entries (the
    bytes between header and trailer) of a pack :func:`write_pack` or :func:`combine_packs`
    made: undeltified, under 2 GiB, checked against its name and index.  Raises ``OSError``
    when it is gone (merged meanwhile) and ``ValueError`` when it is not such a pack."""
    with open(f"{folder}/{name}.idx", "rb") as f:
        idx = f.read()
    with open(f"{folder}/{name}.pack", "rb") as f:
        pack = f.read()
    if idx[:8] != b"\377tOc\0\0\0\2" or len(idx) < 8 + 1024 + 40:
        raise ValueError(f"{name}.idx: not a version 2 pack index")
    count = struct.unpack_from(">I", idx, 8 + 1020)[0]
    trailer = pack[-20:]
    if (
        len(idx) != 8 + 1024 + 28 * count + 40
        or pack[:12] != b"PACK" + struct.pack(">II", 2, count)
        or trailer.hex() != name[5:]
        or idx[-40:-20] != trailer
        or hashlib.sha1(pack[:-20]).digest() != trailer
    ):
        raise ValueError(f"{name}: not a pack this store wrote")
    base = 8 + 1024
    names = [idx[base + 20 * i : base + 20 * i + 20] for i in range(count)]
    crcs = struct.unpack_from(f">{count}I", idx, base + 20 * count)
    offsets = list(struct.unpack_from(f">{count}I", idx, base + 24 * count))
    end = len(pack) - 20
    for offset in offsets:  # every entry a whole object (types 1-4), none a delta (6, 7)
        if not 12 <= offset < end or not 1 <= (pack[offset] >> 4) & 7 <= 4:
            raise ValueError(f"{name}: a delta or an offset past 2 GiB (not merged here)")
    return names, crcs, offsets, pack[12:end]


def combine_packs(objects: str, names: list[str]) -> str | None:
    """Copy the objects of the small packs ``names`` (this process's own: see
    :meth:`Repository.merge_own_packs`) into one pack, then remove them (each ``.pack``
    before its ``.idx``); returns the new pack's name, None when nothing was merged.  No
    git process and no inflating: their entries are copied as they are (a commit's pack is
    undeltified), a pack's whole run of entries at once unless it holds an object an
    earlier one had.  One that is gone (a maintenance merged it) or holds deltas is left
    out; the new pack is complete before any is removed, so a reader always finds every
    object."""
    folder = f"{objects}/pack"
    parts: list[bytes] = []
    entries: list[tuple[bytes, int, int]] = []
    seen: set[bytes] = set()
    merged = []
    offset = 12
    for name in names:
        try:
            shas, crcs, offsets, body = _read_own_pack(folder, name)
        except (OSError, ValueError):
            continue
        merged.append(name)
        if seen.isdisjoint(shas):  # the usual case: the run copied whole, offsets shifted
            seen.update(shas)
            shift = offset - 12
            entries += zip(shas, crcs, [o + shift for o in offsets], strict=True)
            parts.append(body)
            offset += len(body)
            continue
        order = sorted(range(len(shas)), key=offsets.__getitem__)
        ends = [offsets[i] for i in order[1:]] + [len(body) + 12]
        for i, end in zip(order, ends, strict=True):  # entry by entry, the known left out
            if shas[i] not in seen:
                seen.add(shas[i])
                entries.append((shas[i], crcs[i], offset))
                parts.append(body[offsets[i] - 12 : end - 12])
                offset += end - offsets[i]
    if len(merged) < 2:
        return None
    made = _install(objects, parts, entries)
    for name in merged:
        for suffix in (".pack", ".idx"):
            try:
                os.unlink(f"{folder}/{name}{suffix}")
            except FileNotFoundError:
                pass
    return made


def remove_stray_indexes(git_dir: Path, older_than_s: float = STRAY_INDEX_S) -> int:
    """Delete ``.idx`` files whose ``.pack`` never arrived (a writer killed between the two
    renames of :func:`write_pack`); returns how many."""
    folder = git_dir / "objects" / "pack"
    try:
        names = set(os.listdir(folder))
    except FileNotFoundError:
        return 0
    removed = 0
    now = time.time()
    for name in names:
        if name.endswith(".idx") and name[:-4] + ".pack" not in names:
            try:
                if now - os.lstat(folder / name).st_mtime > older_than_s:
                    os.unlink(folder / name)
                    removed += 1
            except FileNotFoundError:
                pass
    return removed


def loose_objects(git_dir: Path) -> list[str]:
    """The hex names of the loose objects."""
    names = []
    objects = git_dir / "objects"
    for fan in os.scandir(objects):
        if len(fan.name) == 2 and fan.is_dir():
            names += [fan.name + o.name for o in os.scandir(fan.path) if len(o.name) == 38]
    return names


def rolled_up(counts: list[int], factor: int = 2) -> int:
    """How many of the packs (object ``counts``, smallest first) a geometric repack merges
    into one: the rest then grow by ``factor`` or more, each at least ``factor`` times all
    those before it together (the split ``git repack --geometric`` makes)."""
    split = len(counts) - 1
    while split > 0 and counts[split] >= factor * counts[split - 1]:
        split -= 1
    if split == 0:
        return 0
    total = sum(counts[:split])
    while split < len(counts) and counts[split] < factor * total:
        total += counts[split]
        split += 1
    return split if split > 1 else 0


def _pack_count(idx: Path) -> int:
    """The object count of a version 2 pack index (its fan-out table's last entry)."""
    with idx.open("rb") as f:
        head = f.read(8 + 256 * 4)
    if head[:8] != b"\377tOc\0\0\0\2" or len(head) != 8 + 256 * 4:
        raise ValueError(f"{idx.name}: not a version 2 pack index")
    return int(struct.unpack(">I", head[-4:])[0])


def _pack_names(idx: Path, count: int) -> bytes:
    """The binary names of the ``count`` objects of a version 2 pack index."""
    with idx.open("rb") as f:
        f.seek(8 + 256 * 4)
        names = f.read(20 * count)
    if len(names) != 20 * count:
        raise OSError(f"{idx.name}: shorter than its {count} names")
    return names


def merge_small_packs(git_dir: Path, worktree: Path) -> int:
    """Past ``MAX_PACKS`` packs under ``BIG_PACK_BYTES``, merge the small ones
    geometrically (:func:`rolled_up`) by
    naming their objects to ``git pack-objects`` (their deltas reused): no walk of the
    history, which ``git repack --geometric`` makes (~0.36 s of 0.5 at 20,000 turns, for
    50 turns' packs).  The merged packs are removed after the new one is in place, each
    ``.pack`` before its ``.idx`` (git finds packs by their index, gitdb by the pack).
    Returns how many packs were merged."""
    folder = git_dir / "objects" / "pack"
    packs = []
    for name in os.listdir(folder):
        stem = name[:-5]
        if name.endswith(".pack") and not os.path.lexists(folder / f"{stem}.keep"):
            try:
                if os.lstat(folder / name).st_size >= BIG_PACK_BYTES:
                    continue  # kept as it is (see BIG_PACK_BYTES)
                packs.append((_pack_count(folder / f"{stem}.idx"), stem))
            except (OSError, ValueError):
                continue  # being written, or not ours to merge
    if len(packs) <= MAX_PACKS:
        return 0
    packs.sort()
    merged = packs[: rolled_up([count for count, _stem in packs])]
    if not merged:
        return 0
    try:  # only the merged packs' names are read (not the big packs' megabytes)
        names = b"".join(_pack_names(folder / f"{stem}.idx", n) for n, stem in merged)
    except OSError:
        return 0
    stdin = b"".join(names[i : i + 20].hex().encode() + b"\n" for i in range(0, len(names), 20))
    made = run_git(worktree, "pack-objects", "-q", str(folder / "pack"), input=stdin, check=False)
    if made.returncode != 0:
        return 0  # nothing removed: the next maintenance tries again
    for _count, stem in merged:
        for suffix in (".pack", ".rev", ".bitmap", ".idx"):
            try:
                os.unlink(folder / f"{stem}{suffix}")
            except FileNotFoundError:
                pass
    return len(merged)


def pack_loose(worktree: Path) -> int:
    """Pack the loose objects (by name: O(new objects), no history walk) and delete the
    packed loose copies; past ``MAX_PACKS`` packs, merge them geometrically (reusing their
    deltas, again without a walk: :func:`merge_small_packs`).  Returns how many objects
    were packed.  Concurrent commits are safe: only loose objects that are in a pack are
    deleted, only packs listed before the merge are merged."""
    git_dir = worktree / ".git"
    remove_stray_indexes(git_dir)
    names = loose_objects(git_dir)
    if names:
        stdin = ("\n".join(names) + "\n").encode()
        run_git(worktree, "pack-objects", "-q", str(git_dir / "objects" / "pack" / "pack"),
                input=stdin)  # fmt: skip
        run_git(worktree, "prune-packed")
    merge_small_packs(git_dir, worktree)
    return len(names)
