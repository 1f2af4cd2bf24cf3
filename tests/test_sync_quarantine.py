"""The quarantine a pull receives into is kept, emptied, for the session's next pull — and a
kept one is used only when it is exactly an empty repository of ours (a session folder can
come from anyone).  Real git over ``file://``, two stores."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers import status_shows_nothing
from test_sync import bare, git, state, turns

from openprogram.errors import SyncError
from openprogram.store.session import incoming as quarantines
from openprogram.store.session.sync import export_bundle, import_bundle, pull, push


def spare_of(store, sid: str) -> Path:  # type: ignore[no-untyped-def]
    return store.session_path(sid) / ".git" / quarantines.SPARE


def test_pulls_keep_an_empty_quarantine_and_fast_forward(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice, bob = two
    url = f"file://{bare(tmp_path)}"
    turns(alice, "s_q", "one")
    push(alice, "s_q", url, "file")
    assert pull(bob, "s_q", url, "file").status == "new"
    for round_ in range(2):  # the second pull receives into the spare the first one kept
        turns(alice, "s_q", f"more {round_}", f"again {round_}")
        push(alice, "s_q", url, "file")
        got = pull(bob, "s_q", url, "file")
        assert (got.status, got.new_turns) == ("fast-forward", 2)
        assert quarantines.is_skeleton(spare_of(bob, "s_q"))
        assert not [p.name for p in bob.root.iterdir() if p.name.startswith(".incoming")]
    assert state(bob, "s_q") == state(alice, "s_q")
    assert pull(bob, "s_q", url, "file").status == "up to date"
    path = bob.session_path("s_q")
    assert git(path, "fsck", "--strict", "--no-dangling") == ""
    assert status_shows_nothing(path)


def test_a_planted_spare_is_not_used(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice, bob = two
    url = f"file://{bare(tmp_path)}"
    turns(alice, "s_p", "one")
    push(alice, "s_p", url, "file")
    pull(bob, "s_p", url, "file")
    marker = tmp_path / "ran"
    hook = f"#!/bin/sh\ntouch {marker}\n"
    outside = tmp_path / "outside"
    outside.mkdir()
    plants = {
        "a hook": lambda spare: _write(spare / ".git" / "hooks" / "post-checkout", hook),
        "a config": lambda spare: _write(
            spare / ".git" / "config", f"[core]\n\tfsmonitor = touch {marker}\n"
        ),
        "objects linked elsewhere": lambda spare: _relink(spare / ".git" / "objects", outside),
        "a borrowed store": lambda spare: _write(
            spare / ".git" / "objects" / "info" / "alternates", f"{outside}\n"
        ),
        "itself a link": lambda spare: _relink(spare, outside),
        "a ref": lambda spare: _write(spare / ".git" / "refs" / "openprogram" / "x", "0" * 40),
    }
    for i, (name, plant) in enumerate(plants.items()):
        spare = spare_of(bob, "s_p")
        if not os.path.lexists(spare):
            quarantines.make(spare, None)
        assert quarantines.is_skeleton(spare), name
        plant(spare)
        assert not quarantines.is_skeleton(spare), name
        turns(alice, "s_p", f"turn {i}")
        push(alice, "s_p", url, "file")
        got = pull(bob, "s_p", url, "file")
        assert (got.status, got.new_turns) == ("fast-forward", 1), name
        assert quarantines.is_skeleton(spare_of(bob, "s_p")), name  # a clean one kept
        assert not marker.exists(), name
        assert list(outside.iterdir()) == [], name
    assert state(bob, "s_p") == state(alice, "s_p")
    assert git(bob.session_path("s_p"), "fsck", "--strict", "--no-dangling") == ""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if "hooks" in path.parts:
        path.chmod(0o755)


def _relink(path: Path, target: Path) -> None:
    subprocess.run(["rm", "-rf", str(path)], check=True)
    os.symlink(target, path)


def test_a_pull_past_the_caps_is_refused_and_changes_nothing(
    two, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """What a fetch brings is counted from its pack (git received and checked it): more
    objects than the cap is one line, the session as it was, the spare kept clean."""
    alice, bob = two
    url = f"file://{bare(tmp_path)}"
    turns(alice, "s_c", "one")
    push(alice, "s_c", url, "file")
    pull(bob, "s_c", url, "file")
    before = state(bob, "s_c")
    turns(alice, "s_c", "two", "three", "four")
    push(alice, "s_c", url, "file")
    monkeypatch.setenv("OPENPROGRAM_INCOMING_MAX_OBJECTS", "5")
    with pytest.raises(SyncError, match="more than 5 git objects"):
        pull(bob, "s_c", url, "file")
    assert state(bob, "s_c") == before
    assert quarantines.is_skeleton(spare_of(bob, "s_c"))
    monkeypatch.delenv("OPENPROGRAM_INCOMING_MAX_OBJECTS")
    assert pull(bob, "s_c", url, "file").new_turns == 3


def test_what_arrived_is_counted_as_git_reads_it(
    two, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The types and sizes the caps and the layout check use are what ``git cat-file
    --batch-check`` says of every object that arrives, deltas (chains of them) included:
    caps set at exactly what the history inflates to and holds let it in, a byte or an
    object less refuses it."""
    alice, bob = two
    text = "line of a node file that repeats " * 2000  # similar node files: deltas
    turns(alice, "s_k", *(f"{text}{i}" for i in range(12)))
    bundle = export_bundle(alice, "s_k", tmp_path / "k.bundle")
    deltas = git(bundle.parent, "verify-pack", "-v", str(_indexed(bundle, tmp_path)))
    assert "chain length = 2" in deltas  # deltas of deltas travel in the bundle
    src = alice.session_path("s_k")
    listed = git(src, "rev-list", "--objects", "main").splitlines()
    objects = "".join(line.split()[0] + "\n" for line in listed).encode()
    sizes = subprocess.run(
        ["git", "cat-file", "--batch-check=%(objectsize)"],
        cwd=src, input=objects, capture_output=True, check=True,
    ).stdout.split()  # fmt: skip
    total, count = sum(map(int, sizes)), len(sizes)
    for name, value, refused in (
        ("OPENPROGRAM_INCOMING_MAX_BYTES", total - 1, "inflate to more than"),
        ("OPENPROGRAM_INCOMING_MAX_OBJECTS", count - 1, f"more than {count - 1} git objects"),
    ):
        monkeypatch.setenv(name, str(value))
        with pytest.raises(SyncError, match=refused):
            import_bundle(bob, bundle)
        assert not bob.exists("s_k")
        monkeypatch.setenv(name, str(value + 1))  # exactly what arrives: let in
    monkeypatch.setenv("OPENPROGRAM_INCOMING_MAX_BYTES", str(total))
    monkeypatch.setenv("OPENPROGRAM_INCOMING_MAX_OBJECTS", str(count))
    assert import_bundle(bob, bundle).status == "new"
    assert state(bob, "s_k") == state(alice, "s_k")


