"""What may arrive, counted before git unpacks it: caps on a pack stream and bundle headers.

Git checks objects (``index-pack --strict``) but not how much they add up to: a 0.2 MB
bundle can hold a delta that inflates to gigabytes, or a 300 MB commit message, and git
would inflate it (in memory, for a delta) before anything of ours looked.  So a pack that
arrives in a bundle is read here first, object by object, as it streams to git: each
object's header says the size it inflates to (a delta's own header, its result's), and the
totals are capped (:class:`Caps`) before that size is ever produced.  Pure logic on a byte
stream; :mod:`sync` runs git.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO, overload

from openprogram.store.session.syncrules import SyncError

_COMMIT, _TREE, _BLOB, _TAG, _OFS_DELTA, _REF_DELTA = 1, 2, 3, 4, 6, 7
_KIND = {_COMMIT: "commit", _TREE: "tree", _BLOB: "blob", _TAG: "tag"}
_CHUNK = 1 << 16


class PackFile:
    """A pack on disk read by offset (``pread`` of a 64 KiB window), as ``bytes`` is
    indexed and sliced: its headers are read where they are, never the whole file, and
    nothing is memory-mapped (a file shrinking under a map would end the process)."""

    WINDOW = 64 << 10

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._size = os.fstat(fd).st_size
        self._start = 0
        self._window = b""

    def __len__(self) -> int:
        return self._size

    def _read(self, start: int, stop: int) -> bytes:
        start, stop = max(0, start), min(stop, self._size)
        if stop <= start:
            return b""
        if self._start <= start and stop <= self._start + len(self._window):
            return self._window[start - self._start : stop - self._start]
        if stop - start > self.WINDOW:
            return os.pread(self._fd, stop - start, start)
        self._start, self._window = start, os.pread(self._fd, self.WINDOW, start)
        return self._window[: stop - start]

    @overload
    def __getitem__(self, key: int) -> int: ...
    @overload
    def __getitem__(self, key: slice) -> bytes: ...
    def __getitem__(self, key: int | slice) -> int | bytes:
        if isinstance(key, slice):
            return self._read(key.start or 0, self._size if key.stop is None else key.stop)
        if not 0 <= key < self._size:
            raise IndexError(key)
        return self._read(key, key + 1)[0]


Buffer = bytes | PackFile  # a pack read whole, or by offset from its file
_NAMES = {kind: name.encode() for kind, name in _KIND.items()}
Header = tuple[int, int, int, int]  # see _object_header


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, "")) or default
    except ValueError:
        return default


@dataclass(frozen=True)
class Caps:
    """The most a bundle, an embedded bundle or a fetch may bring in total.

    ``total_bytes``: the sum of the inflated sizes of its objects; ``objects``: how many;
    ``commit_bytes``: one commit or tag object.  A session of 100,000 turns is ~230 MB in
    ~1.1 M objects, so the defaults leave room for any real session and refuse a bomb.
    ``OPENPROGRAM_INCOMING_MAX_BYTES`` / ``OPENPROGRAM_INCOMING_MAX_OBJECTS`` raise them.
    """

    total_bytes: int = 1 << 30
    objects: int = 4_000_000
    commit_bytes: int = 1 << 20

    @classmethod
    def from_env(cls) -> Caps:
        return cls(
            total_bytes=_env_int("OPENPROGRAM_INCOMING_MAX_BYTES", cls.total_bytes),
            objects=_env_int("OPENPROGRAM_INCOMING_MAX_OBJECTS", cls.objects),
        )

    def check_total(self, total: int, count: int) -> None:
        if count > self.objects:
            raise SyncError(f"refused: it holds more than {self.objects} git objects")
        if total > self.total_bytes:
            raise SyncError(
                f"refused: its objects inflate to more than {_mib(self.total_bytes)} "
                "(OPENPROGRAM_INCOMING_MAX_BYTES raises the cap)"
            )

    def check_object(self, kind: str, size: int) -> None:
        if kind in ("commit", "tag") and size > self.commit_bytes:
            raise SyncError(f"refused: a {kind} object of {size} bytes (limit {self.commit_bytes})")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


# -- bundles ---------------------------------------------------------------------------------
BUNDLE_SIGNATURES = (b"# v2 git bundle\n", b"# v3 git bundle\n")
MAX_HEADER = 1 << 20


@dataclass(frozen=True)
class BundleHeader:
    refs: list[tuple[str, str]]  # (sha, ref name)
    prerequisites: list[str]
    pack_offset: int  # where the pack data starts in the file


def read_bundle_header(stream: BinaryIO) -> BundleHeader:
    """Parse a v2/v3 bundle's header (signature, capabilities, prerequisites, refs, blank
    line), leaving ``stream`` at the pack."""
    first = stream.readline(64)
    if first not in BUNDLE_SIGNATURES:
        raise SyncError("refused: not a git bundle")
    refs: list[tuple[str, str]] = []
    prerequisites: list[str] = []
    used = len(first)
    while True:
        line = stream.readline(MAX_HEADER)
        used += len(line)
        if not line.endswith(b"\n") or used > MAX_HEADER:
            raise SyncError("refused: a malformed git bundle header")
        text = line[:-1].decode("ascii", "replace")
        if not text:
            return BundleHeader(refs, prerequisites, used)
        if text.startswith("@"):  # v3 capability: only sha1 is supported here
            if text.startswith("@object-format=") and text != "@object-format=sha1":
                raise SyncError(f"refused: a bundle of {text[1:]} objects")
            if text.startswith("@filter="):
                raise SyncError("refused: a partial (filtered) bundle")
            continue
        if text.startswith("-"):
            prerequisites.append(text[1:41])
            continue
        sha, _, name = text.partition(" ")
        if len(sha) != 40 or not name:
            raise SyncError("refused: a malformed git bundle header")
        refs.append((sha, name))


# -- packs ------------------------------------------------------------------------------------
class _Reader:
    """Bytes of ``stream`` in order; each byte read from the stream goes to ``sink`` once
    (the ``git index-pack`` being fed), whatever the scanner later pushes back.  A buffer
    and a position in it (taking a byte does not copy the rest)."""

    def __init__(self, stream: BinaryIO, sink: Callable[[bytes], object]) -> None:
        self.stream, self.sink = stream, sink
        self.buffer = b""
        self.pos = 0  # of the next unread byte in ``buffer``
        self.offset = 0  # of that byte in the pack

    def _fill(self) -> bool:
        data = self.stream.read(_CHUNK)
        if not data:
            return False
        self.sink(data)
        self.buffer = self.buffer[self.pos :] + data
        self.pos = 0
        return True

    def take(self, n: int) -> bytes:
        while len(self.buffer) - self.pos < n:
            if not self._fill():
                raise SyncError("refused: a truncated git pack")
        out = self.buffer[self.pos : self.pos + n]
        self.pos += n
        self.offset += n
        return out

    def ensure(self, n: int) -> None:
        """At least ``n`` bytes buffered past the position, or all that is left."""
        while len(self.buffer) - self.pos < n and self._fill():
            pass

    def drain(self) -> None:
        self.buffer, self.pos = b"", 0
        while self._fill():
            self.buffer, self.pos = b"", 0


def _varint_le(data: bytes, pos: int) -> tuple[int, int]:
    """A delta header's size (7 bits a byte, least significant first)."""
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise SyncError("refused: a malformed delta in the git pack")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        shift += 7
        pos += 1
        if not byte & 0x80:
            return value, pos


