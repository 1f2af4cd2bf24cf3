"""Sharing a session through git: bundles holding one ref, ``refs/openprogram/sessions/<id>``,
push and pull of that ref.  What arrives is received into a quarantine under the sessions
folder (borrowing the session's objects), checked (:mod:`incoming`), then joined: nothing,
a fast-forward, or a merge commit whose tree is the union of both lines; a refusal is one
line and leaves the session untouched (decision 0063).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from openprogram.errors import CorruptedFile, SessionError, StoreError, SyncError
from openprogram.store.session import incoming, remotes
from openprogram.store.session.files import (
    MAX_FILE_BYTES,
    atomic_write,
    loads,
    strict_dumps,
    validate_session_id,
)
from openprogram.store.session.history import (
    MAIN_REF,
    TREE_MODE,
    Repository,
    TreeEntries,
    commit_data,
    commit_tree,
    read_ref,
)
from openprogram.store.session.incoming import NODE_NAME, Caps, check_history, index_pack
from openprogram.store.session.queries import Line, other_lines, walk
from openprogram.store.session.records import current_author, parsed
from openprogram.store.session.safegit import (
    INCOMING,
    QUARANTINE_PREFIX,
    REMOTE_SIDE,
    git,
    git_dir_of,
)

if TYPE_CHECKING:
    from openprogram.store.session.queries import Links
    from openprogram.store.session.store import Session, SessionStore

NAMESPACE = "refs/openprogram/sessions/"
LOCAL = "refs/openprogram/local"
NO_REFS = "true"  # core.alternateRefsCommand: LOCAL names the borrowed refs already
ROOT_DIR = "history/0000/000000"  # the root node's turn folder, in every session


def session_ref(session_id: str) -> str:
    """Where a session lives in a shared repository: its own ref, never a branch."""
    return NAMESPACE + validate_session_id(session_id)


@dataclass
class Received:
    """What a pull or import did."""

    session_id: str
    status: str  # "new" | "up to date" | "fast-forward" | "merged" | "joined"
    new_turns: int
    lines: list[Line]

    def describe(self) -> str:
        text = f"session {self.session_id}: {self.status}"
        if self.status == "joined":
            text += (
                " (this copy had begun it before pulling: the arrived history is its start, "
                "the turns made here a branch from its root, nothing lost)"
            )
        if self.new_turns:
            text += f", {self.new_turns} turn(s) arrived"
        for line in self.lines:
            text += f"; another line ends at {line.tip} ({line.turns} turn(s) of its own)"
        return text


def main_commit(repo: Path) -> str | None:
    """The commit a session's ``main`` names (no git process)."""
    found = read_ref(git_dir_of(repo), MAIN_REF)
    return found.hex() if found is not None else None


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
            if local and (local / ".git").is_dir() and (tip := main_commit(local)):
                alternates = path / ".git" / "objects" / "info" / "alternates"
                alternates.write_text(f"{local / '.git' / 'objects'}\n")  # borrowed: a fetch
                (path / ".git" / LOCAL).write_text(f"{tip}\n")  # brings only what is new
            yield path
        finally:
            incoming.put_away(path, local)
    except OSError as exc:
        if isinstance(exc, SessionError):  # one line already (StoreError, RefusedFile…)
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        text = f"{exc.strerror or exc}{where}"
        raise StoreError(f"session {session_id or '?'}: receiving failed: {text}") from None


