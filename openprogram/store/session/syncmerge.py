"""Joining a checked history to the local session: nothing, a fast-forward, or a merge
commit whose tree is the union of both (:func:`syncrules.merge_trees`)."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from openprogram.errors import CorruptedFile
from openprogram.store.session.files import (
    MAX_FILE_BYTES,
    atomic_write,
    current_author,
    loads,
    strict_dumps,
)
from openprogram.store.session.history import (
    MAIN_REF,
    TREE_MODE,
    Repository,
    commit_data,
    commit_tree,
    read_ref,
)
from openprogram.store.session.queries import Links
from openprogram.store.session.safegit import INCOMING, git, git_dir_of
from openprogram.store.session.syncrules import (
    ROOT_DIR,
    Line,
    SyncError,
    merge_trees,
    other_lines,
    rerooted,
    root_ids,
)

if TYPE_CHECKING:
    from openprogram.store.session.store import Session, SessionStore


@dataclass
class Received:
    """What a pull or import did."""

    session_id: str
    status: str  # "new" | "up to date" | "fast-forward" | "merged" | "joined"
    new_turns: int = 0
    lines: list[Line] = field(default_factory=list)

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


def _adopt_objects(quarantine: Path, local: Path) -> None:
    """Move what the quarantine received into the session's objects (the index last)."""
    src, dst = quarantine / ".git" / "objects", local / ".git" / "objects"
    for pack in sorted((src / "pack").glob("*.pack")):
        for suffix in (".pack", ".rev", ".idx"):
            part = pack.with_suffix(suffix)
            if part.exists():
                try:
                    os.rename(part, dst / "pack" / part.name)
                except OSError:
                    shutil.copyfile(part, dst / "pack" / part.name)
    for fan in src.iterdir():
        if len(fan.name) == 2 and fan.is_dir():
            (dst / fan.name).mkdir(exist_ok=True)
            for obj in fan.iterdir():
                target = dst / fan.name / obj.name
                if not target.exists():
                    shutil.copyfile(obj, target)


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
    if not (local / ".git").is_dir():
        _name_main(quarantine, tip)
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
        base = _merge_base(quarantine, ours, tip)  # ours: a fast-forward
        if base is False:  # the quarantine borrowed nothing (the session appeared since)
            _adopt_objects(quarantine, local)
            base = _merge_base(local, ours, tip) or None
        if base is None and not join_unrelated and session.totals()["turns"]:
            raise SyncError(
                f"refused: session {session_id} here has a history of its own that shares no "
                "root with the one arriving; nothing imported (--join joins them: the arrived "
                "history its start, the turns made here a branch from its root)"
            )
        _adopt_objects(quarantine, local)
        if base == tip:
            return Received(session_id, "up to date", 0, lines(session))
        before = session.totals()["turns"]
        joined: int | None = None
        if base == ours:
            new, status = tip, "fast-forward"
        else:
            entries = session.index() if base is None else []  # a join reroots ours
            new, joined = _merge(session.git, ours, tip, base, entries)
            status = "merged" if joined is None else "joined"
            if new == tip:  # what only ours has is already theirs (both sealed a bucket)
                status = "fast-forward"
        session.git.update_ref(MAIN_REF, bytes.fromhex(new), bytes.fromhex(ours))
        atomic_write(local / "meta.json", session.git.blob_at("meta.json"))  # (listing reads it)
        links = _settle(session, follow=status == "fast-forward")
        arrived_turns = session.totals()["turns"] - before
        return Received(
            session_id, status, arrived_turns, other_lines(links.predecessors, session.head_id)
        )


def _merge_base(repo: Path, ours: str, tip: str) -> str | Literal[False] | None:
    """The merge base in ``repo``: None when they share no commit, False when one is lacking."""
    found = git(repo, "merge-base", ours, tip, check=False)
    if found.returncode > 1:
        return False
    return found.stdout.decode().strip() or None


def _name_main(quarantine: Path, tip: str) -> None:
    """A quarantine becoming the session: ``main`` names ``tip``, no other ref."""
    moves = f"update {MAIN_REF} {tip}\ndelete {INCOMING}\n".encode()
    git(quarantine, "update-ref", "--stdin", input=moves)


def _merge(
    writer: Repository, ours: str, theirs: str, base: str | None, entries: list[dict[str, Any]]
) -> tuple[str, int | None]:
    """The merge commit of ``ours`` and ``theirs`` (``theirs`` when the merge is its tree) and
    how many of our nodes were rerooted (None: ``base`` is shared history)."""
    commits = [bytes.fromhex(c) for c in (base, ours, theirs) if c]
    tree_shas = [commit_tree(writer.read(c)) for c in commits]  # what arrived: read already
    base_tree = tree_shas[0] if base else None
    joined: int | None = None
    ours_tree, theirs_tree = tree_shas[-2], tree_shas[-1]
    if base is None:  # began here before it was pulled: theirs is the session's start
        ours_tree, joined = _reroot(writer, ours_tree, theirs_tree, entries)
        ours_tree = _with_meta_of(writer, ours_tree, theirs_tree)
    tree = merge_trees(base_tree, ours_tree, theirs_tree, writer.read_tree, writer.write_tree)
    tree = _count_both_lines(writer, tree, base_tree, tree_shas[-2], tree_shas[-1])
    if tree == theirs_tree and joined is None:  # ours adds nothing: no merge commit
        return theirs, None
    message = f"pull: join the line ending at {theirs[:10]} (both kept as branches)"
    if joined is not None:
        message = (
            f"pull: join the history ending at {theirs[:10]}, which this copy had begun "
            "without (its line now a branch from the session's root)"
        )
    parents = [bytes.fromhex(ours), bytes.fromhex(theirs)]
    data = commit_data(tree, parents, message, int(time.time()), current_author().ident)
    return writer.store(b"commit", data).hex(), joined  # by who pulled, as a turn's


