"""Labels are unique across people (issue 35 item 6): two people who each go on from turn 4
make two turns 5; the log, ``sessions diff`` and ``--from`` name them ``5@alice`` and
``5@bob``, a bare ``5`` is refused with both listed, and a number one person alone made
stays as it always was (``turn 3``).

Two people are two ``OPENPROGRAM_HOME``s and two git identities; the remote is a bare
repository reached by ``file://``.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_team_authors import IDENTITY_VARS, Person

from openprogram.cli import main
from openprogram.compare.labels import author_key, parse_label, relabel_log
from openprogram.compare.sessions import branch_point
from openprogram.context.nodes import COMPLETED, make_call
from openprogram.errors import UserError
from openprogram.providers import create_runtime
from openprogram.store.session import session_context
from openprogram.store.session.records import forget_author
from openprogram.store.session.sync import pull, push
from openprogram.view import compute_layout
from openprogram.view.saved import saved_view
from openprogram_magics.widget import DagWidget


@pytest.fixture(autouse=True)
def no_identity(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in IDENTITY_VARS:
        monkeypatch.delenv(var, raising=False)
    forget_author()
    yield
    forget_author()


@pytest.fixture
def crossed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Person, Person]]:
    """Alice's turns 1-3, then a turn 4 each, exchanged both ways."""
    alice = Person(tmp_path, "Alice Liddell", "alice@example.org", monkeypatch)
    bob = Person(tmp_path, "Bob Builder", "bob@example.org", monkeypatch)
    remote = tmp_path / "team.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    url = f"file://{remote}"
    cells(alice, "s_lab", "a1", "a2", "a3")
    push(alice.act().store, "s_lab", url, "file")
    pull(bob.act().store, "s_lab", url, "file")
    cells(alice, "s_lab", "alice's four")
    cells(bob, "s_lab", "bob's four")
    push(alice.act().store, "s_lab", url, "file")
    assert pull(bob.act().store, "s_lab", url, "file").status == "merged"
    push(bob.store, "s_lab", url, "file")
    pull(alice.act().store, "s_lab", url, "file")
    yield alice, bob
    alice.store.close()
    bob.store.close()


def cells(person: Person, sid: str, *texts: str) -> None:
    """Cell turns as a notebook makes them: a turn-level node each, then a call under it."""
    person.act()
    for text in texts:
        with session_context(
            sid, db=person.store, message=text, runtime=create_runtime("test")
        ) as h:
            top = make_call("turn", "cell", input={"text": text}, status=COMPLETED)
            top = h.writer.append(top, turn_level=True)
            h.writer.append(make_call("function", "echo", caller=top.id, status=COMPLETED))


def run(person: Person, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    person.act()
    capsys.readouterr()
    code = main(["--home", str(person.store.home), *argv])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_log_labels_a_number_two_people_made_by_author(
    crossed: tuple[Person, Person], capsys: pytest.CaptureFixture[str]
) -> None:
    for person in crossed:
        code, said = run(person, capsys, "sessions", "log", "s_lab")
        assert code == 0, said
        summaries = [re.sub(r"^.*?  +", "", line, count=1) for line in said.splitlines()]
        assert "turn 4@alice: alice's four" in summaries, said
        assert "turn 4@bob: bob's four" in summaries, said
        assert {"turn 1: a1", "turn 2: a2", "turn 3: a3"} <= set(summaries), said
        assert not any(s.startswith("turn 4:") for s in summaries), said


def test_diff_refuses_a_shared_number_and_takes_a_label(
    crossed: tuple[Person, Person], capsys: pytest.CaptureFixture[str]
) -> None:
    alice, _bob = crossed
    code, said = run(alice, capsys, "sessions", "diff", "s_lab", "3", "4")
    assert code == 2, said
    assert "turn 4 is ambiguous" in said and "4@alice (" in said and "4@bob (" in said, said
    code, said = run(alice, capsys, "sessions", "diff", "s_lab", "4@alice", "4.bob")
    assert code == 0, said
    assert "turn 4@alice" in said and "turn 4@bob" in said, said
    code, said = run(alice, capsys, "sessions", "diff", "s_lab", "4@carol", "3")
    assert code == 2 and "no turn 4@carol" in said and "4@alice, 4@bob" in said, said
    code, said = run(alice, capsys, "sessions", "diff", "s_lab", "2", "3")  # one author: as ever
    assert code == 0 and "turn 2 (" in said and "turn 3 (" in said, said


def test_from_takes_a_label_and_refuses_a_shared_number(
    crossed: tuple[Person, Person], monkeypatch: pytest.MonkeyPatch
) -> None:
    alice, _bob = crossed
    monkeypatch.setenv("OPENPROGRAM_HOME", str(alice.store.home))
    session = alice.store.open("s_lab")
    by_text = {n.input.get("text") if isinstance(n.input, dict) else n.input: n.id
               for n in session.nodes() if n.kind in ("turn", "reply")}  # fmt: skip
    with pytest.raises(UserError, match=r"turn 4 is ambiguous.*4@alice.*4@bob"):
        branch_point("s_lab", "4")
    found = branch_point("s_lab", "4@bob")
    assert session.get(found).metadata["author"]["name"] == "Bob Builder", by_text
    assert branch_point("s_lab", "#2") == branch_point("s_lab", "2")


def test_label_rules() -> None:
    assert author_key("Alice Liddell", "alice@example.org") == "alice"
    assert author_key("Bob Builder", "") == "bob"
    assert author_key("", "") == ""
    assert parse_label("5@Alice") is not None and parse_label("5@Alice").key == "alice"  # type: ignore[union-attr]
    assert parse_label("#5") is not None and parse_label("head") is None
    rows = [("turn 5: x", "A", "a@x"), ("turn 5: y", "B", "b@x"), ("turn 6: z", "A", "a@x")]
    assert relabel_log(rows) == ["turn 5@a: x", "turn 5@b: y", "turn 6: z"]


def test_the_dag_detail_names_the_turn_by_label(crossed: tuple[Person, Person]) -> None:
    alice, _bob = crossed
    session = alice.act().store.open("s_lab")
    nodes = [n.to_dict() for n in session.nodes()]
    turn_of = {n["input"]["text"]: n["id"] for n in nodes if n["metadata"]["kind"] == "turn"}
    # the live widget: a click's detail
    widget = DagWidget(nodes, session.head_id)
    assert widget.select(turn_of["alice's four"])["turn"] == "4@alice"  # type: ignore[index]
    assert widget.select(turn_of["bob's four"])["turn"] == "4@bob"  # type: ignore[index]
    assert widget.select(turn_of["a3"])["turn"] == 3  # type: ignore[index]
    # the view saved in the notebook
    details = saved_view(compute_layout(nodes, session.head_id))["details"]
    assert details[turn_of["bob's four"]]["turn"] == "4@bob"
    assert details[turn_of["a2"]]["turn"] == 2
