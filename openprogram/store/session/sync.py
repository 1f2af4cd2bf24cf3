"""Sharing a session through git: bundles, push and pull (the I/O around :mod:`syncrules`).

A session is a repository, so it travels as one: ``export`` writes a git bundle holding one
ref, ``refs/openprogram/sessions/<id>``; ``push`` sends the session's ``main`` to that ref of
any git remote (never a branch); ``pull`` fetches that one ref.  Whatever arrives is first
received into a quarantine repository under the sessions folder (borrowing the local
session's objects), checked (:mod:`syncrules`: refs, ``meta.json``'s id, every new tree and
blob), and only then joined to the session:

* new here: the quarantine becomes the session folder;
* the local session is behind: its ``main`` moves forward (HEAD follows if it was on the
  line that arrived);
* both moved on: a merge commit whose tree is the union of both histories — the two lines
  are two branches of the DAG from their common turn, and this user's HEAD stays put.

A refusal is one line (:class:`SyncError`); the quarantine is deleted and the session is
untouched.  Only an explicit call contacts a remote.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openprogram.store.session import checkout, maintenance
from openprogram.store.session.files import atomic_write
from openprogram.store.session.ids import validate_session_id
from openprogram.store.session.repository import Repository
from openprogram.store.session.safegit import init_repository, run_git
from openprogram.store.session.syncrules import (
    NAMESPACE,
    HistoryCheck,
    Line,
    SyncError,
    changed_files,
    check_meta,
    check_refs,
    is_turn,
    merge_trees,
    other_lines,
    redact_url,
    session_ref,
)

if TYPE_CHECKING:
    from openprogram.store.session.store import Session, SessionStore

INCOMING = "refs/openprogram/incoming"
QUARANTINE_PREFIX = ".incoming-"
LOCAL = "refs/openprogram/local"

__all__ = [
    "Received",
    "SyncError",
    "export_bundle",
    "import_bundle",
    "lines",
    "pull",
    "push",
]


@dataclass
class Received:
    """What a pull or import did."""

    session_id: str
    status: str  # "new" | "up to date" | "fast-forward" | "merged"
    new_turns: int = 0
    lines: list[Line] = field(default_factory=list)

    def describe(self) -> str:
        text = f"session {self.session_id}: {self.status}"
        if self.new_turns:
            text += f", {self.new_turns} turn(s) arrived"
        for line in self.lines:
            text += f"; another line ends at {line.tip} ({line.turns} turn(s) of its own)"
        return text


# -- git ----------------------------------------------------------------------------------
def _git(
    repo: Path,
    *args: str,
    input: bytes | None = None,
    check: bool = True,
    network: str | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run git on ``repo`` through :func:`safegit.run_git` (no hooks, no programs the
    repository names, objects checked on receipt).  ``network`` (the allowed protocols)
    also lets git use the user's own ways to authenticate — their credential helper,
    askpass, ssh agent — and nothing else.  A quarantine keeps its ``alternates`` (ours)."""
    return run_git(
        repo,
        "-c",
        "transfer.fsckObjects=true",
        *args,
        input=input,
        check=check,
        network=network,
        sanitize=not repo.name.startswith(QUARANTINE_PREFIX),
    )


def _out(repo: Path, *args: str) -> str:
    return _git(repo, *args).stdout.decode().strip()


def _fail(what: str, result: subprocess.CompletedProcess[bytes], url: str = "") -> SyncError:
    text = result.stderr.decode(errors="replace").strip().splitlines()
    reason = next((t for t in reversed(text) if t.strip()), "git failed")
    if url:
        reason = reason.replace(url, redact_url(url))
    return SyncError(f"{what}: {' '.join(reason.split())[:300]}")


def _main(repo: Path) -> str | None:
    result = _git(repo, "rev-parse", "-q", "--verify", "refs/heads/main^{commit}", check=False)
    return result.stdout.decode().strip() or None


def _is_ancestor(repo: Path, a: str, b: str) -> bool:
    return _git(repo, "merge-base", "--is-ancestor", a, b, check=False).returncode == 0


