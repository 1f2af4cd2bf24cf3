"""Arrivals are what they say (issue 34, item 3): an embedded part imports only the session
it names; an import under an id that holds an unrelated history refuses unless ``--join``;
an import and a read of a session file share one size rule.

Real git, two ``OPENPROGRAM_HOME``s (alice's and bob's), real bundles and notebooks."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_sync import craft, git, turns

from openprogram.cli import main as cli_main
from openprogram.errors import CorruptedFileWarning, SyncError, UserError
from openprogram.store.session.files import MAX_FILE_BYTES
from openprogram.store.session.history import Repository
from openprogram.store.session.store import SessionStore
from openprogram.store.session.sync import export_bundle, import_bundle

Machines = tuple[SessionStore, SessionStore]


@pytest.fixture
def machines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Machines]:
    """Alice's store and bob's; the notebook commands (``default_db``) are bob's."""
    from openprogram.store.session import store as session_db

    alice, bob = SessionStore(tmp_path / "alice"), SessionStore(tmp_path / "bob")
    monkeypatch.setenv("OPENPROGRAM_HOME", str(bob.home))
    monkeypatch.setattr(session_db, "_db", None)
    yield alice, bob
    alice.close()
    bob.close()


def snapshot(store: SessionStore, sid: str) -> tuple[object, ...]:
    """Everything a user could notice of session ``sid`` and the sessions folder: its nodes,
    HEAD, git history, the objects it holds, and the folders next to it."""
    session = store.open(sid)
    path = store.session_path(sid)
    objects = sorted(
        str(p.relative_to(path)) for p in (path / ".git" / "objects").rglob("*") if p.is_file()
    )
    return (
        sorted(e["id"] for e in session.index()),
        session.head_id,
        git(path, "log", "--format=%H", "main"),
        objects,
        sorted(p.name for p in store.root.iterdir()),
    )


def notebook_with_part(tmp_path: Path, bundle: Path, named: object) -> Path:
    """A saved notebook whose ``%openprogram embed`` output part names session ``named``
    and carries ``bundle``."""
    from openprogram_magics.sharing import BUNDLE_MIME

    data = bundle.read_bytes()
    part = {
        "session_id": named,
        "format": "git-bundle",
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "data": base64.b64encode(data).decode(),
    }
    output = {"output_type": "display_data", "data": {BUNDLE_MIME: part}, "metadata": {}}
    cell = {"cell_type": "code", "source": "%openprogram embed", "metadata": {}}
    nb = {"cells": [{**cell, "outputs": [output]}], "metadata": {}, "nbformat": 4}
    path = tmp_path / f"nb-{len(list(tmp_path.iterdir()))}.ipynb"
    path.write_text(json.dumps({**nb, "nbformat_minor": 5}))
    return path


def test_an_embedded_part_imports_only_the_session_it_names(
    machines: Machines, tmp_path: Path
) -> None:
    from openprogram_magics.sharing import import_embedded

    alice, bob = machines
    turns(bob, "s_victim", "bob's own work")
    turns(alice, "s_victim", "planted")  # the same id, another history
    planted = export_bundle(alice, "s_victim", tmp_path / "planted.bundle")
    before = snapshot(bob, "s_victim")
    for as_id in (None, "s_other"):
        nb = notebook_with_part(tmp_path, planted, "s_emb")
        with pytest.raises(UserError) as caught:
            import_embedded(str(nb), as_id)
        assert str(caught.value) == (
            "refused: the embedded part names session s_emb but its bundle carries session "
            "s_victim; nothing imported"
        )
        assert snapshot(bob, "s_victim") == before
    for named in (None, 7, "../s_victim"):
        with pytest.raises(UserError, match="its part names no valid session id"):
            import_embedded(str(notebook_with_part(tmp_path, planted, named)), None)
    assert snapshot(bob, "s_victim") == before
    assert not bob.exists("s_emb") and not bob.exists("s_other")

    # a part that names what it carries arrives as ever
    turns(alice, "s_emb", "shared")
    honest = export_bundle(alice, "s_emb", tmp_path / "honest.bundle")
    got = import_embedded(str(notebook_with_part(tmp_path, honest, "s_emb")), None)
    assert (got.session_id, got.status) == ("s_emb", "new")


def cli(home: Path, *argv: str) -> int:
    return cli_main(["--home", str(home), *argv])


