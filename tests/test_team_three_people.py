"""Issue 35's whole story, as three people: nobody loses a cell.

Alice, Bob and Carol each have their own machine here: their own ``HOME`` (with their git
identity in ``~/.gitconfig``) and ``OPENPROGRAM_HOME``, and their own clone of one bare
repository that ``git daemon`` serves on loopback (``git://``).  Each ran ``openprogram
git-setup --hooks`` once, so the notebook merges with the driver and its session travels
with ``git push`` / ``git pull`` (the hooks); everything they do is a command they would
type, run as a process with their environment: ``openprogram run`` (a real kernel, the
offline ``test`` provider), ``git commit``, ``git pull`` (a merge), ``git pull --rebase``,
``git push``.

Each adds a cell at the end of the same notebook (the case that used to lose one), and one
replays the notebook before pushing (its turns must stay home).  At the end every clone's
notebook holds every cell of all three, once, and every home's session every turn, each
with its author; the labels of the log are unique; the remote holds no replay turn.

The second test does Carol's step in a real JupyterLab (marked ``browser``): she opens the
merged notebook, adds and runs a cell, saves, and ``git push`` / ``git pull`` carry it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from git_servers import git_daemon

from openprogram.store.session.store import SessionStore
from openprogram.view import compute_layout
from openprogram.view.summary import summarize

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(600)]

SETUP = "%load_ext openprogram_magics\n%openprogram provider test"
FUNCTION = (
    "from openprogram import agentic_function\n\n"
    "@agentic_function\n"
    "def triage(ticket: str, runtime=None) -> str:\n"
    '    """Classify the ticket as bug, feature or question."""\n'
    '    return runtime.exec(ticket, choices=["bug", "feature", "question"])\n'
)
SESSION_REFS = "refs/openprogram/sessions/"
# what git and openprogram read from the environment that would leak between the people
PERSONAL = (
    "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
    "EMAIL", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "XDG_CONFIG_HOME", "JPY_SESSION_NAME",
    "OPENPROGRAM_SESSION", "OPENPROGRAM_PROVIDER", "GIT_DIR", "GIT_WORK_TREE",
)  # fmt: skip


def cell(ticket: str) -> str:
    return f'%%openprogram\ntriage("{ticket}")'


class Person:
    """One colleague's machine: a home with a ``.gitconfig``, sessions, a clone."""

    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.key = name.split()[0].lower()
        self.home = root / self.key
        self.home.mkdir(parents=True)
        email = f"{self.key}@example.org"
        (self.home / ".gitconfig").write_text(
            f"[user]\n\tname = {name}\n\temail = {email}\n[init]\n\tdefaultBranch = main\n"
            "[pull]\n\trebase = false\n"
        )
        self.sessions = self.home / ".openprogram"
        self.repo = self.home / "project"
        self.env = {k: v for k, v in os.environ.items() if k not in PERSONAL}
        self.env.update(HOME=str(self.home), OPENPROGRAM_HOME=str(self.sessions))

    def run(self, *argv: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        """A command this person types in their clone."""
        done = subprocess.run(
            argv, cwd=self.repo, env=self.env, capture_output=True, text=True, check=False
        )
        if ok:
            assert done.returncode == 0, f"{self.name}: {argv}\n{done.stdout}\n{done.stderr}"
        return done

    def git(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("git", *args, ok=ok)

    def openprogram(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(sys.executable, "-m", "openprogram.cli", *args, ok=ok)

    def clone(self, url: str) -> None:
        subprocess.run(
            ["git", "clone", "-q", url, str(self.repo)], env=self.env, check=True,
            capture_output=True,
        )  # fmt: skip
        said = self.openprogram("git-setup", "--hooks", ".").stdout
        assert "hook" in said, said

    def add_cell(self, source: str, notebook: str = "nb.ipynb") -> None:
        path = self.repo / notebook
        nb = nbformat.read(path, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(source))
        nbformat.write(nb, path)

    def notebook(self, name: str = "nb.ipynb") -> nbformat.NotebookNode:
        text = (self.repo / name).read_text()
        assert "<<<<<<<" not in text and ">>>>>>>" not in text, f"{self.name}: conflict markers"
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
        return nb

    def session_tip(self, sid: str) -> str:
        path = self.sessions / "sessions" / sid
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "main"], capture_output=True)
        return out.stdout.decode().strip()

    def store(self) -> SessionStore:
        return SessionStore(self.sessions)


def ticket_cells(nb: nbformat.NotebookNode) -> list[str]:
    return [c.source for c in nb.cells if c.source.startswith("%%openprogram")]


def remote_refs(origin: Path) -> dict[str, str]:
    out = subprocess.run(
        ["git", "for-each-ref", "--format=%(refname) %(objectname)"],
        cwd=origin, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return dict(line.split(" ", 1) for line in out.splitlines())


def turns_by_author(store: SessionStore, sid: str) -> dict[str, tuple[str, str]]:
    """Turn node id -> (its cell's text, who ran it), as the session's DAG draws them."""
    session = store.open(sid)
    nodes = {n.id: n for n in session.nodes()}
    rows = summarize(compute_layout([n.to_dict() for n in nodes.values()], session.head_id))
    return {
        r["id"]: (str(nodes[r["id"]].input.get("text", "")), str(r.get("by", "")))
        for r in rows
        if nodes[r["id"]].kind == "turn"
    }


@pytest.fixture
def team(tmp_path: Path) -> Iterator[tuple[Path, str, list[Person]]]:
    """The bare repository served by ``git daemon``, and three people without a clone."""
    served = tmp_path / "served"
    served.mkdir()
    origin = served / "project.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    people = [Person(tmp_path, n) for n in ("Alice Liddell", "Bob Builder", "Carol Danvers")]
    with git_daemon(served) as prefix:
        yield origin, f"{prefix}/project.git", people


def start_the_project(url: str, alice: Person) -> str:
    """Alice writes the notebook, runs it headless, commits and pushes: the session goes
    first (the pre-push hook).  Returns the session id."""
    alice.clone(url)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(s) for s in (SETUP, FUNCTION, cell("crash when printing"))
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, alice.repo / "nb.ipynb")
    alice.openprogram("run", "nb.ipynb")
    sid = alice.notebook().metadata["openprogram"]["session_id"]
    alice.git("add", "nb.ipynb", ".gitattributes")
    alice.git("commit", "-qm", "triage notebook")
    pushed = alice.git("push", "-u", "origin", "main")
    assert f"session {sid} pushed to" in pushed.stderr, pushed.stderr
    return str(sid)


def check_nobody_lost_anything(
    origin: Path, sid: str, people: list[Person], tickets: dict[str, Person]
) -> None:
    """Every clone has every cell once and is a valid notebook naming the session; every
    home has every turn of every cell (``tickets``: whose it is) with its author; labels
    unique; no replay pushed."""
    expected = sorted(cell(t) for t in tickets)
    for person in people:
        nb = person.notebook()
        assert sorted(ticket_cells(nb)) == expected, (person.name, ticket_cells(nb))
        assert nb.metadata["openprogram"]["session_id"] == sid
    seen: list[set[str]] = []
    for person in people:
        store = person.store()
        turns = turns_by_author(store, sid)
        seen.append(set(turns))
        for ticket, owner in tickets.items():
            ran = {by for code, by in turns.values() if f'"{ticket}"' in code}
            assert owner.name in ran, f"{person.name}'s session: {ticket!r} run by {ran}"
        assert {by for _, by in turns.values()} == {p.name for p in people}, person.name
        assert not any("replay_of" in n.metadata for n in store.open(sid).nodes())
        store.close()
        log = person.openprogram("sessions", "log", sid).stdout
        labels = re.findall(r"\bturn (\d+(?:@[\w.-]+)?):", log)
        assert labels and len(labels) == len(set(labels)), (person.name, log)
    assert all(s == seen[0] for s in seen), "the homes hold different turns"
    # what the remote holds: the one session, no replay session, no replay turn
    refs = [r for r in remote_refs(origin) if r.startswith(SESSION_REFS)]
    assert refs == [SESSION_REFS + sid], refs
    checker = SessionStore(origin.parent.parent / "checker")
    from openprogram.store.session.sync import pull

    pull(checker, sid, f"file://{origin}", "file")
    remote_turns = turns_by_author(checker, sid)
    assert set(remote_turns) == seen[0]
    assert not any("replay_of" in n.metadata for n in checker.open(sid).nodes())
    checker.close()


def test_three_people_merge_and_rebase_and_nobody_loses_a_cell(
    team: tuple[Path, str, list[Person]],
) -> None:
    origin, url, people = team
    alice, bob, carol = people
    sid = start_the_project(url, alice)

    # Bob and Carol clone; the checkout brought the notebook, `sessions pull` its session
    for person in (bob, carol):
        person.clone(url)
        pulled = person.openprogram("sessions", "pull", "--notebook", "nb.ipynb").stdout
        assert "new" in pulled, pulled

    # Bob adds a cell at the end, runs the notebook, commits, pushes (session first)
    bob.add_cell(cell("slow startup"))
    bob.openprogram("run", "nb.ipynb")
    bob.git("commit", "-qam", "bob: slow startup")
    assert f"session {sid} pushed to" in bob.git("push").stderr

    # Carol, meanwhile, adds hers at the same place and replays the notebook into a scratch
    # file before she runs it (the replay's turns must stay on her machine)
    carol.add_cell(cell("crash on exit"))
    carol.openprogram("run", "nb.ipynb", "--replay", "--record-misses", "-o", "scratch.ipynb")
    carol.openprogram("run", "nb.ipynb")
    carol.git("commit", "-qam", "carol: crash on exit")
    refused = carol.git("push", ok=False)
    assert refused.returncode != 0 and "fetch first" in refused.stderr + refused.stdout
    rebased = carol.git("pull", "--rebase")
    assert "CONFLICT" not in rebased.stdout + rebased.stderr
    assert ticket_cells(carol.notebook()) == [
        cell(t) for t in ("crash when printing", "slow startup", "crash on exit")
    ]
    carol.git("push")  # her session went with the refused push already (joined with Bob's)
    assert remote_refs(origin)[SESSION_REFS + sid] == carol.session_tip(sid)

    # Alice adds one more, runs, commits, and pulls with a merge before she pushes
    alice.add_cell(cell("login fails"))
    alice.openprogram("run", "nb.ipynb")
    alice.git("commit", "-qam", "alice: login fails")
    merged = alice.git("pull", "--no-rebase", "--no-edit")
    assert "CONFLICT" not in merged.stdout + merged.stderr
    assert f"session {sid}" in merged.stderr, merged.stderr  # the post-merge hook
    alice.git("push")

    # Bob and Carol pull: fast-forward, the hook brings the session
    for person in (bob, carol):
        person.git("pull")
    tickets = {"crash when printing": alice, "slow startup": bob, "crash on exit": carol}
    check_nobody_lost_anything(origin, sid, people, {**tickets, "login fails": alice})
    untracked = carol.git("status", "--porcelain").stdout
    assert "nb.ipynb" not in untracked, untracked


def lab_for(person: Person) -> Any:
    """JupyterLab serving ``person``'s clone with their environment (kernels included)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from browser.jupyterlab import LabServer

    extra = {k: person.env[k] for k in ("HOME", "OPENPROGRAM_HOME")}
    return LabServer.start(person.repo, extra_env=extra)


@pytest.mark.browser
def test_the_third_person_adds_her_cell_in_jupyterlab(team: tuple[Path, str, list[Person]]) -> None:
    from browser.jupyterlab import LabPage, browser_skip_reason, chromium

    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)
    origin, url, people = team
    alice, bob, carol = people
    sid = start_the_project(url, alice)
    bob.clone(url)
    bob.openprogram("sessions", "pull", "--notebook", "nb.ipynb")
    bob.add_cell(cell("slow startup"))
    bob.openprogram("run", "nb.ipynb")
    bob.git("commit", "-qam", "bob: slow startup")
    bob.git("push")
    alice.add_cell(cell("login fails"))
    alice.openprogram("run", "nb.ipynb")
    alice.git("commit", "-qam", "alice: login fails")
    alice.git("pull", "--rebase")
    alice.git("push")

    # Carol clones the merged notebook and opens it in JupyterLab: adds a cell, runs, saves
    carol.clone(url)
    carol.openprogram("sessions", "pull", "--notebook", "nb.ipynb")
    mine = len(carol.notebook().cells)  # her cell goes after Alice's and Bob's
    with lab_for(carol) as server, chromium() as browser:
        page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
        page.set_default_timeout(60_000)
        lab = LabPage(page, server)
        lab.open_notebook("nb.ipynb")
        lab.wait_kernel_idle()
        lab.run_cell_expect(0, 1, timeout=60_000)  # the setup and the function
        lab.run_cell_expect(1, 2, timeout=60_000)
        lab.cell(mine - 1).locator(".jp-InputPrompt").click()
        page.keyboard.press("Escape")
        page.keyboard.press("b")  # a new cell below the last one, typed in
        lab.cell(mine).wait_for()
        page.keyboard.press("Enter")
        page.keyboard.type(cell("crash on exit"))
        page.keyboard.press("Control+Enter")  # run it, no new cell after it
        lab.cell(mine).locator(".jp-InputPrompt", has_text="[3]").wait_for(timeout=60_000)
        lab.wait_output(mine, r"bug|feature|question", timeout=60_000)
        lab.save()
        lab.screenshot("team-three-people-carol")
        page.context.close()
    saved = carol.notebook()
    assert saved.metadata["openprogram"]["session_id"] == sid
    assert saved.cells[mine].source == cell("crash on exit") and saved.cells[mine].outputs
    carol.git("commit", "-qam", "carol: crash on exit (in JupyterLab)")
    assert f"session {sid} pushed to" in carol.git("push").stderr
    for person in (alice, bob):
        person.git("pull")
    tickets = {"crash when printing": alice, "slow startup": bob, "crash on exit": carol}
    check_nobody_lost_anything(origin, sid, people, {**tickets, "login fails": alice})
