"""One step to sync (issue 35 item 3): ``openprogram git-setup --hooks`` makes the notebooks'
sessions travel with ``git push`` / ``git pull`` / ``git checkout``.  Real git: a bare
repository, clones with their own ``OPENPROGRAM_HOME`` and identities; the hooks run as git
runs them (separate processes)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import nbformat
import pytest
from test_sync import turns

from openprogram.cli import main as cli_main
from openprogram.store.session.store import SessionStore
from openprogram_magics.githooks import HOOKS, MARK, MIME_TYPE, install_hooks

SESSION_REF = "refs/openprogram/sessions/"


class Clone:
    """A person's clone of the project: their own home (sessions) and git identity."""

    def __init__(self, tmp: Path, origin: Path, name: str) -> None:
        self.name = name
        self.home = tmp / f"home_{name}"
        self.repo = tmp / name
        self.store = SessionStore(self.home)
        run(tmp, "clone", "-q", str(origin), str(self.repo))
        run(self.repo, "config", "user.name", name)
        run(self.repo, "config", "user.email", f"{name}@example.invalid")

    def git(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        """``git args`` as this person types it (their home, so the hooks use it)."""
        env = {**os.environ, "OPENPROGRAM_HOME": str(self.home)}
        done = subprocess.run(
            ["git", *args], cwd=self.repo, env=env, capture_output=True, text=True, check=False
        )
        if ok:
            assert done.returncode == 0, done.stdout + done.stderr
        return done

    def notebook(self, name: str, sid: str, text: str = "") -> None:
        """A notebook naming session ``sid``, committed."""
        nb = nbformat.v4.new_notebook()
        nb.metadata["openprogram"] = {"session_id": sid, "version": 1}
        nb.cells = [nbformat.v4.new_markdown_cell(f"# {name} {text}")]
        nbformat.write(nb, self.repo / name)
        self.git("add", name)
        self.git("commit", "-qm", f"{self.name}: {name} {text}")


def run(where: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, check=True)
    return done.stdout


def remote_refs(origin: Path) -> dict[str, str]:
    out = run(origin, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ", 1) for line in out.splitlines())


def head_of(store: SessionStore, sid: str) -> str:
    return run(store.session_path(sid), "rev-parse", "main").strip()


@pytest.fixture
def team(tmp_path: Path) -> tuple[Path, Clone, Clone]:
    origin = tmp_path / "origin.git"
    run(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    alice = Clone(tmp_path, origin, "alice")
    (alice.repo / "README.md").write_text("the project\n")
    alice.git("add", "README.md")
    alice.git("commit", "-qm", "start")
    alice.git("push", "-q", "-u", "origin", "main")
    bob = Clone(tmp_path, origin, "bob")
    for person in (alice, bob):
        assert cli_main(["git-setup", "--hooks", str(person.repo)]) == 0
    yield origin, alice, bob
    alice.store.close()
    bob.store.close()


def test_push_sends_the_session_first_and_pull_brings_it(
    team: tuple[Path, Clone, Clone],
) -> None:
    origin, alice, bob = team
    turns(alice.store, "nb_review", "one", "two")
    alice.notebook("review.ipynb", "nb_review")
    pushed = alice.git("push", "origin", "main")
    assert "session nb_review pushed to" in pushed.stderr and "review.ipynb" in pushed.stderr
    refs = remote_refs(origin)
    assert refs[SESSION_REF + "nb_review"] == head_of(alice.store, "nb_review")

    # Bob's `git pull` brings the notebook and its session
    assert not bob.store.exists("nb_review")
    pulled = bob.git("pull", "-q", "--no-rebase", "origin", "main")
    assert "session nb_review: new" in pulled.stderr
    assert head_of(bob.store, "nb_review") == head_of(alice.store, "nb_review")

    # Bob runs a turn and pushes the notebook: his turn goes first; Alice's pull brings it
    turns(bob.store, "nb_review", "bob's question")
    bob.notebook("review.ipynb", "nb_review", "with bob's question")
    bob.git("push", "-q", "origin", "main")
    assert remote_refs(origin)[SESSION_REF + "nb_review"] == head_of(bob.store, "nb_review")
    pulled = alice.git("pull", "--no-rebase", "origin", "main")
    assert "session nb_review: fast-forward, 1 turn(s) arrived" in pulled.stderr
    assert head_of(alice.store, "nb_review") == head_of(bob.store, "nb_review")

    # a branch with a new notebook: checking it out brings that notebook's session
    alice.git("checkout", "-q", "-b", "triage")
    turns(alice.store, "nb_triage", "three")
    alice.notebook("triage.ipynb", "nb_triage")
    alice.git("push", "-q", "origin", "triage")
    bob.git("fetch", "-q", "origin")
    assert not bob.store.exists("nb_triage")
    switched = bob.git("checkout", "triage")
    assert "session nb_triage: new" in switched.stderr
    assert head_of(bob.store, "nb_triage") == head_of(alice.store, "nb_triage")
    # back to main: nothing to pull, nothing said
    assert "openprogram" not in bob.git("checkout", "main").stderr


def test_a_notebook_whose_session_cannot_reach_the_remote_is_refused(
    team: tuple[Path, Clone, Clone],
) -> None:
    origin, alice, _bob = team
    before = remote_refs(origin)
    # the notebook names a session this home does not hold (run under another home)
    alice.notebook("elsewhere.ipynb", "nb_elsewhere")
    refused = alice.git("push", "origin", "main", ok=False)
    assert refused.returncode != 0
    said = [line for line in refused.stderr.splitlines() if line.startswith("openprogram:")]
    assert len(said) == 1, refused.stderr
    assert "session nb_elsewhere of elsewhere.ipynb is missing on origin" in said[0]
    assert "openprogram sessions push nb_elsewhere origin" in said[0]
    assert remote_refs(origin) == before  # the branch did not move: nothing silent

    # once the session is here, the same push goes through, session first
    turns(alice.store, "nb_elsewhere", "one")
    alice.git("push", "-q", "origin", "main")
    assert SESSION_REF + "nb_elsewhere" in remote_refs(origin)
    assert remote_refs(origin)["refs/heads/main"] == run(alice.repo, "rev-parse", "HEAD").strip()


def test_a_remote_session_ahead_is_joined_then_pushed(team: tuple[Path, Clone, Clone]) -> None:
    """Bob pushed turns of the session without pushing the notebook; Alice ran a turn of
    her own and pushes her notebook: both lines reach the remote, nothing refused."""
    origin, alice, bob = team
    turns(alice.store, "nb_review", "one")
    alice.notebook("review.ipynb", "nb_review")
    alice.git("push", "-q", "origin", "main")
    bob.git("pull", "-q", "--no-rebase", "origin", "main")
    turns(bob.store, "nb_review", "bob")
    assert cli_main(["--home", str(bob.home), "sessions", "push", "nb_review", str(origin)]) == 0
    turns(alice.store, "nb_review", "alice")
    alice.notebook("review.ipynb", "nb_review", "alice's turn")
    alice.git("push", "-q", "origin", "main")
    tip = remote_refs(origin)[SESSION_REF + "nb_review"]
    assert tip == head_of(alice.store, "nb_review")
    session = alice.store.session_path("nb_review")
    for mine in (head_of(bob.store, "nb_review"),):
        assert run(session, "merge-base", "--is-ancestor", mine, tip) == ""


def test_hooks_are_idempotent_and_chain_to_the_ones_there_before(tmp_path: Path) -> None:
    origin = tmp_path / "origin.git"
    run(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    carol = Clone(tmp_path, origin, "carol")
    hooks = carol.repo / ".git" / "hooks"
    seen = tmp_path / "seen.txt"
    mine = hooks / "pre-push"
    mine.write_text(f'#!/bin/sh\necho "$1" >> {seen}\ncat >> {seen}\nexit 0\n')
    mine.chmod(0o755)

    lines = install_hooks(carol.repo)
    assert any("yours now runs first" in line for line in lines), lines
    assert (hooks / "pre-push.pre-openprogram").read_text().startswith("#!/bin/sh\necho")
    written = {name: (hooks / name).read_text() for name in HOOKS}
    assert all(MARK in text for text in written.values())
    # again: nothing changes, nothing moved twice
    assert install_hooks(carol.repo) == [
        f"hooks already installed in {hooks.resolve()}: sessions travel with git push/pull"
    ]
    assert {name: (hooks / name).read_text() for name in HOOKS} == written
    moved = sorted(p.name for p in hooks.glob("pre-push*") if not p.name.endswith(".sample"))
    assert moved == ["pre-push", "pre-push.pre-openprogram"]

    # her hook still runs, with git's arguments and input
    (carol.repo / "a.txt").write_text("a\n")
    carol.git("add", "a.txt")
    carol.git("commit", "-qm", "a")
    carol.git("push", "-q", "origin", "main")
    got = seen.read_text().splitlines()
    assert got[0] == "origin" and got[1].startswith("refs/heads/main ")

    # a hook that refuses still refuses: ours does not run over it
    (hooks / "pre-push.pre-openprogram").write_text("#!/bin/sh\necho no >&2\nexit 1\n")
    (carol.repo / "b.txt").write_text("b\n")
    carol.git("add", "b.txt")
    carol.git("commit", "-qm", "b")
    assert carol.git("push", "origin", "main", ok=False).returncode != 0

    # a hook of hers where the chained name is taken too: left alone, said so
    other = hooks / "post-merge"
    other.write_text("#!/bin/sh\nexit 0\n")
    (hooks / "post-merge.pre-openprogram").write_text("#!/bin/sh\nexit 0\n")
    lines = install_hooks(carol.repo)
    assert any(line.startswith("left your post-merge hook alone") for line in lines), lines
    assert other.read_text() == "#!/bin/sh\nexit 0\n"
    carol.store.close()


def test_pull_rebase_brings_the_session_too(team: tuple[Path, Clone, Clone]) -> None:
    _origin, alice, bob = team
    (bob.repo / "notes.txt").write_text("bob's notes\n")
    bob.git("add", "notes.txt")
    bob.git("commit", "-qm", "bob: notes")  # a commit of his own: the pull rebases it
    turns(alice.store, "nb_review", "one")
    alice.notebook("review.ipynb", "nb_review")
    alice.git("push", "-q", "origin", "main")
    pulled = bob.git("pull", "--rebase", "origin", "main")
    assert "session nb_review: new" in pulled.stderr, pulled.stderr
    assert head_of(bob.store, "nb_review") == head_of(alice.store, "nb_review")


def test_hooks_go_where_git_looks_for_them(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    run(tmp_path, "init", "-q", str(repo))
    run(repo, "config", "core.hooksPath", "githooks")
    lines = install_hooks(repo)
    assert all((repo / "githooks" / name).is_file() for name in HOOKS)
    assert not (repo / ".git" / "hooks" / "pre-push").exists()
    assert lines[-1].startswith("note: core.hooksPath is githooks")


def test_a_pull_hook_stops_at_the_first_session_it_cannot_get(
    tmp_path: Path, op_home: Path
) -> None:
    """Offline (or refused), a checkout's pull tries one session, not each in turn."""
    from openprogram_magics.githooks import pull_sessions

    gone = f"file://{tmp_path / 'no-such-remote.git'}"
    sessions = {"s_one": "a.ipynb", "s_two": "b.ipynb", "s_three": "c.ipynb"}
    outcome = pull_sessions(sessions, gone, tmp_path)
    assert len(outcome.refused) == 2 and outcome.said == []
    assert outcome.refused[0].startswith("session s_one of a.ipynb not pulled: ")
    assert outcome.refused[1].startswith("not tried after that: s_two, s_three")
    # a replay session (kept home unless pushed --with-replays) is tried last
    outcome = pull_sessions({"s_one-replay-0123abcd": "a.ipynb", **sessions}, gone, tmp_path)
    assert outcome.refused[0].startswith("session s_one of a.ipynb not pulled: ")
    assert outcome.refused[1].endswith("s_three, s_one-replay-0123abcd (`openprogram sessions "
                                       "pull ID " + gone + "` for each)")  # fmt: skip


def _with_output(clone: Clone, name: str, sid: str, output: dict[str, object]) -> None:
    """Notebook ``name`` naming session ``sid`` with one code cell holding ``output``."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["openprogram"] = {"session_id": sid, "version": 1}
    nb.cells = [nbformat.v4.new_code_cell("%%openprogram\nx")]
    raw = json.loads(nbformat.writes(nb))
    raw["cells"][0]["outputs"] = [output]
    (clone.repo / name).write_text(json.dumps(raw))
    clone.git("add", name)
    clone.git("commit", "-qm", f"{clone.name}: {name}")


def test_a_replay_session_an_output_names_stays_home(team: tuple[Path, Clone, Clone]) -> None:
    """After `openprogram run --replay` rewrote outputs, they name the replay session: the push
    sends the notebook's session and goes through, the replay kept here (decision 0047)."""
    origin, alice, bob = team
    turns(alice.store, "nb_review", "one")
    replay = "nb_review-replay-0123abcd"
    turns(alice.store, replay, "one")
    alice.store.open(replay).set_meta(replay_of="nb_review")
    turns(alice.store, replay, "two")  # the meta is written with this commit
    part = {"session_id": replay, "last_turn_id": "n_1", "turn": 2, "version": 1}
    out = {"output_type": "display_data", "metadata": {}, "data": {MIME_TYPE: part}}
    _with_output(alice, "review.ipynb", "nb_review", out)
    pushed = alice.git("push", "origin", "main")
    said = [line for line in pushed.stderr.splitlines() if line.startswith("openprogram:")]
    assert any(
        f"session {replay} of review.ipynb is a replay of session nb_review: kept on this machine"
        in line
        for line in said
    ), pushed.stderr
    refs = remote_refs(origin)
    assert SESSION_REF + "nb_review" in refs and SESSION_REF + replay not in refs
    assert refs["refs/heads/main"] == run(alice.repo, "rev-parse", "HEAD").strip()

    # Bob pulls it: the notebook's session arrives (the replay, tried last, does not); his
    # own push of the notebook is not refused for lack of Alice's replay
    pulled = bob.git("pull", "--no-rebase", "origin", "main")
    assert "session nb_review: new" in pulled.stderr and "not tried after that" not in pulled.stderr
    out["data"] = {MIME_TYPE: {**part, "turn": 3}, "text/plain": "bob looked"}
    _with_output(bob, "review.ipynb", "nb_review", out)
    pushed = bob.git("push", "origin", "main")
    assert f"session {replay} of review.ipynb is a replay kept on the machine that ran it" in (
        pushed.stderr
    )
    assert remote_refs(origin)["refs/heads/main"] == run(bob.repo, "rev-parse", "HEAD").strip()


def test_an_output_without_data_is_skipped_not_a_traceback(
    team: tuple[Path, Clone, Clone],
) -> None:
    """A hand-edited output with ``"data": null``: push and pull carry on, the session too."""
    origin, alice, bob = team
    turns(alice.store, "nb_review", "one")
    bad = {"output_type": "execute_result", "execution_count": 1, "metadata": {}, "data": None}
    _with_output(alice, "review.ipynb", "nb_review", bad)
    pushed = alice.git("push", "origin", "main")
    assert "Error" not in pushed.stderr and "session nb_review pushed to" in pushed.stderr
    pulled = bob.git("pull", "--no-rebase", "origin", "main")
    assert "Error" not in pulled.stderr and "session nb_review: new" in pulled.stderr
    assert SESSION_REF + "nb_review" in remote_refs(origin)