@dataclass
class PackScan:
    """Totals of a pack, as far as it was read, and its objects' headers (offset -> header
    as :func:`_object_header` reads it, a delta's size its result's: what
    :func:`pack_objects` needs of the pack git then writes)."""

    objects: int = 0
    inflated: int = 0
    headers: dict[int, Header] = field(default_factory=dict)


def scan_pack(stream: BinaryIO, sink: Callable[[bytes], object], caps: Caps) -> PackScan:
    """Read the pack on ``stream`` object by object, passing every byte to ``sink``, and
    raise :class:`SyncError` as soon as the declared sizes pass ``caps`` — before the
    object that would pass them is inflated (each one is inflated here only to find where
    the next begins, never kept).  The trailing checksum is left to git."""
    reader = _Reader(stream, sink)
    head = reader.take(12)
    if head[:4] != b"PACK" or int.from_bytes(head[4:8], "big") not in (2, 3):
        raise SyncError("refused: not a git pack")
    count = int.from_bytes(head[8:12], "big")
    caps.check_total(0, count)
    scan = PackScan(objects=count)
    kinds: dict[int, int] = {}  # offset -> type, for ofs-deltas (result type = base type)

    def declare(n: int) -> None:
        caps.check_total(scan.inflated + n, count)

    for _ in range(count):
        start = reader.offset
        reader.ensure(40)  # an object header and an ofs-delta's offset are shorter
        try:
            kind, size, pos, back = _object_header(reader.buffer, reader.pos)
        except IndexError:
            raise SyncError("refused: a truncated git pack") from None
        base_kind: int | None = kind
        if kind == _OFS_DELTA:
            base_kind = kinds.get(start - back)
        elif kind == _REF_DELTA:
            base_kind = None  # a base in the pack or already here: its type is unknown
        reader.offset += pos - reader.pos
        reader.pos = pos
        data_at = reader.offset
        result = _inflate(reader, size, delta=kind in (_OFS_DELTA, _REF_DELTA), declare=declare)
        # a delta whose base's type is known recorded as an object of that type
        scan.headers[start] = (kind if base_kind is None else base_kind, result, data_at, back)
        if base_kind is not None:
            kinds[start] = base_kind
            caps.check_object(_KIND.get(base_kind, "blob"), result)
        scan.inflated += result
        caps.check_total(scan.inflated, count)
    reader.drain()
    return scan