def _reroot(
    repo: Repository, ours: bytes, theirs: bytes, entries: list[dict[str, Any]]
) -> tuple[bytes, int]:
    """Our tree with our root left out and what chained after it chained after theirs (two
    unrelated histories of one id: one DAG); and how many of our nodes moved."""
    theirs_root = root_ids(repo.subtree(theirs, ROOT_DIR))
    ours_root_files = repo.subtree(ours, ROOT_DIR)
    mine = root_ids(ours_root_files)
    if len(theirs_root) != 1 or not mine or theirs_root[0] in mine:
        raise SyncError("refused: the two histories of this session have no root to join at")
    files: dict[str, bytes | None] = {f"{ROOT_DIR}/{name}": None for name in ours_root_files}
    moved = 0
    for entry in entries:
        if entry.get("predecessor") not in mine and entry.get("caller") not in mine:
            continue
        folder, _, name = entry["path"].rpartition("/")
        blob = repo.subtree(ours, folder).get(name)
        if blob is None:
            continue  # not committed: the writer's copy is rewritten at its commit
        node = loads(repo.read(blob[0], MAX_FILE_BYTES))
        old = node.get("predecessor") if node.get("predecessor") in mine else node.get("caller")
        files[entry["path"]] = strict_dumps(rerooted(node, old, theirs_root[0]))
        moved += 1
    return repo.edit_tree(ours, files), moved


def _with_meta_of(repo: Repository, ours: bytes, theirs: bytes) -> bytes:
    """Our tree with their ``meta.json`` (id, title and start are theirs)."""
    found = repo.read_tree(theirs).get("meta.json")
    if found is None:
        return ours
    entries = repo.read_tree(ours)
    entries["meta.json"] = found
    return repo.write_tree(entries)


def _count_both_lines(
    repo: Repository, tree: bytes, base: bytes | None, ours: bytes, theirs: bytes
) -> bytes:
    """The merge ``tree`` with its ``meta.json`` counting both lines' turns (ours + theirs -
    shared, each read from its own tree)."""
    entries = repo.read_tree(tree)
    found = entries.get("meta.json")
    meta = _meta_in(repo, tree)
    if found is None or meta is None:
        return tree
    shared = _meta_in(repo, base) if base is not None else {}
    sides = (_meta_in(repo, ours), _meta_in(repo, theirs), shared)
    counts = [c for c in (m.get("turns") if m else 0 for m in sides) if type(c) is int and c >= 0]
    if len(counts) != 3:
        return tree
    total = max(counts[0] + counts[1] - counts[2], counts[0], counts[1])
    if total == meta.get("turns"):
        return tree
    meta["turns"] = total
    data = json.dumps(meta, indent=1, ensure_ascii=False).encode()
    entries["meta.json"] = (repo.store(b"blob", data), found[1])
    return repo.write_tree(entries)


def _meta_in(repo: Repository, tree: bytes) -> dict[str, Any] | None:
    found = repo.read_tree(tree).get("meta.json")
    if found is None or found[1] == TREE_MODE:
        return None
    try:
        meta = loads(repo.read(found[0], MAX_FILE_BYTES))
    except (CorruptedFile, ValueError, RecursionError):
        return None
    return meta if isinstance(meta, dict) else None


def _settle(session: Session, *, follow: bool) -> Links:
    """The open session sees what arrived: counters past every node, HEAD moved only when
    ours was on the line that arrived (``follow``); returns its chain."""
    session.refresh()
    seq, turn, head = session.live.read() or (0, 1, None)
    links = session.links()
    arrived = session.meta.get("head_id")
    if follow and isinstance(arrived, str) and _on_chain(links.predecessors, arrived, head):
        head = arrived
    elif isinstance(arrived, str) and head not in links.predecessors:
        head = arrived  # ours was the root a join left out (nothing had been run here)
    session.live.write(max(seq, links.top_seq + 1), max(turn, links.top_turn + 1), head)
    return links


def _on_chain(preds: dict[str, str | None], start: str, target: str | None) -> bool:
    node: str | None = start
    seen: set[str] = set()
    while node is not None and node not in seen:
        if node == target:
            return True
        seen.add(node)
        node = preds.get(node)
    return target is None


def lines(session: Session) -> list[Line]:
    """The session's lines other than the one its HEAD ends (see ``syncrules.other_lines``)."""
    return other_lines(session.links().predecessors, session.head_id)