# -- bundles ---------------------------------------------------------------------------------
def export_bundle(store: SessionStore, session_id: str, out: str | os.PathLike[str]) -> Path:
    """Write session ``session_id`` as a git bundle (its whole history, one ref): ``out`` a
    file (replaced only if a bundle already) or a folder (``<id>.bundle`` in it)."""
    session = store.open(session_id)
    target = Path(out).expanduser().resolve()
    if target.is_dir():
        target = target / f"{session_id}.bundle"
    if target.exists() and not incoming.holds_bundle(target):
        raise SyncError(f"not exported: {target} exists and is not a git bundle (name a new file)")
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
    try:
        if result.returncode != 0:
            raise remotes.git_fail("export failed", result)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
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
            header_refs, prerequisites = incoming.read_bundle_header(stream)
        except SyncError as exc:
            raise SyncError(f"{path.name}: {exc} (not a valid git bundle)") from None
        refs = [name for _, name in header_refs]
        named = [r.removeprefix(NAMESPACE) for r in refs if r.startswith(NAMESPACE)]
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
        others = [r for r in refs if r != session_ref(bundled)]
        if others:
            raise SyncError(
                f"refused: it carries refs outside session {bundled}'s namespace "
                f"({', '.join(others[:3])}); only {session_ref(bundled)} is accepted"
            )
        target = as_id or bundled
        with _quarantine(store, target) as quarantine:
            if prerequisites:  # commits it builds on: this session must have them
                verify = git(quarantine, "bundle", "verify", str(path), check=False)
                if verify.returncode != 0:
                    raise remotes.git_fail(f"refused {path.name}: not a valid git bundle", verify)
            try:
                index_pack(quarantine, stream, caps)
            except SyncError as exc:
                raise SyncError(f"{path.name}: {exc}") from None
            tip = header_refs[0][0]
            check_history(quarantine, tip, bundled, caps)
            unrelated_ok = join or target == bundled  # one id begun twice: joined as a pull
            return receive(store, quarantine, target, tip, join_unrelated=unrelated_ok)


# -- remotes ---------------------------------------------------------------------------------
def push(
    store: SessionStore, session_id: str, url: str, protocols: str, *, with_replays: bool = False
) -> str:
    """Send the session's ``main`` to its ref at ``url`` (a replay only ``with_replays``)."""
    session = store.open(session_id)
    remotes.refuse_replay_push(session_id, session.meta, with_replays)
    ref, shown = session_ref(session_id), remotes.redact_url(url)
    with session.lock:
        tip = main_commit(session.path)
    if tip is None:
        raise SyncError(f"session {session_id} has no commit yet")
    result = git(
        session.path, "push", "--porcelain", "--no-verify", *_other_side(url, "receive-pack"),
        "--", url, f"{tip}:{ref}", check=False, network=protocols,
    )  # fmt: skip
    text = result.stdout.decode(errors="replace") + result.stderr.decode(errors="replace")
    if result.returncode != 0:
        if "[rejected]" in text or "non-fast-forward" in text or "fetch first" in text:
            raise SyncError(
                f"{shown} has turns of session {session_id} that this copy lacks: "
                f"pull first (openprogram sessions pull {session_id}), then push"
            )
        raise remotes.git_fail(f"push to {shown} failed", result, url)
    remotes.note_on_remote(session.path, url, tip)  # what `sessions delete` would not lose
    done = "already at" if "[up to date]" in text else "pushed to"
    return f"session {session_id} {done} {shown} ({ref})"


def pull(store: SessionStore, session_id: str, url: str, protocols: str) -> Received:
    """Fetch the session's ref (only that) from ``url`` into a quarantine and join it (a
    bundle's path: imported, its objects checked as git's fetch of a bundle does not)."""
    local = Path(url.removeprefix("file://"))
    if remotes.url_scheme(url) == "file" and incoming.holds_bundle(local):
        return import_bundle(store, local, expect_id=session_id)
    ref, shown = session_ref(session_id), remotes.redact_url(url)
    with _quarantine(store, session_id) as quarantine:
        fetched = git(  # a pack kept whatever its size (loose objects are a file each)
            quarantine, "-c", "fetch.unpackLimit=1", "-c", f"core.alternateRefsCommand={NO_REFS}",
            "fetch", "--no-tags", "--no-write-fetch-head", *_other_side(url, "upload-pack"),
            "--", url, f"+{ref}:{INCOMING}", check=False, network=protocols,
            env=incoming.traced(quarantine),
        )  # fmt: skip
        if fetched.returncode != 0:
            if b"couldn't find remote ref" in fetched.stderr:
                raise SyncError(f"{shown} has no session {session_id} ({ref})")
            raise remotes.git_fail(f"fetching {ref} from {shown} failed", fetched, url)
        incoming.refuse_dumb(quarantine, shown, spoken=remotes.url_scheme(url) != "file")
        found = read_ref(quarantine / ".git", INCOMING)
        if found is None:
            raise SyncError(f"fetching {ref} from {shown} brought no commit")
        check_history(quarantine, found.hex(), session_id, Caps.from_env())
        got = receive(store, quarantine, session_id, found.hex())
    remotes.note_on_remote(store.session_path(session_id), url, found.hex())  # what it holds
    return got


