"""The quarantine a pull receives into is kept, emptied, for the session's next pull — and a
kept one is used only when it is exactly an empty repository of ours (a session folder can
come from anyone).  Real git over ``file://``, two stores."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from test_sync import bare, git, state, turns

from openprogram.store.session import maintenance, quarantines
from openprogram.store.session.sync import pull, push


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
    maintenance.wait_for(path)
    assert git(path, "fsck", "--strict", "--no-dangling") == ""
    assert git(path, "status", "--porcelain") == ""


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