def test_an_import_under_an_id_with_an_unrelated_history_refuses_unless_join(
    machines: Machines, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alice, bob = machines
    turns(alice, "s_a", "alice one", "alice two")
    bundle = export_bundle(alice, "s_a", tmp_path / "a.bundle")
    turns(bob, "s_mine", "bob's own work")
    before = snapshot(bob, "s_mine")

    with pytest.raises(SyncError) as caught:
        import_bundle(bob, bundle, as_id="s_mine")
    assert "\n" not in str(caught.value)
    assert "shares no root" in str(caught.value) and "--join" in str(caught.value)
    assert snapshot(bob, "s_mine") == before

    capsys.readouterr()
    assert cli(bob.home, "sessions", "import", str(bundle), "--as", "s_mine") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "session s_mine here has a history of its own" in err
    assert snapshot(bob, "s_mine") == before

    assert cli(bob.home, "sessions", "import", str(bundle), "--as", "s_mine", "--join") == 0
    assert "s_mine: joined" in capsys.readouterr().out
    mine = SessionStore(bob.home).open("s_mine")  # what the command wrote
    assert {n.input.get("text") for n in mine.nodes() if n.kind == "function"} == {
        "alice one",
        "alice two",
        "bob's own work",
    }

    # a copy under a new id, then that copy again: one history, no --join needed
    assert import_bundle(bob, bundle, as_id="s_copy").status == "new"
    turns(alice, "s_a", "alice three")
    grown = export_bundle(alice, "s_a", tmp_path / "a2.bundle")
    assert import_bundle(bob, grown, as_id="s_copy").status == "fast-forward"
    # a session made under that id but never run has nothing to join
    bob.create_session("s_empty")
    assert import_bundle(bob, bundle, as_id="s_empty").status == "joined"


def test_a_join_refused_keeps_none_of_what_arrived(machines: Machines, tmp_path: Path) -> None:
    """A history of the same id that shares no commit with bob's but begins at the same root
    node cannot be joined: refused in one line, and not one object of it stays in the
    session (before, each refusal left its pack: ~1 MB here, whatever size it carried)."""
    alice, bob = machines
    turns(alice, "s_j", "one")
    import_bundle(bob, export_bundle(alice, "s_j", tmp_path / "ok.bundle"))
    work = tmp_path / "orphan"
    subprocess.run(["git", "clone", "-q", str(alice.session_path("s_j")), str(work)], check=True)
    git(work, "checkout", "-q", "--orphan", "unrelated")
    node = work / "history" / "0000" / "000001" / "00000099-c-n_big.json"
    node.parent.mkdir(parents=True, exist_ok=True)
    node.write_text(json.dumps({"id": "n_big", "filler": os.urandom(1 << 19).hex()}))
    git(work, "add", "-f", str(node.relative_to(work)))
    git(work, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-q", "-m", "begun apart")
    git(work, "update-ref", "refs/openprogram/sessions/s_j", "HEAD")
    bundle = tmp_path / "unrelated.bundle"
    git(work, "bundle", "create", "-q", str(bundle), "refs/openprogram/sessions/s_j")
    before = snapshot(bob, "s_j")
    with pytest.raises(SyncError, match="no root to join at"):
        import_bundle(bob, bundle)
    assert snapshot(bob, "s_j") == before


def node_file(template: dict[str, object], size: int) -> bytes:
    """A valid node file of exactly ``size`` bytes (its output padded)."""
    node = {**template, "id": "n_big", "seq": 99, "output": ""}
    empty = len(json.dumps(node).encode())
    node["output"] = "x" * (size - empty)
    data = json.dumps(node).encode()
    assert len(data) == size
    return data


def test_an_import_and_a_read_of_a_session_file_share_one_size_rule(
    machines: Machines, tmp_path: Path
) -> None:
    alice, bob = machines
    turns(alice, "s_a", "one")
    src = alice.session_path("s_a")
    files = git(src, "ls-tree", "-r", "--name-only", "main").split()
    rel = next(f for f in files if f.startswith("history/") and "-l-" in f)
    template = json.loads(git(src, "show", f"main:{rel}"))
    big = f"{rel.rsplit('/', 1)[0]}/00000099-c-n_big.json"
    for size, fits in ((MAX_FILE_BYTES, True), (MAX_FILE_BYTES + 1, False)):
        data = node_file(template, size)
        sid = f"s_{size}"
        bundle = craft(tmp_path, src, "s_a", {big: data})
        # the import: arrives whole, or is refused in one line naming the rule
        if fits:
            assert import_bundle(bob, bundle, as_id=sid).status == "new"
            with warnings.catch_warnings():
                warnings.simplefilter("error", CorruptedFileWarning)
                assert "n_big" in {n.id for n in bob.open(sid).nodes()}
        else:
            with pytest.raises(SyncError, match=f"over the {MAX_FILE_BYTES >> 20} MiB") as c:
                import_bundle(bob, bundle, as_id=sid)
            assert "\n" not in str(c.value) and not bob.exists(sid)
        # the reader: the same file written into a session here is read or refused alike
        carol = SessionStore(tmp_path / f"carol{size}")
        turns(carol, "s_local", "one")
        carol.close()
        local = carol.session_path("s_local")  # committed here by whatever means
        listed = git(local, "ls-tree", "-r", "--name-only", "main").split()
        folder = next(f for f in listed if f.startswith("history/") and "-l-" in f)
        repo = Repository(local)
        repo.commit({f"{folder.rsplit('/', 1)[0]}/00000099-c-n_big.json": data}, "written here")
        repo.close()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CorruptedFileWarning)
            ids = {n.id for n in SessionStore(carol.home).open("s_local").nodes()}
        refused = [w for w in caught if issubclass(w.category, CorruptedFileWarning)]
        assert ("n_big" in ids) == fits
        assert bool(refused) != fits
        shutil.rmtree(carol.home)
