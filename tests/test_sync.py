"""Sharing sessions through git: bundles, push/pull over file://, divergence, hostile input.

Two machines are two ``OPENPROGRAM_HOME``s (two SessionStores); the remote is a bare
repository in a temporary folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import settled, status_shows_nothing

from openprogram import agentic_function
from openprogram.context.nodes import COMPLETED, make_call
from openprogram.errors import SyncError
from openprogram.providers import create_runtime
from openprogram.sharing import resolve_remote
from openprogram.store.session import session_context
from openprogram.store.session.files import MAX_FILE_BYTES
from openprogram.store.session.store import SessionStore
from openprogram.store.session.sync import (
    export_bundle,
    import_bundle,
    lines,
    pull,
    push,
)

ROOT = Path(__file__).resolve().parent.parent


@agentic_function
def echo(text: str, runtime=None) -> str:  # type: ignore[no-untyped-def]
    """Repeat the text."""
    return str(runtime.exec(text))


def turns(store: SessionStore, sid: str, *texts: str) -> None:
    for text in texts:
        with session_context(sid, db=store, message=text, runtime=create_runtime("test")):
            echo(text)


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return out.stdout


def bare(tmp_path: Path, name: str = "remote.git") -> Path:
    path = tmp_path / name
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


def state(store: SessionStore, sid: str) -> tuple[set[str], str | None, list[str]]:
    session = store.open(sid)
    ids = {e["id"] for e in session.index()}
    return ids, session.head_id, git(session.path, "log", "--format=%H", "main").split()


def test_bundle_round_trip_same_nodes_head_history(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice, bob = two
    turns(alice, "s_shared", "one", "two", "three")
    bundle = export_bundle(alice, "s_shared", tmp_path / "run.bundle")
    subprocess.run(["git", "bundle", "verify", "-q", str(bundle)], cwd=tmp_path, check=False)
    got = import_bundle(bob, bundle)
    assert got.status == "new" and got.session_id == "s_shared"
    assert state(bob, "s_shared") == state(alice, "s_shared")
    path = bob.session_path("s_shared")
    assert git(path, "fsck", "--strict", "--no-dangling") == ""
    assert status_shows_nothing(path)
    # the next turn continues the imported history
    turns(bob, "s_shared", "four")
    session = bob.open("s_shared")
    head = session.get(session.head_id)
    assert head.predecessor == alice.open("s_shared").head_id


def test_import_as_new_id_and_into_existing(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice, bob = two
    turns(alice, "s_a", "one")
    bundle = export_bundle(alice, "s_a", tmp_path / "a.bundle")
    got = import_bundle(bob, bundle, as_id="s_copy")
    assert got.session_id == "s_copy"
    assert bob.open("s_copy").meta["id"] == "s_copy"
    assert state(bob, "s_copy")[0] == state(alice, "s_a")[0]
    # importing the same bundle again is a pull: nothing new
    assert import_bundle(bob, bundle, as_id="s_copy").status == "up to date"
    turns(alice, "s_a", "two")
    export_bundle(alice, "s_a", tmp_path / "a2.bundle")
    got = import_bundle(bob, tmp_path / "a2.bundle", as_id="s_copy")
    assert got.status == "fast-forward" and got.new_turns == 1
    assert bob.open("s_copy").head_id == alice.open("s_a").head_id


def test_an_export_never_replaces_what_is_not_a_bundle(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``sessions export ID -o analysis.ipynb`` (a slip) leaves the notebook as it was, in
    one line; a folder gets ``<id>.bundle`` in it; a bundle is replaced by the newer one;
    nothing is left beside them."""
    alice, _bob = two
    turns(alice, "s_x", "one")
    notebook = tmp_path / "analysis.ipynb"
    notebook.write_text('{"cells": []}')
    with pytest.raises(SyncError, match="exists and is not a git bundle"):
        export_bundle(alice, "s_x", notebook)
    assert notebook.read_text() == '{"cells": []}'
    (tmp_path / "results").mkdir()
    assert export_bundle(alice, "s_x", tmp_path / "results") == tmp_path / "results" / "s_x.bundle"
    first = (tmp_path / "results" / "s_x.bundle").read_bytes()
    turns(alice, "s_x", "two")
    export_bundle(alice, "s_x", tmp_path / "results" / "s_x.bundle")
    assert (tmp_path / "results" / "s_x.bundle").read_bytes() != first
    assert sorted(p.name for p in tmp_path.rglob("*tmp")) == []


