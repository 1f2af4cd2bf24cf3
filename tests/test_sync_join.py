"""Two people who each began the same session id before either had the other's copy: the
first pull joins the two histories (issue 19 item 5) instead of failing in ``git
merge-base``.  Real git, two ``OPENPROGRAM_HOME``s, a bare repository as the remote."""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers import status_shows_nothing
from test_sync import bare, turns

from openprogram.store.session.store import SessionStore
from openprogram.store.session.sync import export_bundle, import_bundle, lines, pull, push


def chain(store: SessionStore, sid: str) -> dict[str, str | None]:
    return {e["id"]: e["predecessor"] for e in store.open(sid).index() if e["caller"] is None}


def roots(store: SessionStore, sid: str) -> list[str]:
    return [e["id"] for e in store.open(sid).index() if e["kind"] == "root"]


def test_a_session_begun_on_both_machines_joins_on_the_first_pull(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice, bob = two
    url = f"file://{bare(tmp_path)}"
    turns(alice, "s_team", "alice one", "alice two")
    push(alice, "s_team", url, "file")
    turns(bob, "s_team", "bob before pulling")  # the notebook's id, not pulled yet
    bob_head = bob.open("s_team").head_id
    alice_nodes = set(chain(alice, "s_team"))
    bob_nodes = set(chain(bob, "s_team"))
    (bob_root,) = roots(bob, "s_team")
    (alice_root,) = roots(alice, "s_team")

    got = pull(bob, "s_team", url, "file")
    assert got.status == "joined"
    text = got.describe()
    assert "\n" not in text and "nothing lost" in text and "2 turn(s) arrived" in text
    joined = chain(bob, "s_team")
    assert set(joined) == alice_nodes | bob_nodes - {bob_root}  # every turn, one root
    assert roots(bob, "s_team") == [alice_root]
    (bob_first,) = [n for n in bob_nodes - alice_nodes if joined.get(n) == alice_root]
    assert bob.open("s_team").get(bob_first).metadata["joined_from_root"] == bob_root
    assert bob.open("s_team").head_id == bob_head  # bob's HEAD stays on his line
    assert [line.turns for line in lines(bob.open("s_team"))] == [2]  # alice's line
    fsck = subprocess.run(["git", "fsck", "--strict"], cwd=bob.session_path("s_team"))
    assert fsck.returncode == 0
    assert status_shows_nothing(bob.session_path("s_team"))  # maintenance

    turns(bob, "s_team", "bob after pulling")  # continues his line, as usual
    push(bob, "s_team", url, "file")  # the join holds alice's line: a fast-forward
    assert pull(alice, "s_team", url, "file").status == "fast-forward"
    assert set(chain(alice, "s_team")) == set(chain(bob, "s_team"))
    assert alice.open("s_team").head_id != bob.open("s_team").head_id  # each keeps theirs


def test_an_embedded_or_bundled_copy_joins_the_same_way(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice, bob = two
    turns(alice, "s_team", "alice one")
    bundle = export_bundle(alice, "s_team", tmp_path / "team.bundle")
    turns(bob, "s_team", "bob one")
    got = import_bundle(bob, bundle)
    assert got.status == "joined" and got.new_turns == 1
    assert len(roots(bob, "s_team")) == 1
    again = import_bundle(bob, bundle)
    assert again.status == "up to date"


def test_a_copy_with_nothing_of_its_own_takes_the_arrived_head(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice, bob = two
    turns(alice, "s_team", "alice one")
    bob.create_session("s_team")  # created (e.g. `%openprogram new --id`), never run
    got = import_bundle(bob, export_bundle(alice, "s_team", tmp_path / "t.bundle"))
    assert got.status == "joined"
    assert bob.open("s_team").head_id == alice.open("s_team").head_id
    assert roots(bob, "s_team") == roots(alice, "s_team")