def _other_side(url: str, program: str) -> list[str]:
    """A local transport's program on the other repository: named by us (see safegit)."""
    return [f"--{program}={REMOTE_SIDE} {program}"] if remotes.url_scheme(url) == "file" else []


def fork_for_replay(store: SessionStore, source_id: str) -> str:
    """A new local session holding ``source_id``'s history (through the checked bundle
    path) for a replay's turns (see :mod:`remotes`); returns its id."""
    new_id = remotes.replay_id(source_id)
    with tempfile.TemporaryDirectory(prefix="openprogram-replay-") as folder:
        bundle = export_bundle(store, source_id, Path(folder) / "source.bundle")
        import_bundle(store, bundle, as_id=new_id)
    return new_id


# -- joining what arrived ----------------------------------------------------------------------
def receive(
    store: SessionStore,
    quarantine: Path,
    session_id: str,
    tip: str,
    *,
    join_unrelated: bool = True,
) -> Received:
    """Join the checked history ending at ``tip`` (in ``quarantine``) to session
    ``session_id`` (``join_unrelated`` False: a local history sharing no commit with it is
    refused, nothing changed)."""
    local = store.session_path(session_id)
    if not (local / ".git").is_dir():  # the quarantine becomes the session: main, no other ref
        moves = f"update {MAIN_REF} {tip}\ndelete {INCOMING}\n".encode()
        git(quarantine, "update-ref", "--stdin", input=moves)
        meta = git(quarantine, "cat-file", "blob", f"{tip}:meta.json").stdout
        atomic_write(quarantine / "meta.json", meta)  # (no working tree: this file only)
        try:
            os.rename(quarantine, local)
        except OSError:
            raise SyncError(f"session {session_id} appeared meanwhile; run it again") from None
        session = store.open(session_id)  # its nodes rows derived from git
        return Received(session_id, "new", session.totals()["turns"], lines(session))
    session = store.open(session_id)
    with session.lock:
        ours = main_commit(local)
        assert ours is not None
        adopted: list[Path] = []  # packs new to the session: removed again if refused
        try:
            base = _merge_base(quarantine, ours, tip)  # ours: a fast-forward
            if base is False:  # the quarantine borrowed nothing (the session appeared since)
                adopted += _adopt_objects(quarantine, local)
                base = _merge_base(local, ours, tip) or None
            if base is None and not join_unrelated and session.totals()["turns"]:
                raise SyncError(
                    f"refused: session {session_id} here has a history of its own that shares no "
                    "root with the one arriving; nothing imported (--join joins them: the arrived "
                    "history its start, the turns made here a branch from its root)"
                )
            adopted += _adopt_objects(quarantine, local)
            if base == tip:
                return Received(session_id, "up to date", 0, lines(session))
            before = session.totals()["turns"]
            status = "fast-forward"
            new = tip
            if base != ours:
                entries = session.index() if base is None else []  # a join reroots ours
                new = _merge(session.git, ours, tip, base, entries)
                if new != tip:  # (tip: what only ours has is already theirs)
                    status = "merged" if base is not None else "joined"
        except SyncError:  # refused (no root to join at…): nothing of what arrived stays
            _drop_packs(adopted)
            raise
        session.git.update_ref(MAIN_REF, bytes.fromhex(new), bytes.fromhex(ours))
        atomic_write(local / "meta.json", session.git.blob_at("meta.json"))  # (listing reads it)
        links = _settle(session, follow=status == "fast-forward")
        arrived_turns = session.totals()["turns"] - before
        return Received(session_id, status, arrived_turns, lines(session, links))