# -- the quarantine ------------------------------------------------------------------------
@contextmanager
def _quarantine(store: SessionStore) -> Iterator[Path]:
    """An empty repository under the sessions folder, deleted afterwards."""
    store.root.mkdir(parents=True, exist_ok=True)
    path = store.root / f"{QUARANTINE_PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
    init_repository(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _borrow(quarantine: Path, local: Path) -> str | None:
    """Let the quarantine see the local session's objects (so a fetch brings only what is
    new) and name its ``main``; returns that commit."""
    tip = _main(local)
    if tip is None:
        return None
    alternates = quarantine / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{local / '.git' / 'objects'}\n")
    _git(quarantine, "update-ref", LOCAL, tip)
    return tip


def _check_history(repo: Path, tip: str, known: str | None, session_id: str) -> None:
    """Every object new in ``tip`` (not reachable from ``known``) has the session's shape."""
    fmt = "--batch-check=%(objectname) %(objecttype) %(objectsize)"
    if known is None:  # nothing borrowed: every object in the quarantine arrived (no walk)
        checks = _git(repo, "cat-file", "--batch-all-objects", fmt).stdout.split()
    else:
        rev = ["rev-list", "--objects", "--no-object-names", tip, "--not", known]
        shas = _git(repo, *rev).stdout
        checks = _git(repo, "cat-file", fmt, input=shas).stdout.split()
    kinds = dict(zip(checks[0::3], checks[1::3], strict=True))
    sizes = {
        bytes.fromhex(s.decode()): int(n) for s, n in zip(checks[0::3], checks[2::3], strict=True)
    }
    bad = {k.decode() for k in kinds.values()} - {"commit", "tree", "blob"}
    if bad:
        raise SyncError(f"refused: it holds git objects of type {', '.join(sorted(bad))}")
    wanted = b"".join(s + b"\n" for s, kind in kinds.items() if kind in (b"commit", b"tree"))
    trees: dict[bytes, bytes] = {}
    roots: list[bytes] = []
    data = _git(repo, "cat-file", "--batch", input=wanted).stdout
    pos = 0
    while pos < len(data):
        eol = data.index(b"\n", pos)
        sha, kind, size = data[pos:eol].split()
        body = data[eol + 1 : eol + 1 + int(size)]
        pos = eol + 2 + int(size)
        if kind == b"tree":
            trees[bytes.fromhex(sha.decode())] = body
        else:  # a commit: its first line names its tree
            roots.append(bytes.fromhex(body.split(b"\n", 1)[0].split(b" ")[1].decode()))
    checker = HistoryCheck(trees, sizes)
    for root in roots:
        checker.root(root)
    meta = _git(repo, "cat-file", "blob", f"{tip}:meta.json", check=False)
    if meta.returncode != 0:
        raise SyncError("refused: it has no meta.json (not a session)")
    check_meta(meta.stdout, session_id)


def _adopt_objects(quarantine: Path, local: Path) -> None:
    """Move what the quarantine received (checked already) into the session's objects."""
    src, dst = quarantine / ".git" / "objects", local / ".git" / "objects"
    for pack in sorted((src / "pack").glob("*.pack")):
        for suffix in (".pack", ".rev", ".idx"):  # the index last: git looks for it
            part = pack.with_suffix(suffix)
            if part.exists():
                shutil.copyfile(part, dst / "pack" / part.name)
    for fan in src.iterdir():
        if len(fan.name) == 2 and fan.is_dir():
            (dst / fan.name).mkdir(exist_ok=True)
            for obj in fan.iterdir():
                target = dst / fan.name / obj.name
                if not target.exists():
                    shutil.copyfile(obj, target)


# -- receiving -----------------------------------------------------------------------------
def _receive(store: SessionStore, quarantine: Path, session_id: str, tip: str) -> Received:
    """Join the checked history ``tip`` (in ``quarantine``) to session ``session_id``."""
    local = store.session_path(session_id)
    if not (local / ".git").is_dir():
        moves = f"update refs/heads/main {tip}\ndelete {INCOMING}\n".encode()
        _git(quarantine, "update-ref", "--stdin", input=moves)
        _git(quarantine, "read-tree", "-u", "--reset", "refs/heads/main")
        try:
            os.rename(quarantine, local)
        except OSError:
            raise SyncError(f"session {session_id} appeared meanwhile; run it again") from None
        quarantine.mkdir()  # for the caller's cleanup
        session = store.open(session_id)  # starts a maintenance if buckets are sealed
        return Received(session_id, "new", _turns(session), lines(session))
    session = store.open(session_id)
    with session.lock:
        _adopt_objects(quarantine, local)
        ours = _main(local)
        assert ours is not None
        if _is_ancestor(local, tip, ours):
            return Received(session_id, "up to date", 0, lines(session))
        before = {e["id"] for e in session.index() if is_turn(e) and e["kind"] != "root"}
        if _is_ancestor(local, ours, tip):
            new, status = tip, "fast-forward"
        else:
            new, status = _merge(local, ours, tip), "merged"
        _git(local, "update-ref", "-m", f"openprogram: {status}", "refs/heads/main", new, ours)
        _materialise(local, ours, new)
        _settle(session, follow=status == "fast-forward")
        maintenance.spawn(local)  # seals what arrived (after the lock is released)
        after = [
            e
            for e in session.index()
            if is_turn(e) and e["kind"] != "root" and e["id"] not in before
        ]
        return Received(session_id, status, len(after), lines(session))


def _merge(local: Path, ours: str, theirs: str) -> str:
    base = _out(local, "merge-base", ours, theirs) or None
    trees = _out(local, "rev-parse", *(f"{c}^{{tree}}" for c in (base, ours, theirs) if c))
    tree_shas = [bytes.fromhex(t) for t in trees.split()]
    base_tree = tree_shas[0] if base else None
    writer = Repository(local)
    try:
        tree = merge_trees(
            base_tree, tree_shas[-2], tree_shas[-1], writer.read_tree, writer.write_tree
        )
    finally:
        writer.close()
    message = f"pull: join the line ending at {theirs[:10]} (both kept as branches)"
    return _out(local, "commit-tree", tree.hex(), "-p", ours, "-p", theirs, "-m", message)


def _materialise(local: Path, old: str, new: str) -> None:
    """Write the files whose content changed between two commits into the session folder."""
    trees = _out(local, "rev-parse", f"{old}^{{tree}}", f"{new}^{{tree}}").split()
    writer = Repository(local)
    try:
        for rel, blob in changed_files(
            bytes.fromhex(trees[0]), bytes.fromhex(trees[1]), writer.read_tree
        ):
            target = local / rel
            if blob is None:
                target.unlink(missing_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, writer.read(blob))
        checkout.refresh(local, writer)  # `git status` clean, sealed buckets left out
    finally:
        writer.close()


def _settle(session: Session, *, follow: bool) -> None:
    """Make the open session see what arrived, and its counters account for it: seq and
    turn numbers past every node, HEAD moved to the arrived HEAD only when ours was on the
    line that arrived (``follow``: a plain fast-forward)."""
    session.refresh()
    seq, turn, head = session.counters.read() or (0, 1, None)
    entries = session.index()
    top_seq = max((e["seq"] for e in entries), default=-1)
    top_turn = max((e["turn"] for e in entries), default=0)
    arrived = session.meta.get("head_id")
    if follow and isinstance(arrived, str) and _on_chain(entries, arrived, head):
        head = arrived
    session.counters.write(max(seq, top_seq + 1), max(turn, top_turn + 1), head)


def _on_chain(entries: list[dict[str, Any]], start: str, target: str | None) -> bool:
    preds = {e["id"]: e["predecessor"] for e in entries}
    node: str | None = start
    seen: set[str] = set()
    while node is not None and node not in seen:
        if node == target:
            return True
        seen.add(node)
        node = preds.get(node)
    return target is None


def _turns(session: Session) -> int:
    return sum(1 for e in session.index() if is_turn(e) and e["kind"] != "root")


def lines(session: Session) -> list[Line]:
    """The session's lines other than the one its HEAD ends (see ``syncrules.other_lines``)."""
    return other_lines(session.index(), session.head_id)


# -- bundles ---------------------------------------------------------------------------------
def export_bundle(store: SessionStore, session_id: str, out: str | os.PathLike[str]) -> Path:
    """Write session ``session_id`` as a git bundle (its whole history, one ref)."""
    session = store.open(session_id)
    target = Path(out).expanduser().resolve()
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    ref = session_ref(session_id)
    with session.lock:
        tip = _main(session.path)
        if tip is None:
            raise SyncError(f"session {session_id} has no commit yet")
        _git(session.path, "update-ref", ref, tip)
        try:
            result = _git(session.path, "bundle", "create", "-q", str(tmp), ref, check=False)
        finally:
            _git(session.path, "update-ref", "-d", ref, check=False)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise _fail("export failed", result)
    os.replace(tmp, target)
    return target


def import_bundle(
    store: SessionStore, bundle: str | os.PathLike[str], as_id: str | None = None
) -> Received:
    """Import a bundle made by :func:`export_bundle` (into an existing session: like a pull)."""
    path = Path(bundle).expanduser().resolve()
    if not path.is_file():
        raise SyncError(f"no bundle {path}")
    if as_id is not None:
        validate_session_id(as_id)
    with _quarantine(store) as quarantine:
        verify = _git(quarantine, "bundle", "verify", str(path), check=False)
        if verify.returncode != 0:
            raise _fail(f"refused {path.name}: not a valid git bundle", verify)
        listed = verify.stdout.decode(errors="replace").splitlines()  # "<sha> <ref>" lines
        refs = [line.split()[1] for line in listed if re.fullmatch(r"[0-9a-f]{40} \S+", line)]
        named = [r[len(NAMESPACE) :] for r in refs if r.startswith(NAMESPACE)]
        if len(named) != 1:
            raise SyncError(
                f"refused {path.name}: it must carry exactly one {NAMESPACE}<id> ref "
                f"(found {', '.join(refs[:3]) or 'none'})"
            )
        bundled = validate_session_id(named[0])
        check_refs(refs, bundled)
        target = as_id or bundled
        return _fetch_and_receive(
            store, quarantine, str(path), session_ref(bundled), target, bundled
        )


def _fetch_and_receive(
    store: SessionStore,
    quarantine: Path,
    url: str,
    ref: str,
    session_id: str,
    recorded_id: str,
    network: str | None = None,
) -> Received:
    local = store.session_path(session_id)
    known = _borrow(quarantine, local) if (local / ".git").is_dir() else None
    fetched = _git(
        quarantine, "fetch", "--no-tags", "--no-write-fetch-head", "--", url,
        f"+{ref}:{INCOMING}", check=False, network=network,
    )  # fmt: skip
    if fetched.returncode != 0:
        text = fetched.stderr.decode(errors="replace")
        if "couldn't find remote ref" in text:
            raise SyncError(f"{redact_url(url)} has no session {recorded_id} ({ref})")
        raise _fail(f"fetching {ref} from {redact_url(url)} failed", fetched, url)
    tip = _out(quarantine, "rev-parse", f"{INCOMING}^{{commit}}")
    _check_history(quarantine, tip, known, recorded_id)
    return _receive(store, quarantine, session_id, tip)


# -- remotes ---------------------------------------------------------------------------------
def push(store: SessionStore, session_id: str, url: str, protocols: str) -> str:
    """Send the session's history to ``refs/openprogram/sessions/<id>`` of ``url``."""
    session = store.open(session_id)
    ref = session_ref(session_id)
    with session.lock:
        tip = _main(session.path)
    if tip is None:
        raise SyncError(f"session {session_id} has no commit yet")
    result = _git(
        session.path, "push", "--porcelain", "--no-verify", "--", url, f"{tip}:{ref}",
        check=False, network=protocols,
    )  # fmt: skip
    text = result.stdout.decode(errors="replace") + result.stderr.decode(errors="replace")
    if result.returncode != 0:
        if "[rejected]" in text or "non-fast-forward" in text or "fetch first" in text:
            raise SyncError(
                f"{redact_url(url)} has turns of session {session_id} that this copy lacks: "
                f"pull first (openprogram sessions pull {session_id}), then push"
            )
        raise _fail(f"push to {redact_url(url)} failed", result, url)
    up_to_date = "[up to date]" in text
    done = "already at" if up_to_date else "pushed to"
    return f"session {session_id} {done} {redact_url(url)} ({ref})"


def pull(store: SessionStore, session_id: str, url: str, protocols: str) -> Received:
    """Fetch ``refs/openprogram/sessions/<id>`` from ``url`` (only that ref) and join it."""
    validate_session_id(session_id)
    ref = session_ref(session_id)
    with _quarantine(store) as quarantine:
        return _fetch_and_receive(store, quarantine, url, ref, session_id, session_id, protocols)