def _object_header(buf: Buffer, pos: int) -> Header:
    """The header of the pack object at ``pos``: its type, its size (a delta's: the
    delta's own), where its data begins, and how far back an ofs-delta's base begins (0
    for any other; a ref-delta's base is named by the 20 bytes before its data).
    IndexError when ``buf`` ends first."""
    byte = buf[pos]
    kind, size, shift = (byte >> 4) & 7, byte & 15, 4
    pos += 1
    while byte & 0x80:
        byte = buf[pos]
        pos += 1
        size |= (byte & 0x7F) << shift
        shift += 7
        if shift > 70:
            raise SyncError("refused: a malformed object header in the git pack")
    back = 0
    if kind == _OFS_DELTA:
        byte = buf[pos]
        pos += 1
        back = byte & 0x7F
        while byte & 0x80:
            byte = buf[pos]
            pos += 1
            back = ((back + 1) << 7) | (byte & 0x7F)
    elif kind == _REF_DELTA:
        if pos + 20 > len(buf):
            raise IndexError
        pos += 20
    elif kind not in _KIND:
        raise SyncError(f"refused: an object of unknown type {kind} in the git pack")
    return kind, size, pos, back


def pack_objects(
    index: bytes, pack: Buffer, scanned: dict[int, Header] | None = None
) -> dict[bytes, tuple[bytes, int]] | None:
    """The type and inflated size of each object of a pack git wrote and checked (``index``:
    its version-2 ``.idx``; ``pack``: its data), by binary sha, from the object headers —
    a delta's size from the first bytes of its data, its type from its base's — without
    inflating an object: what ``git cat-file --batch-check`` would say, without running it.
    ``scanned``: the headers :func:`scan_pack` read as the pack streamed in (offset ->
    header, a delta's size its result's, its type its base's when that was known; what
    ``--fix-thin`` appended is added to it).  None when something is not as git writes it
    (the caller asks git then)."""
    try:
        count = int.from_bytes(index[8 + 255 * 4 : 8 + 256 * 4], "big")
        names = 8 + 256 * 4
        table = names + 24 * count  # after the names and their CRCs
        large = table + 4 * count
        if index[:8] != b"\377tOc\x00\x00\x00\x02" or len(index) < large + 40:
            return None
        offsets = list(struct.unpack(f">{count}I", index[table:large]))
        for i, offset in enumerate(offsets):
            if offset & 0x80000000:  # past 2 GiB: in the table of 8-byte offsets
                at = large + 8 * (offset & 0x7FFFFFFF)
                offsets[i] = int.from_bytes(index[at : at + 8], "big")
        shas = range(names, names + 20 * count, 20)
        where = {index[n : n + 20]: o for n, o in zip(shas, offsets, strict=True)}
        if scanned is not None and not set(scanned) <= set(offsets):
            return None  # not the pack that was scanned
        heads = scanned if scanned is not None else {}
        for offset in offsets:  # all of them, or what --fix-thin added to a scanned pack
            if offset not in heads:
                heads[offset] = _object_header(pack, offset)
        kinds: dict[int, int] = {}
        out: dict[bytes, tuple[bytes, int]] = {}
        for sha, offset in where.items():
            kind, size, pos, _back = heads[offset]
            if kind in _NAMES:
                out[sha] = (_NAMES[kind], size)
                continue
            base = _base_kind(offset, heads, where, kinds, pack)
            made = size if scanned is not None and offset in scanned else _delta_size(pack, pos)
            if base is None or made is None:
                return None
            out[sha] = (_NAMES[base], made)
        return out
    except (IndexError, ValueError, SyncError, zlib.error, struct.error):
        return None


