"""Sharing a session through git: bundles holding one ref, ``refs/openprogram/sessions/<id>``,
push and pull of that ref.  What arrives is received into a quarantine under the sessions
folder (borrowing the session's objects), checked, then joined (:mod:`syncmerge`); a
refusal is one line and leaves the session untouched (decision 0063).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from openprogram.errors import SessionError, StoreError, SyncError
from openprogram.store.session import incoming
from openprogram.store.session.files import validate_session_id
from openprogram.store.session.history import read_ref
from openprogram.store.session.incoming import Caps, index_pack, read_bundle_header
from openprogram.store.session.index import cat_file
from openprogram.store.session.remotes import (
    git_fail,
    note_on_remote,
    redact_url,
    refuse_replay_push,
    replay_id,
    url_scheme,
)
from openprogram.store.session.safegit import (
    INCOMING,
    QUARANTINE_PREFIX,
    REMOTE_SIDE,
    git,
)
from openprogram.store.session.syncmerge import Received, main_commit, receive
from openprogram.store.session.syncrules import (
    NAMESPACE,
    HistoryCheck,
    check_meta,
    check_refs,
    session_ref,
)

if TYPE_CHECKING:
    from openprogram.store.session.store import SessionStore

LOCAL = "refs/openprogram/local"
NO_REFS = "true"  # core.alternateRefsCommand: LOCAL names the borrowed refs already
_HEX = re.compile(r"[0-9a-f]{40}")


# -- the quarantine ------------------------------------------------------------------------
@contextmanager
def _quarantine(store: SessionStore, session_id: str | None = None) -> Iterator[Path]:
    """An empty repository under the sessions folder (``session_id``'s spare), put away
    after; a file that cannot be written is one :class:`StoreError` line."""
    path = store.root / f"{QUARANTINE_PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
    local = store.session_path(session_id) if session_id is not None else None
    try:
        try:
            store.root.mkdir(parents=True, exist_ok=True)
            store.remove_debris()  # quarantines a killed pull or import left behind
            incoming.make(path, local)
            yield path
        finally:
            incoming.put_away(path, local)
    except OSError as exc:
        if isinstance(exc, SessionError):  # one line already (StoreError, RefusedFile…)
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        text = f"{exc.strerror or exc}{where}"
        raise StoreError(f"session {session_id or '?'}: receiving failed: {text}") from None


def _borrow(quarantine: Path, local: Path) -> str | None:
    """The quarantine borrows the session's objects and names its ``main`` (returned)."""
    tip = main_commit(local)
    if tip is None:
        return None
    alternates = quarantine / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{local / '.git' / 'objects'}\n")
    ref = quarantine / ".git" / LOCAL  # a fresh repository of ours: the ref written as git would
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(f"{tip}\n")
    return tip


def _check_history(repo: Path, tip: str, session_id: str, caps: Caps) -> None:
    """What arrived (not borrowed) is under ``caps`` and has the session's layout, and
    ``tip`` is a commit whose ``meta.json`` names ``session_id``: ``cat-file --batch-check``,
    then ``--batch`` of its commits, trees and ``meta.json``."""
    kinds: dict[bytes, bytes] = {}
    sizes: dict[bytes, int] = {}
    fmt = "--batch-check=%(objectname) %(objecttype) %(objectsize)"
    for line in git(repo, "cat-file", fmt, input=_own_objects(repo)).stdout.splitlines():
        sha, kind, size = line.split(b" ")
        binsha = bytes.fromhex(sha.decode())
        kinds[binsha], sizes[binsha] = kind, int(size)
    binsha_tip = bytes.fromhex(tip) if _HEX.fullmatch(tip) else b""
    if kinds.get(binsha_tip, b"commit" if binsha_tip else b"") != b"commit":
        raise SyncError(f"refused: its ref names no commit ({tip[:12]} is not one)")
    bad = {k.decode() for k in kinds.values()} - {"commit", "tree", "blob"}
    if bad:
        raise SyncError(f"refused: it holds git objects of type {', '.join(sorted(bad))}")
    caps.check_total(sum(sizes.values()), len(sizes))
    for sha, kind in kinds.items():
        caps.check_object(kind.decode(), sizes[sha])
    wanted = [s for s, k in kinds.items() if k != b"blob"]
    names = [s.hex().encode() for s in wanted] + [f"{tip}:meta.json".encode()]
    borrowed = binsha_tip not in kinds  # a bundle's tip may be neither: refused then
    *found, meta = cat_file(repo, [tip.encode()] * borrowed + names, sanitize=False)
    if borrowed:
        got_tip = found.pop(0)
        if got_tip is None or got_tip[0] != b"commit":
            raise SyncError(f"refused: its ref names no commit ({tip[:12]} is not one)")
    trees: dict[bytes, bytes] = {}
    roots: list[bytes] = []
    for sha, got in zip(wanted, found, strict=True):
        if got is None:
            raise SyncError(f"refused: git cannot read the object {sha.hex()} that arrived")
        kind, body = got
        if kind == b"tree":
            trees[sha] = body
        elif kind == b"commit":  # fsck'ed by git: it begins "tree <sha>\n"
            roots.append(bytes.fromhex(body[5:45].decode()))
    checker = HistoryCheck(trees, sizes)
    for root in roots:
        checker.root(root)
    if meta is None or meta[0] != b"blob":
        raise SyncError("refused: it has no meta.json (not a session)")
    check_meta(meta[1], session_id)


def _own_objects(repo: Path) -> bytes:
    """The names (hex lines) of the objects in ``repo`` itself, not borrowed: what arrived."""
    objects = repo / ".git" / "objects"
    names: list[bytes] = []
    for idx in sorted((objects / "pack").glob("*.idx")):
        data = idx.read_bytes()
        count = int.from_bytes(data[8 + 255 * 4 : 8 + 256 * 4], "big")
        table = data[8 + 256 * 4 : 8 + 256 * 4 + 20 * count]
        names.extend(table[i : i + 20].hex().encode() for i in range(0, len(table), 20))
    for fan in sorted(objects.glob("[0-9a-f][0-9a-f]")):
        names.extend(f"{fan.name}{obj.name}".encode() for obj in fan.iterdir())
    return b"".join(n + b"\n" for n in names)


# -- bundles ---------------------------------------------------------------------------------
def export_bundle(store: SessionStore, session_id: str, out: str | os.PathLike[str]) -> Path:
    """Write session ``session_id`` as a git bundle (its whole history, one ref)."""
    session = store.open(session_id)
    target = Path(out).expanduser().resolve()
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    ref = session_ref(session_id)
    with session.lock:
        tip = main_commit(session.path)
        if tip is None:
            raise SyncError(f"session {session_id} has no commit yet")
        git(session.path, "update-ref", ref, tip)
        try:
            result = git(session.path, "bundle", "create", "-q", str(tmp), ref, check=False)
        finally:
            git(session.path, "update-ref", "-d", ref, check=False)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise git_fail("export failed", result)
    os.replace(tmp, target)
    return target


def import_bundle(
    store: SessionStore,
    bundle: str | os.PathLike[str],
    as_id: str | None = None,
    *,
    expect_id: str | None = None,
    join: bool = False,
) -> Received:
    """Import a bundle of :func:`export_bundle` (into an existing session: like a pull);
    ``expect_id``: the session it must carry; under ``as_id``, an unrelated history there
    is refused unless ``join``."""
    path = Path(bundle).expanduser().resolve()
    if not path.is_file():
        raise SyncError(f"no bundle {path}")
    if as_id is not None:
        validate_session_id(as_id)
    caps = Caps.from_env()
    with path.open("rb") as stream:
        try:
            header = read_bundle_header(stream)
        except SyncError as exc:
            raise SyncError(f"{path.name}: {exc} (not a valid git bundle)") from None
        refs = [name for _, name in header.refs]
        named = [r[len(NAMESPACE) :] for r in refs if r.startswith(NAMESPACE)]
        if len(named) != 1:
            raise SyncError(
                f"refused {path.name}: it must carry exactly one {NAMESPACE}<id> ref "
                f"(found {', '.join(refs[:3]) or 'none'})"
            )
        bundled = validate_session_id(named[0])
        if expect_id is not None and bundled != expect_id:
            raise SyncError(
                f"refused: the embedded part names session {expect_id} but its bundle "
                f"carries session {bundled}; nothing imported"
            )
        check_refs(refs, bundled)
        target = as_id or bundled
        with _quarantine(store, target) as quarantine:
            local = store.session_path(target)
            joining = (local / ".git").is_dir()
            if joining:
                _borrow(quarantine, local)
            if header.prerequisites:  # commits it builds on: this session must have them
                verify = git(quarantine, "bundle", "verify", str(path), check=False)
                if verify.returncode != 0:
                    raise git_fail(f"refused {path.name}: not a valid git bundle", verify)
            try:
                index_pack(quarantine, stream, caps)
            except SyncError as exc:
                raise SyncError(f"{path.name}: {exc}") from None
            tip = header.refs[0][0]
            _check_history(quarantine, tip, bundled, caps)
            unrelated_ok = join or target == bundled  # one id begun twice: joined as a pull
            return receive(store, quarantine, target, tip, join_unrelated=unrelated_ok)


# -- remotes ---------------------------------------------------------------------------------
def push(
    store: SessionStore, session_id: str, url: str, protocols: str, *, with_replays: bool = False
) -> str:
    """Send the session's ``main`` to its ref at ``url`` (a replay only ``with_replays``)."""
    session = store.open(session_id)
    refuse_replay_push(session_id, session.meta, with_replays)
    ref = session_ref(session_id)
    with session.lock:
        tip = main_commit(session.path)
    if tip is None:
        raise SyncError(f"session {session_id} has no commit yet")
    local = url_scheme(url) == "file"
    local_side = [f"--receive-pack={REMOTE_SIDE} receive-pack"] if local else []
    result = git(
        session.path, "push", "--porcelain", "--no-verify", *local_side, "--", url,
        f"{tip}:{ref}", check=False, network=protocols,
    )  # fmt: skip
    text = result.stdout.decode(errors="replace") + result.stderr.decode(errors="replace")
    if result.returncode != 0:
        if "[rejected]" in text or "non-fast-forward" in text or "fetch first" in text:
            raise SyncError(
                f"{redact_url(url)} has turns of session {session_id} that this copy lacks: "
                f"pull first (openprogram sessions pull {session_id}), then push"
            )
        raise git_fail(f"push to {redact_url(url)} failed", result, url)
    note_on_remote(session.path, url, tip)  # what `sessions delete` would not lose
    up_to_date = "[up to date]" in text
    done = "already at" if up_to_date else "pushed to"
    return f"session {session_id} {done} {redact_url(url)} ({ref})"


def pull(store: SessionStore, session_id: str, url: str, protocols: str) -> Received:
    """Fetch the session's ref (only that) from ``url`` into a quarantine and join it."""
    ref = session_ref(session_id)
    local = store.session_path(session_id)
    with _quarantine(store, session_id) as quarantine:
        if (local / ".git").is_dir():
            _borrow(quarantine, local)  # a fetch then brings only what is new
        local_side = (
            [f"--upload-pack={REMOTE_SIDE} upload-pack"] if url_scheme(url) == "file" else []
        )
        fetched = git(  # a pack kept whatever its size (loose objects are a file each)
            quarantine, "-c", "fetch.unpackLimit=1", "-c", f"core.alternateRefsCommand={NO_REFS}",
            "fetch", "--no-tags", "--no-write-fetch-head",
            *local_side, "--", url, f"+{ref}:{INCOMING}", check=False, network=protocols,
        )  # fmt: skip
        if fetched.returncode != 0:
            text = fetched.stderr.decode(errors="replace")
            if "couldn't find remote ref" in text:
                raise SyncError(f"{redact_url(url)} has no session {session_id} ({ref})")
            raise git_fail(f"fetching {ref} from {redact_url(url)} failed", fetched, url)
        found = read_ref(quarantine / ".git", INCOMING)
        if found is None:
            raise SyncError(f"fetching {ref} from {redact_url(url)} brought no commit")
        _check_history(quarantine, found.hex(), session_id, Caps.from_env())
        got = receive(store, quarantine, session_id, found.hex())
    note_on_remote(local, url, found.hex())  # the remote holds what arrived
    return got


# -- replays stay home (see remotes) ----------------------------------------------------------
def fork_for_replay(store: SessionStore, source_id: str) -> str:
    """A new local session holding ``source_id``'s history (through the checked bundle
    path) for a replay's turns; returns its id."""
    new_id = replay_id(source_id)
    with tempfile.TemporaryDirectory(prefix="openprogram-replay-") as folder:
        bundle = export_bundle(store, source_id, Path(folder) / "source.bundle")
        import_bundle(store, bundle, as_id=new_id)
    return new_id
