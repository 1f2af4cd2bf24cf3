"""A pull from a server of plain files (git's dumb HTTP: ``python -m http.server`` over a bare
repository after ``git update-server-info``) is refused, nothing adopted: git checks nothing
on that transport, and writes loose objects a pull never adopts (only packs) — ``main``
would name a commit the session lacks.  Real git, a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from git_servers import dumb_http
from test_sync import bare, git, state, turns

from openprogram.errors import SyncError
from openprogram.store.session import incoming
from openprogram.store.session.store import SessionStore
from openprogram.store.session.sync import export_bundle, pull, push

REFUSED = r"plain files \(git's dumb HTTP\).*nothing pulled.*smart HTTP, git http-backend, or ssh"


def snapshot(store: SessionStore, sid: str) -> dict[str, bytes]:
    """Every file of the session's repository but its spare quarantine: path -> content."""
    git_dir = store.session_path(sid) / ".git"
    spare = git_dir / incoming.SPARE
    return {
        str(p.relative_to(git_dir)): p.read_bytes()
        for p in sorted(git_dir.rglob("*"))
        if p.is_file() and spare not in p.parents
    }


def assert_intact(store: SessionStore, sid: str, before: object, files: dict[str, bytes]) -> None:
    assert state(store, sid) == before  # nodes, HEAD, main's history
    assert snapshot(store, sid) == files  # objects, refs, HEAD: byte for byte
    path = store.session_path(sid)
    assert git(path, "fsck", "--strict", "--no-dangling") == ""
    assert [p.name for p in store.root.iterdir()] == [sid]  # no quarantine left
    spare = path / ".git" / incoming.SPARE
    assert not spare.exists() or incoming.is_skeleton(spare)


def bob_has_one_turn(
    alice: SessionStore, bob: SessionStore, tmp_path: Path, sid: str
) -> tuple[Path, object, dict[str, bytes]]:
    """Alice's one turn pushed to a bare remote and pulled by Bob over file://: the remote,
    Bob's session's state and files."""
    remote = bare(tmp_path / "srv")
    turns(alice, sid, "one")
    push(alice, sid, f"file://{remote}", "file")
    assert pull(bob, sid, f"file://{remote}", "file").status == "new"
    return remote, state(bob, sid), snapshot(bob, sid)


def test_a_second_turn_from_a_dumb_server_is_refused_and_the_session_intact(
    two, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    alice, bob = two
    remote, before, files = bob_has_one_turn(alice, bob, tmp_path, "s_d")
    turns(alice, "s_d", "two")
    push(alice, "s_d", f"file://{remote}", "file")  # (received loose: a few objects)
    git(remote, "update-server-info")
    assert list((remote / "objects").glob("[0-9a-f][0-9a-f]/*"))
    with dumb_http(remote.parent) as base, pytest.raises(SyncError, match=REFUSED):
        pull(bob, "s_d", f"{base}/{remote.name}", "http")
    assert_intact(bob, "s_d", before, files)
    assert pull(bob, "s_d", f"file://{remote}", "file").status == "fast-forward"  # the way


def test_a_packed_dumb_server_is_refused_before_its_pack_is_adopted(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice, bob = two
    remote, before, files = bob_has_one_turn(alice, bob, tmp_path, "s_p")
    turns(alice, "s_p", "two", "three")
    push(alice, "s_p", f"file://{remote}", "file")
    git(remote, "repack", "-adq")  # one pack, no loose object: git fetches it whole, unchecked
    git(remote, "update-server-info")
    assert not list((remote / "objects").glob("[0-9a-f][0-9a-f]/*"))
    carol = SessionStore(tmp_path / "carol")
    with dumb_http(remote.parent) as base:
        url = f"{base}/{remote.name}"
        with pytest.raises(SyncError, match=REFUSED):
            pull(bob, "s_p", url, "http")
        assert_intact(bob, "s_p", before, files)
        with pytest.raises(SyncError, match=REFUSED):  # a session new here: none made
            pull(carol, "s_p", url, "http")
    assert list(carol.root.iterdir()) == []
    carol.close()


def test_a_pull_from_a_bundle_path_checks_its_objects(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """git's fetch from a bundle checks no object (a commit with a date git cannot read came
    in); a pull given a bundle's path imports it, through ``index-pack --strict``."""
    alice, bob = two
    turns(alice, "s_b", "one")
    bundle = tmp_path / "s_b.bundle"
    export_bundle(alice, "s_b", bundle)
    assert pull(bob, "s_b", str(bundle), "file").status == "new"
    before, files = state(bob, "s_b"), snapshot(bob, "s_b")
    path = alice.session_path("s_b")
    head, tree = (git(path, "rev-parse", rev).strip() for rev in ("HEAD", "HEAD^{tree}"))
    people = "author a <a@x> soon +0000\ncommitter c <c@x> soon +0000"
    raw = f"tree {tree}\nparent {head}\n{people}\n\nodd\n"
    made = subprocess.run(
        ["git", "hash-object", "-t", "commit", "-w", "--literally", "--stdin"],
        cwd=path, input=raw, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    git(path, "update-ref", "refs/heads/main", made)
    export_bundle(alice, "s_b", bundle)
    for url in (str(bundle), f"file://{bundle}"):
        with pytest.raises(SyncError, match="badDate"):
            pull(bob, "s_b", url, "file")
        assert_intact(bob, "s_b", before, files)