def _indexed(bundle: Path, tmp_path: Path) -> Path:
    """The index of the pack a bundle carries (``git index-pack`` of its pack part)."""
    data = bundle.read_bytes()
    pack = tmp_path / "bundle.pack"
    pack.write_bytes(data[data.index(b"PACK") :])
    git(tmp_path, "index-pack", str(pack))
    return pack.with_suffix(".idx")


def test_an_incremental_bundle_arrives_on_the_copy_that_has_its_start(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A bundle of only the newest turns (its pack thin: git completes it from the
    session's objects) is typed and sized from its scanned headers and what git added."""
    alice, bob = two
    turns(alice, "s_i", "one")
    import_bundle(bob, export_bundle(alice, "s_i", tmp_path / "full.bundle"))
    src = alice.session_path("s_i")
    old = git(src, "rev-parse", "main").strip()
    turns(alice, "s_i", "two", "three")
    git(src, "update-ref", "refs/openprogram/sessions/s_i", "main")
    bundle = tmp_path / "inc.bundle"
    git(src, "bundle", "create", "-q", str(bundle), "refs/openprogram/sessions/s_i", f"^{old}")
    got = import_bundle(bob, bundle)
    assert (got.status, got.new_turns) == ("fast-forward", 2)
    assert state(bob, "s_i") == state(alice, "s_i")