def _adopt_objects(quarantine: Path, local: Path) -> list[Path]:
    """Move what the quarantine received into the session's objects (the index last): packs
    only (a fetch keeps a pack whatever its size, ``fetch.unpackLimit=1``; a bundle is
    ``index-pack``'ed; a spare is an empty skeleton)."""
    src, dst = quarantine / ".git" / "objects" / "pack", local / ".git" / "objects" / "pack"
    new: list[Path] = []
    for pack in sorted(src.glob("*.pack")):
        if not (dst / pack.name).exists():
            new.append(dst / pack.name)
        for part in (pack, pack.with_suffix(".rev"), pack.with_suffix(".idx")):
            if part.exists():
                shutil.move(part, dst / part.name)
    return new


def _drop_packs(packs: list[Path]) -> None:
    """Remove the packs :func:`_adopt_objects` brought (a join refused: nothing names them)."""
    for pack in packs:
        for part in (pack, pack.with_suffix(".rev"), pack.with_suffix(".idx")):
            part.unlink(missing_ok=True)


def _merge_base(repo: Path, ours: str, tip: str) -> str | Literal[False] | None:
    """The merge base in ``repo``: None when they share no commit, False when one is lacking."""
    found = git(repo, "merge-base", ours, tip, check=False)
    if found.returncode > 1:
        return False
    return found.stdout.decode().strip() or None


def _merge(
    writer: Repository, ours: str, theirs: str, base: str | None, entries: list[dict[str, Any]]
) -> str:
    """The merge commit of ``ours`` and ``theirs`` (``theirs`` when the merge is its tree);
    ``base`` None: ours rerooted on theirs (decision 0063)."""
    ours_tree = commit_tree(writer.read(bytes.fromhex(ours)))
    theirs_tree = commit_tree(writer.read(bytes.fromhex(theirs)))  # what arrived: read already
    base_tree = commit_tree(writer.read(bytes.fromhex(base))) if base else None
    start = ours_tree
    if base is None:  # began here before it was pulled: theirs is the session's start
        start = _reroot(writer, ours_tree, theirs_tree, entries)
    tree = merge_trees(writer, base_tree, start, theirs_tree)
    tree = _count_both_lines(writer, tree, base_tree, ours_tree, theirs_tree)
    if tree == theirs_tree and base is not None:  # ours adds nothing: no merge commit
        return theirs
    message = f"pull: join the line ending at {theirs[:10]} (both kept as branches)"
    if base is None:
        message = (
            f"pull: join the history ending at {theirs[:10]}, which this copy had begun "
            "without (its line now a branch from the session's root)"
        )
    parents = [bytes.fromhex(ours), bytes.fromhex(theirs)]
    data = commit_data(tree, parents, message, int(time.time()), current_author().ident)
    return writer.store(b"commit", data).hex()  # by who pulled, as a turn's


def merge_trees(repo: Repository, base: bytes | None, ours: bytes, theirs: bytes) -> bytes:
    """The union of ``ours`` and ``theirs``: a path only one side changed since ``base``
    takes that side, one both changed keeps ours (node files never collide: unique ids)."""
    if ours == theirs or base == theirs:
        return ours
    if base == ours:
        return theirs
    b, o, t = repo.read_tree(base), repo.read_tree(ours), repo.read_tree(theirs)
    out: TreeEntries = {}
    for name in sorted(set(o) | set(t)):
        mine, other, old = o.get(name), t.get(name), b.get(name)
        if other is None or mine == other or other == old:
            if mine is not None:
                out[name] = mine
        elif mine is None or mine == old:
            out[name] = other
        elif mine[1] == TREE_MODE and other[1] == TREE_MODE:
            base_sub = old[0] if old is not None and old[1] == TREE_MODE else None
            out[name] = (merge_trees(repo, base_sub, mine[0], other[0]), TREE_MODE)
        else:
            out[name] = mine
    return repo.write_tree(out)