def test_push_pull_file_remote_then_divergence_keeps_both_lines(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice, bob = two
    remote = bare(tmp_path)
    url = f"file://{remote}"
    turns(alice, "s_team", "base")
    push(alice, "s_team", url, "file")
    assert (
        git(remote, "for-each-ref", "--format=%(refname)") == "refs/openprogram/sessions/s_team\n"
    )
    got = pull(bob, "s_team", url, "file")
    assert got.status == "new"
    assert state(bob, "s_team") == state(alice, "s_team")
    common = alice.open("s_team").head_id

    turns(alice, "s_team", "alice 1", "alice 2")
    turns(bob, "s_team", "bob 1")
    push(alice, "s_team", url, "file")
    with pytest.raises(SyncError, match="pull first"):
        push(bob, "s_team", url, "file")

    bob_head = bob.open("s_team").head_id
    got = pull(bob, "s_team", url, "file")
    assert got.status == "merged" and got.new_turns == 2
    session = bob.open("s_team")
    assert session.head_id == bob_head  # this user's HEAD where it was
    alice_ids = state(alice, "s_team")[0]
    assert alice_ids <= {e["id"] for e in session.index()}  # nothing lost
    (line,) = lines(session)
    assert line.tip == alice.open("s_team").head_id and line.turns == 2
    assert session.get(line.tip).predecessor != common  # alice 2 -> alice 1 -> base
    assert git(session.path, "fsck", "--strict", "--no-dangling") == ""
    assert status_shows_nothing(session.path)

    # bob continues his line, pushes (a fast-forward of the remote), alice pulls
    turns(bob, "s_team", "bob 2")
    push(bob, "s_team", url, "file")
    got = pull(alice, "s_team", url, "file")
    assert got.status == "fast-forward"
    a = alice.open("s_team")
    assert a.head_id == line.tip  # alice's HEAD stays on her line
    assert {e["id"] for e in a.index()} == {e["id"] for e in bob.open("s_team").index()}
    (other,) = lines(a)
    assert other.tip == bob.open("s_team").head_id and other.turns == 2
    turns(alice, "s_team", "alice 3")
    assert a.get(a.head_id).predecessor == line.tip


def test_open_session_in_same_process_sees_the_pull(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice, bob = two
    url = f"file://{bare(tmp_path)}"
    turns(alice, "s_live", "one")
    push(alice, "s_live", url, "file")
    pull(bob, "s_live", url, "file")
    opened = bob.open("s_live")
    before = len(opened.index())
    turns(alice, "s_live", "two")
    push(alice, "s_live", url, "file")
    pull(bob, "s_live", url, "file")
    assert len(opened.index()) > before
    assert opened.head_id == alice.open("s_live").head_id


PULL_IN_ANOTHER_PROCESS = """
import sys
from openprogram.store.session.store import SessionStore
from openprogram.store.session.sync import pull
print(pull(SessionStore(sys.argv[1]), "s_mid", sys.argv[2], "file").describe())
"""


def test_a_pull_during_another_process_turn_keeps_that_turn_head(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Alice's notebook is in a turn (its turn node HEAD, not read back yet) while another
    process of hers pulls bob's two turns: HEAD stays on her turn, the pull names bob's
    line, and her next turn follows hers."""
    alice, bob = two
    remote = bare(tmp_path)
    turns(alice, "s_mid", "one")
    push(alice, "s_mid", str(remote), "file")
    pull(bob, "s_mid", str(remote), "file")
    turns(bob, "s_mid", "theirs-2", "theirs-3")
    push(bob, "s_mid", str(remote), "file")
    with session_context("s_mid", db=alice, message="mine") as h:
        mine = h.writer.append(make_call("turn", "mine", status=COMPLETED), turn_level=True)
        pulled = subprocess.run(
            [sys.executable, "-c", PULL_IN_ANOTHER_PROCESS, str(alice.home), str(remote)],
            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert pulled.returncode == 0, pulled.stderr
    assert "fast-forward, 2 turn(s) arrived; another line ends at" in pulled.stdout
    session = alice.open("s_mid")
    assert session.head_id == mine.id
    turns(alice, "s_mid", "after")
    assert session.get(session.head_id).predecessor == mine.id
    assert [line.turns for line in lines(session)] == [2]


def test_pull_of_unknown_session_and_bad_remotes(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _alice, bob = two
    url = f"file://{bare(tmp_path)}"
    with pytest.raises(SyncError, match="has no session s_nope"):
        pull(bob, "s_nope", url, "file")
    for hostile in ("ext::sh -c touch% /tmp/pwned", "fd::3", "-uhack", "evil::x"):
        with pytest.raises(SyncError, match=r"refused|not allowed"):
            resolve_remote(hostile, tmp_path)
    with pytest.raises(SyncError, match="metadata"):
        resolve_remote(None, tmp_path, recorded="http://example.invalid/x.git")
    with pytest.raises(SyncError, match="no remote named 'origin'"):
        resolve_remote(None, tmp_path)
    turns(bob, "s_here", "a turn")
    missing = tmp_path / "nothere.git"
    for sync in (push, pull):  # git's reason, not its closing advice
        with pytest.raises(SyncError, match="does not appear to be a git repository"):
            sync(bob, "s_here", f"file://{missing}", "file")
    assert not any(p.name.startswith(".incoming") for p in bob.root.iterdir())


def craft(
    tmp_path: Path, source: Path, ref_id: str, files: dict[str, bytes | str], *extra: str
) -> Path:
    """A bundle of ``source``'s history plus one commit adding ``files`` (bytes: a file;
    str: a symlink to that target), under ``refs/openprogram/sessions/<ref_id>``."""
    work = tmp_path / f"craft-{len(list(tmp_path.iterdir()))}"
    subprocess.run(["git", "clone", "-q", str(source), str(work)], check=True)
    for rel, content in files.items():
        target = work / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            target.symlink_to(content)
        else:
            target.write_bytes(content)
        git(work, "add", "-f", rel)
    env = ["-c", "user.name=x", "-c", "user.email=x@x"]
    if files:
        git(work, *env, "commit", "-q", "-m", "crafted")
    git(work, "update-ref", f"refs/openprogram/sessions/{ref_id}", "HEAD")
    bundle = work.with_suffix(".bundle")
    git(work, "bundle", "create", "-q", str(bundle), f"refs/openprogram/sessions/{ref_id}", *extra)
    return bundle


def test_hostile_bundles_are_refused_and_nothing_changes(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice, bob = two
    turns(alice, "s_a", "one")
    src = alice.session_path("s_a")
    node = "history/0000/000001/00000099-c-n_evil.json"
    cases = {
        "refs outside": (
            craft(tmp_path, src, "s_a", {}, "main"),
            "outside session s_a's namespace",
        ),
        "symlink": (craft(tmp_path, src, "s_a", {node: "/etc/passwd"}), "symbolic link"),
        "stray file": (craft(tmp_path, src, "s_a", {"run.sh": b"echo hi"}), "unexpected file"),
        "attributes": (
            craft(tmp_path, src, "s_a", {".gitattributes": b"* filter=x"}),
            "unexpected file '.gitattributes'",
        ),
        "oversized": (
            craft(tmp_path, src, "s_a", {node: b"0" * (MAX_FILE_BYTES + 1)}),
            "MiB a session file may be",
        ),
    }
    junk = tmp_path / "junk.bundle"
    junk.write_bytes(b"# v2 git bundle\nnot really\n")
    cases["not a bundle"] = (junk, "not a valid git bundle")
    import_bundle(bob, export_bundle(alice, "s_a", tmp_path / "ok.bundle"))
    before = state(bob, "s_a")
    listing = sorted(p.name for p in bob.root.iterdir())
    for name, (bundle, message) in cases.items():
        with pytest.raises(SyncError, match=message):
            import_bundle(bob, bundle)  # into the existing session
        with pytest.raises(SyncError, match=message):
            import_bundle(bob, bundle, as_id="s_fresh")  # as a new one
        assert state(bob, "s_a") == before, name
        assert sorted(p.name for p in bob.root.iterdir()) == listing, name


@pytest.mark.parametrize("sha", [str.upper, lambda sha: "g" * 40], ids=["upper case", "not hex"])
def test_a_bundle_ref_not_named_by_40_lowercase_hex_is_refused_at_its_header(  # type: ignore[no-untyped-def]
    two, tmp_path: Path, sha
) -> None:
    """Refused as the header is read, before its pack is streamed to git."""
    alice, bob = two
    turns(alice, "s_a", "one")
    data = export_bundle(alice, "s_a", tmp_path / "ok.bundle").read_bytes()
    first, _, rest = data.partition(b"\n")
    tip, _, rest = rest.partition(b" ")
    bad = tmp_path / "bad.bundle"
    bad.write_bytes(first + b"\n" + sha(tip.decode()).encode() + b" " + rest)
    with pytest.raises(SyncError, match=r"^bad\.bundle: refused: a malformed git bundle header"):
        import_bundle(bob, bad)
    assert not bob.root.exists() or not any(bob.root.iterdir())


def test_bundle_naming_another_session_is_refused(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice, bob = two
    turns(alice, "s_a", "one")
    work = tmp_path / "w"
    subprocess.run(["git", "clone", "-q", str(alice.session_path("s_a")), str(work)], check=True)
    git(work, "update-ref", "refs/openprogram/sessions/s_other", "HEAD")
    bundle = tmp_path / "other.bundle"
    git(work, "bundle", "create", "-q", str(bundle), "refs/openprogram/sessions/s_other")
    with pytest.raises(SyncError, match="holds session 's_a', not 's_other'"):
        import_bundle(bob, bundle)
    assert not bob.root.exists() or not any(bob.root.iterdir())


def round_trip_over(url: str, alice: SessionStore, bob: SessionStore, protocols: str) -> None:
    turns(alice, "s_net", "one", "two")
    push(alice, "s_net", url, protocols)
    assert pull(bob, "s_net", url, protocols).status == "new"
    assert state(bob, "s_net") == state(alice, "s_net")
    turns(bob, "s_net", "three")
    push(bob, "s_net", url, protocols)
    assert pull(alice, "s_net", url, protocols).status == "fast-forward"
    assert state(alice, "s_net") == state(bob, "s_net")
    assert git(alice.session_path("s_net"), "fsck", "--strict", "--no-dangling") == ""


def test_push_pull_over_git_daemon(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from git_servers import git_daemon

    alice, bob = two
    remote = bare(tmp_path / "srv")
    with git_daemon(remote.parent) as base:
        round_trip_over(f"{base}/{remote.name}", alice, bob, "git")


def test_push_pull_over_smart_http_with_password(
    two, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from git_servers import smart_http

    alice, bob = two
    remote = bare(tmp_path / "srv")
    password = "s3cret-" + "horse-battery"
    askpass = tmp_path / "askpass.sh"  # git's own mechanism: it asks this program
    askpass.write_text(
        f'#!/bin/sh\ncase "$1" in Username*) echo alice;; *) echo {password};; esac\n'
    )
    askpass.chmod(0o700)
    with smart_http(remote.parent, "alice", password) as base:
        url = f"{base}/{remote.name}"
        turns(alice, "s_none", "x")
        with pytest.raises(SyncError, match="failed"):  # no credentials: refused, one line
            push(alice, "s_none", url, "http")
        monkeypatch.setenv("GIT_ASKPASS", str(askpass))
        round_trip_over(url, alice, bob, "http")
    for home in (alice.home, bob.home):
        for path in settled(home).rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert password.encode() not in path.read_bytes(), path


def test_remote_names_resolve_through_the_notebook_repository(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    git(project, "init", "-q")
    remote = bare(tmp_path)
    git(project, "remote", "add", "origin", str(remote))
    git(project, "remote", "add", "team", f"file://{remote}")
    url, protocols = resolve_remote(None, project / "notebooks")  # default: origin
    assert url == str(remote) and "ext" not in protocols.split(":")
    assert resolve_remote("team", project / "notebooks")[0] == f"file://{remote}"
    # a URL recorded in the notebook's metadata wins over origin when no REMOTE is typed
    assert resolve_remote(None, project, recorded="https://example.invalid/x.git")[0] == (
        "https://example.invalid/x.git"
    )
    with pytest.raises(SyncError, match="no remote named 'upstream'"):
        resolve_remote("upstream", project)


def test_passwords_never_shown() -> None:
    from openprogram.store.session.remotes import redact_url

    assert redact_url("https://alice:s3cret@host/x.git") == "https://host/x.git"
    assert redact_url("https://ghp_TOKEN@host/x.git") == "https://host/x.git"  # a token
    assert redact_url("ssh://git:pw@host/x.git") == "ssh://git@host/x.git"
    assert redact_url("ssh://git@host/x.git") == "ssh://git@host/x.git"
    assert redact_url("git@host:x.git") == "git@host:x.git"


def test_a_hostile_history_on_the_remote_is_refused_by_pull(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice, bob = two
    remote = bare(tmp_path)
    url = f"file://{remote}"
    turns(alice, "s_a", "one")
    push(alice, "s_a", url, "file")
    pull(bob, "s_a", url, "file")
    before = state(bob, "s_a")
    node = "history/0000/000001/00000099-c-n_evil.json"
    craft(tmp_path, alice.session_path("s_a"), "s_a", {node: "/etc/passwd"})
    work = next(p for p in tmp_path.iterdir() if p.name.startswith("craft-") and p.is_dir())
    git(work, "push", "-q", "--force", str(remote), "refs/openprogram/sessions/s_a")
    with pytest.raises(SyncError, match="symbolic link"):
        pull(bob, "s_a", url, "file")
    assert state(bob, "s_a") == before
    assert not (bob.session_path("s_a") / node).exists()
    assert [p.name for p in bob.root.iterdir()] == ["s_a"]


def long_session(store: SessionStore, sid: str, turns_: int) -> None:
    """``turns_`` committed turns of two nodes each, written through the store directly."""
    session = store.create_session(sid) if not store.exists(sid) else store.open(sid)
    for i in range(turns_):
        turn = session.begin_turn()
        cell = make_call("turn", "cell", input={"i": i})
        session.append(cell, turn=turn, advance_head=True)
        fn = make_call("function", f"f{turn}", caller=cell.id, status=COMPLETED)
        session.append(fn, turn=turn)
        cell.metadata["status"] = COMPLETED
        session.update(cell)
        session.commit(f"turn {turn}")


def test_pull_joins_diverged_copies_whose_sealed_buckets_are_left_out(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Turns live in git only: a pull still joins two lines, one of which rewrote a node
    of an old turn, and every node reads back."""
    alice, bob = two
    url = f"file://{bare(tmp_path)}"
    long_session(alice, "s_long", 205)  # buckets 0000 and 0001 sealed, 0002 open
    alice.close()
    push(alice, "s_long", url, "file")
    assert pull(bob, "s_long", url, "file").status == "new"
    path = bob.session_path("s_long")
    assert not (path / "history").exists()  # no working tree: nothing checked out

    long_session(alice, "s_long", 2)
    push(alice, "s_long", url, "file")
    session = bob.open("s_long")
    old = next(e for e in session.index() if e["name"] == "f7")  # in bucket 0000
    node = session.get(old["id"])
    node.metadata["status"] = "interrupted"
    session.update(node)
    session.commit("rewrite an old node")
    long_session(bob, "s_long", 1)
    assert not (path / "history" / "0000").exists()  # the rewrite went to git only

    assert pull(bob, "s_long", url, "file").status == "merged"
    assert not (path / "history" / "0000").exists()
    assert git(path, "fsck", "--strict", "--no-dangling") == ""
    fresh = SessionStore(bob.home)
    try:
        session = fresh.open("s_long")
        alice_ids = state(alice, "s_long")[0]
        nodes = session.nodes()
        assert alice_ids < {n.id for n in nodes} and session.problems == []
        assert len(nodes) == len(session.index()) == 1 + 2 * 208
        assert session.get(old["id"]).status == "interrupted"
    finally:
        fresh.close()


def test_two_copies_past_a_full_bucket_pull_as_a_fast_forward(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """No commit but a turn's (no bucket index): the puller's next pull takes the writer's
    line as it is — no merge commit that only the puller has, the same turn count on both
    machines."""
    alice, bob = two
    url = f"file://{bare(tmp_path)}"
    long_session(alice, "s_seal", 98)
    alice_path, bob_path = alice.session_path("s_seal"), bob.session_path("s_seal")
    push(alice, "s_seal", url, "file")
    assert pull(bob, "s_seal", url, "file").status == "new"
    long_session(alice, "s_seal", 3)  # bucket 0001 opens: 0000 is full
    push(alice, "s_seal", url, "file")
    assert pull(bob, "s_seal", url, "file").status == "fast-forward"
    assert git(bob_path, "log", "-1", "--format=%s").startswith("turn")
    assert git(alice_path, "log", "-1", "--format=%s").startswith("turn")
    long_session(alice, "s_seal", 1)
    push(alice, "s_seal", url, "file")

    got = pull(bob, "s_seal", url, "file")
    assert (got.status, got.new_turns) == ("fast-forward", 1)
    assert git(bob_path, "rev-parse", "main") == git(alice_path, "rev-parse", "main")
    counts = [store.open("s_seal").totals()["turns"] for store in (alice, bob)]
    metas = [json.loads(git(p, "show", "main:meta.json"))["turns"] for p in (alice_path, bob_path)]
    assert counts == metas == [102, 102]