def _base_kind(
    offset: int,
    heads: dict[int, Header],
    where: dict[bytes, int],
    kinds: dict[int, int],
    pack: Buffer,
) -> int | None:
    """The type of the object at ``offset``: its own, or, for a delta, its base's (the
    chain followed through the pack; ``kinds`` remembers what was found)."""
    chain: list[int] = []
    for _ in range(len(heads) + 1):  # a chain longer than the pack: a loop
        if offset in kinds:
            kind = kinds[offset]
            break
        chain.append(offset)
        kind, _size, pos, back = heads[offset]
        if kind == _OFS_DELTA:
            offset -= back
        elif kind == _REF_DELTA:
            offset = where.get(bytes(pack[pos - 20 : pos]), -1)
        else:
            break
        if offset not in heads:
            return None  # a base outside the pack
    else:
        return None
    for done in chain:
        kinds[done] = kind
    return kind


def _delta_size(pack: Buffer, pos: int) -> int | None:
    """The size of the object the delta whose data begins at ``pos`` makes (its header)."""
    for step in (256, 4096, 1 << 20):
        inflater = zlib.decompressobj()
        head = inflater.decompress(pack[pos : pos + step], 32)
        found = _delta_result(head)
        if found is not None or len(head) >= 32 or inflater.eof or pos + step >= len(pack):
            return found
    return None


def _inflate(reader: _Reader, size: int, *, delta: bool, declare: Callable[[int], None]) -> int:
    """Inflate one object's data (to find its end, output dropped); its size once inflated
    (for a delta, the size of the object it makes, read from the delta's header).

    zlib is fed a little more than the object can take compressed (its size, plus
    deflate's overhead), not the rest of the buffer: what it does not use is copied into
    ``unused_data``, and that copy, per object, was the scan's main cost."""
    declare(size)
    inflater = zlib.decompressobj()
    produced = 0
    result = None if delta else size
    head = b""  # a delta's first bytes: its base's size, then its result's
    want = size + (size >> 10) + 64
    while not inflater.eof:
        if reader.pos >= len(reader.buffer) and not reader._fill():
            raise SyncError("refused: a truncated git pack")
        start = reader.pos
        piece = reader.buffer[start : start + want]
        data = piece
        while data and not inflater.eof:
            out = inflater.decompress(data, _CHUNK)
            data = inflater.unconsumed_tail
            produced += len(out)
            if produced > size:
                raise SyncError("refused: an object in the git pack is longer than it says")
            if result is None:
                head += out[:32]
                result = _delta_result(head)
                if result is not None:
                    declare(result)
        used = len(piece) - (len(inflater.unused_data) if inflater.eof else 0)
        reader.pos += used
        reader.offset += used
        want = max(want, _CHUNK)
    if produced != size or result is None:
        raise SyncError("refused: an object in the git pack is shorter than it says")
    return result


def _delta_result(head: bytes) -> int | None:
    """The result size a delta's header declares (None: not enough bytes yet)."""
    try:
        _, pos = _varint_le(head, 0)
        return _varint_le(head, pos)[0]
    except SyncError:
        if len(head) >= 20:
            raise
        return None