def _reroot(repo: Repository, ours: bytes, theirs: bytes, entries: list[dict[str, Any]]) -> bytes:
    """Our tree with their ``meta.json``, our root left out and what chained after it
    chained after theirs (``metadata.joined_from_root`` keeps it): one DAG."""
    theirs_root = [
        m.group(1) for n in repo.subtree(theirs, ROOT_DIR) if (m := NODE_NAME.fullmatch(n))
    ]
    ours_root_files = repo.subtree(ours, ROOT_DIR)
    mine = {m.group(1) for n in ours_root_files if (m := NODE_NAME.fullmatch(n))}
    if len(theirs_root) != 1 or not mine or theirs_root[0] in mine:
        raise SyncError("refused: the two histories of this session have no root to join at")
    files: dict[str, bytes | None] = {f"{ROOT_DIR}/{name}": None for name in ours_root_files}
    files["meta.json"] = repo.read(repo.read_tree(theirs)["meta.json"][0], MAX_FILE_BYTES)
    for entry in entries:
        if entry.get("predecessor") not in mine and entry.get("caller") not in mine:
            continue
        folder, _, name = entry["path"].rpartition("/")
        blob = repo.subtree(ours, folder).get(name)
        if blob is None:
            continue  # not committed: the writer's copy is rewritten at its commit
        node = loads(repo.read(blob[0], MAX_FILE_BYTES))
        old = node.get("predecessor") if node.get("predecessor") in mine else node.get("caller")
        node["metadata"] = {**(node.get("metadata") or {}), "joined_from_root": old}
        for key in ("predecessor", "caller"):
            if node.get(key) == old:
                node[key] = theirs_root[0]
        files[entry["path"]] = strict_dumps(node)
    return repo.edit_tree(ours, files)


def _count_both_lines(
    repo: Repository, tree: bytes, base: bytes | None, ours: bytes, theirs: bytes
) -> bytes:
    """The merge ``tree`` with its ``meta.json`` counting both lines' turns (ours + theirs -
    shared, each read from its own tree)."""
    meta, *sides = (_meta_in(repo, t) for t in (tree, ours, theirs, base))
    counts = [c for c in (m.get("turns") if m else 0 for m in sides) if type(c) is int and c >= 0]
    if meta is None or len(counts) != 3:
        return tree
    total = max(counts[0] + counts[1] - counts[2], counts[0], counts[1])
    if total == meta.get("turns"):
        return tree
    meta["turns"] = total
    data = json.dumps(meta, indent=1, ensure_ascii=False).encode()
    return repo.edit_tree(tree, {"meta.json": data})


def _meta_in(repo: Repository, tree: bytes | None) -> dict[str, Any] | None:
    """The ``meta.json`` of ``tree`` if a JSON object (a folder of that name is not JSON)."""
    try:
        meta = loads(repo.read(repo.read_tree(tree)["meta.json"][0], MAX_FILE_BYTES))
    except (KeyError, CorruptedFile, ValueError, RecursionError):
        return None
    return meta if isinstance(meta, dict) else None


def _settle(session: Session, *, follow: bool) -> Links:
    """The open session sees what arrived: counters past every node, HEAD moved only when
    ours was on the line that arrived (``follow``); returns its chain."""
    session.refresh()
    seq, turn, head = session.live.read() or (0, 1, None)
    links = session.links()
    records, _bad = parsed(body for (body,) in session.live.query("SELECT body FROM rows"))
    for record in records:  # the turns other processes have in flight are on the chain too
        node, before = record.get("id"), record.get("predecessor")
        if isinstance(node, str) and record.get("caller") is None:
            links.predecessors.setdefault(node, before if isinstance(before, str) else None)
    arrived = session.meta.get("head_id")
    if isinstance(arrived, str) and (
        (follow and (head is None or head in walk(links.predecessors, arrived)))
        or head not in links.predecessors  # ours: the root a join left out (nothing run here)
    ):
        head = arrived
    session.live.write(max(seq, links.top_seq + 1), max(turn, links.top_turn + 1), head)
    return links


def lines(session: Session, links: Links | None = None) -> list[Line]:
    """The session's lines other than the one its HEAD ends (``links``: its chain, if read)."""
    return other_lines((session.links() if links is None else links).predecessors, session.head_id)
