"""A session folder written by an attacker never makes git run anything, nor read outside it.

The ``hostile`` fixture takes a real session and adds everything a ``.git`` can use to run a
program or pull in a file: hooks (in ``.git/hooks`` and a ``core.hooksPath`` outside),
``include.path``, ``core.fsmonitor``, ``gpg.program`` with ``log.showSignature`` and a signed
commit, pagers, an external diff, filter and textconv drivers bound by a committed
``.gitattributes``, a credential helper, ``objects/info/alternates`` and ``commondir``
pointing at another repository, and a dead writer's rows (so opening it recovers).
Every program it names would create a file in ``marks/``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from openprogram import session_context
from openprogram.context.nodes import COMPLETED, RUNNING, make_call
from openprogram.store.session.files import dumps
from openprogram.store.session.history import MAIN_REF, Repository, commit_log
from openprogram.store.session.safegit import canonical_config, run_git
from openprogram.store.session.store import SessionStore
from tests.test_live import plant_dead_rows
from tests.test_store import repack_now

ROOT = Path(__file__).resolve().parent.parent
HOOKS = (
    "pre-commit",
    "post-commit",
    "post-checkout",
    "post-index-change",
    "reference-transaction",
    "pre-auto-gc",
    "post-rewrite",
    "fsmonitor-watchman",
)


@dataclass
class Hostile:
    home: Path
    sid: str
    folder: Path
    marks: Path
    outside: Path

    def assert_nothing_ran(self) -> None:
        assert sorted(os.listdir(self.marks)) == []

    def snapshot_outside(self) -> dict[str, tuple[str, int]]:
        out = {}
        for path in sorted(self.outside.rglob("*")):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                out[str(path)] = (hashlib.sha1(data).hexdigest(), path.stat().st_mtime_ns)
        return out


def _program(outside: Path, marks: Path, name: str) -> str:
    script = outside / "bin" / name
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"#!/bin/sh\ntouch '{marks}/{name}'\ncat >/dev/null 2>&1\nexit 0\n")
    script.chmod(0o755)
    return str(script)


def one_turn(sid: str, name: str, home: Path | None = None) -> None:
    store = SessionStore(home) if home is not None else None
    with session_context(sid, message=name, db=store) as h:
        top = h.writer.append(make_call("turn", name, status=COMPLETED), turn_level=True)
        h.writer.append(make_call("function", "plan", caller=top.id, status=COMPLETED))
    if store is not None:
        store.close()


def make_hostile(home: Path, tmp: Path) -> Hostile:
    sid = "shared_by_someone"
    one_turn(sid, "first", home)
    folder = home / "sessions" / sid
    marks, outside = tmp / "marks", tmp / "outside"
    marks.mkdir()
    outside.mkdir()
    prog = {n: _program(outside, marks, n) for n in ("gpg", "fsmonitor", "pager", "extdiff")}
    prog.update({n: _program(outside, marks, n) for n in ("textconv", "clean", "smudge")})
    prog.update({n: _program(outside, marks, n) for n in ("process", "cred", "askpass", "ssh")})
    prog["alt_refs"] = _program(outside, marks, "alt_refs")
    prog["editor"] = _program(outside, marks, "editor")
    git_dir = folder / ".git"
    # hooks, in the repository and in a hooksPath outside it
    (outside / "hooks").mkdir()
    for hook in HOOKS:
        for where in (git_dir / "hooks", outside / "hooks"):
            where.mkdir(exist_ok=True)
            (where / hook).write_text(f"#!/bin/sh\ntouch '{marks}/hook-{hook}'\n")
            (where / hook).chmod(0o755)
    # another repository outside, reached through alternates and commondir
    other = outside / "other"
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    (outside / "included.cfg").write_text(f"[core]\n\tpager = {prog['pager']}\n")
    (outside / "attributes").write_text("* filter=evil diff=evil\n")
    config = (git_dir / "config").read_text() + (
        f"[core]\n\thooksPath = {outside / 'hooks'}\n\tfsmonitor = {prog['fsmonitor']}\n"
        f"\tpager = {prog['pager']}\n\teditor = {prog['editor']}\n"
        f"\taskPass = {prog['askpass']}\n\tsshCommand = {prog['ssh']}\n"
        f"\talternateRefsCommand = {prog['alt_refs']}\n"
        f"\tattributesFile = {outside / 'attributes'}\n"
        f"[include]\n\tpath = {outside / 'included.cfg'}\n"
        f"[log]\n\tshowSignature = true\n"
        f"[gpg]\n\tprogram = {prog['gpg']}\n"
        f'[gpg "ssh"]\n\tprogram = {prog["gpg"]}\n'
        f"[diff]\n\texternal = {prog['extdiff']}\n"
        f'[diff "evil"]\n\ttextconv = {prog["textconv"]}\n'
        f'[filter "evil"]\n\tclean = {prog["clean"]}\n\tsmudge = {prog["smudge"]}\n'
        f"\tprocess = {prog['process']}\n\trequired = true\n"
        f"[credential]\n\thelper = {prog['cred']}\n"
        f"[pager]\n\tlog = {prog['pager']}\n"
        f"[gc]\n\tauto = 1\n"
        f"[extensions]\n\tworktreeConfig = true\n"
    )
    (git_dir / "config").write_text(config)
    # the per-worktree config that extension makes git read, and a sparse checkout that
    # would leave meta.json out, through a link to a file outside
    (git_dir / "config.worktree").write_text(f"[core]\n\tfsmonitor = {prog['fsmonitor']}\n")
    (git_dir / "info").mkdir(exist_ok=True)
    (outside / "sparse").write_text("/*\n!/meta.json\n")
    (git_dir / "info" / "sparse-checkout").symlink_to(outside / "sparse")
    (git_dir / "info" / "attributes").write_text("* filter=evil diff=evil\n")
    (git_dir / "objects" / "info" / "alternates").write_text(f"{other / '.git' / 'objects'}\n")
    (git_dir / "commondir").write_text(f"{other / '.git'}\n")
    # a committed .gitattributes binding every file to the evil drivers, then a signed commit
    writer = Repository(folder)
    attributes = b"* filter=evil diff=evil\n"
    (folder / ".gitattributes").write_bytes(attributes)
    writer.commit({".gitattributes": attributes}, "attributes")
    head = writer.read_ref()
    assert head is not None
    raw = writer.read(head)
    header, _, message = raw.partition(b"\n\n")
    signature = b"gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEz\n -----END PGP SIGNATURE-----"
    signed = header + b"\n" + signature + b"\n\n" + message
    writer.update_ref(MAIN_REF, writer.store(b"commit", signed), head)
    writer.close()
    # a writer that died mid-turn: opening the session recovers its running node
    store = SessionStore(home)
    session = store.open(sid)
    turn = session.begin_turn()
    stuck = session.append(make_call("function", "stuck", status=RUNNING), turn=turn)
    record = dumps(stuck.to_dict())
    session.live.drop_rows()  # its row is planted below as a dead writer's
    session._dirty.clear()
    session._open.clear()
    store.close()
    plant_dead_rows(folder, [record])
    (git_dir / "config").write_text(config)  # the open above made it canonical already
    (git_dir / "config.worktree").write_text(f"[core]\n\tfsmonitor = {prog['fsmonitor']}\n")
    (git_dir / "objects" / "info" / "alternates").write_text(f"{other / '.git' / 'objects'}\n")
    (git_dir / "commondir").write_text(f"{other / '.git'}\n")
    return Hostile(home, sid, folder, marks, outside)


@pytest.fixture
def hostile(op_home: Path, tmp_path: Path) -> Iterator[Hostile]:
    yield make_hostile(op_home, tmp_path)


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openprogram.cli", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=60,
    )


def test_the_fixture_is_hostile_to_plain_git(hostile: Hostile) -> None:
    """Without the project's precautions, git would run the folder's programs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    (hostile.folder / ".git" / "commondir").unlink()  # else git reads the other repository
    subprocess.run(
        ["git", "log", "-1"], cwd=hostile.folder, env=env, capture_output=True, timeout=30
    )
    assert "gpg" in os.listdir(hostile.marks)


def test_no_operation_of_the_project_runs_a_program_the_folder_names(
    hostile: Hostile,
) -> None:
    before = hostile.snapshot_outside()
    # the CLI first, on the folder as received (log runs git before anything opened it)
    for argv in (("log", hostile.sid), ("list",), ("show", hostile.sid), ("log", hostile.sid)):
        result = cli("sessions", *argv)
        assert result.returncode == 0, result.stderr
    hostile.assert_nothing_ran()
    assert (hostile.folder / ".git" / "config").read_bytes() == canonical_config()
    assert not (hostile.folder / ".git" / "objects" / "info" / "alternates").exists()
    assert not (hostile.folder / ".git" / "commondir").exists()
    assert not (hostile.folder / ".git" / "config.worktree").exists()
    commits = len(commit_log(hostile.folder))
    # in this process: recovery (at open), a turn, maintenance, close
    store = SessionStore(hostile.home)
    session = store.open(hostile.sid)
    stuck = [n for n in session.nodes() if n.name == "stuck"]
    assert [n.status for n in stuck] == ["interrupted"]
    store.close()
    one_turn(hostile.sid, "second", hostile.home)
    store = SessionStore(hostile.home)
    repack_now(store.open(hostile.sid))
    store.close()
    one_turn(hostile.sid, "third", hostile.home)
    hostile.assert_nothing_ran()
    lines = [entry.summary for entry in commit_log(hostile.folder)]
    assert len(lines) >= commits + 2 and lines[0].endswith(": third")
    fsck = run_git(hostile.folder, "fsck", "--strict", "--no-progress", check=False)
    assert fsck.returncode == 0, fsck.stderr
    status = run_git(hostile.folder, "status", "--porcelain", check=False)
    assert b"deleted" not in status.stdout  # no working tree to compare; nothing ran meanwhile
    sparse = hostile.folder / ".git" / "info" / "sparse-checkout"
    assert not sparse.is_symlink() and not sparse.exists()  # removed: no sparse checkout
    assert (hostile.folder / "meta.json").is_file()
    hostile.assert_nothing_ran()
    assert hostile.snapshot_outside() == before
    result = cli("sessions", "delete", hostile.sid, "--yes")  # its turns were never pushed
    assert result.returncode == 2 and "not pushed" in result.stderr, result.stderr
    hostile.assert_nothing_ran()  # counting them ran none of its programs
    result = cli("sessions", "delete", hostile.sid, "--yes", "--force")
    assert result.returncode == 0, result.stderr
    assert not hostile.folder.exists()
    hostile.assert_nothing_ran()
    assert hostile.snapshot_outside() == before


def test_notebook_commands_on_a_hostile_session_run_nothing(
    hostile: Hostile, ipython_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        from tests.test_magics import make_shell
    except ImportError:  # tests/ is not a package: pytest put tests/ itself on sys.path
        from test_magics import make_shell  # type: ignore[no-redef]
    import openprogram_magics.bridge as bridge

    monkeypatch.setattr(bridge, "_state", None)
    before = hostile.snapshot_outside()
    shell = make_shell(ipython_dir)
    try:
        shell.line("list")
        shell.line(f"use {hostile.sid}")
        assert len(shell.line("log")) >= 3
        shell.run(f"%%openprogram --session {hostile.sid}\n1 + 1")
        lines = shell.line("log")
        assert lines[0].split(" ", 1)[1].startswith("turn")
    finally:
        from IPython.core.interactiveshell import InteractiveShell

        InteractiveShell.clear_instance()
    hostile.assert_nothing_ran()
    assert hostile.snapshot_outside() == before


@pytest.fixture(scope="module")
def ipython_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ipython")


def test_a_dot_git_that_points_outside_is_refused(op_home: Path, tmp_path: Path) -> None:
    one_turn("linked", "first", op_home)
    folder = op_home / "sessions" / "linked"
    elsewhere = tmp_path / "elsewhere.git"
    (folder / ".git").rename(elsewhere)
    (folder / ".git").symlink_to(elsewhere)
    from openprogram.errors import CorruptedFile

    with pytest.raises(CorruptedFile, match=r"\.git"):
        SessionStore(op_home).open("linked")
    result = cli("sessions", "log", "linked")
    assert result.returncode != 0 and ".git: not a directory inside" in result.stderr
    (folder / ".git").unlink()  # a `gitdir:` file: not a session
    (folder / ".git").write_text(f"gitdir: {elsewhere}\n")
    result = cli("sessions", "log", "linked")
    assert result.returncode != 0 and "no session 'linked'" in result.stderr


def _outside_repository(where: Path) -> tuple[Path, str, str]:
    """A repository outside any session: its git folder, a packed blob and a loose one."""
    subprocess.run(["git", "init", "-q", str(where)], check=True)
    packed = run_git(where, "hash-object", "-w", "--stdin", input=b"packed secret\n")
    run_git(where, "repack", "-adq")
    loose = run_git(where, "hash-object", "-w", "--stdin", input=b"loose secret\n")
    return where / ".git", packed.stdout.decode().strip(), loose.stdout.decode().strip()


def test_objects_linked_from_outside_are_never_read(op_home: Path, tmp_path: Path) -> None:
    """Pack files in objects/pack and loose objects in a fan-out folder, symlinked to another
    repository's: git (what a push sends) and gitdb read none of them."""
    other, packed, loose = _outside_repository(tmp_path / "private")
    one_turn("s1", "first", op_home)
    objects = op_home / "sessions" / "s1" / ".git" / "objects"
    for pack in (other / "objects" / "pack").glob("pack-*"):
        (objects / "pack" / pack.name).symlink_to(pack)
    (objects / loose[:2]).mkdir(exist_ok=True)
    (objects / loose[:2] / loose[2:]).symlink_to(other / "objects" / loose[:2] / loose[2:])
    SessionStore(op_home).open("s1")
    folder = op_home / "sessions" / "s1"
    for sha in (packed, loose):
        assert run_git(folder, "cat-file", "-e", sha, check=False).returncode != 0
        with pytest.raises(Exception):  # noqa: B017 (gitdb's own BadObject)
            Repository(folder).read(bytes.fromhex(sha))
    assert not [p for p in objects.rglob("*") if p.is_symlink()]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_linked_refs_logs_info_or_packed_refs_are_never_written_through(
    op_home: Path, tmp_path: Path
) -> None:
    """``.git/refs/openprogram`` linked to a team remote's, ``logs``, ``info`` and
    ``packed-refs`` linked outside: an export (which writes, then deletes, the session's ref)
    changes and removes nothing there."""
    from openprogram.store.session.sync import export_bundle

    team, outside = tmp_path / "team.git", tmp_path / "outside"
    subprocess.run(["git", "init", "-q", "--bare", str(team)], check=True)
    one_turn("s1", "first", op_home)
    folder = op_home / "sessions" / "s1"
    tip = run_git(folder, "rev-parse", MAIN_REF).stdout.decode().strip()
    run_git(folder, "push", "-q", str(team), f"{MAIN_REF}:refs/openprogram/sessions/s1")
    (outside / "logs" / "refs" / "openprogram" / "sessions").mkdir(parents=True)
    (outside / "logs" / "refs" / "openprogram" / "sessions" / "s1").write_text("")
    (outside / "info").mkdir()
    (outside / "info" / "sparse-checkout").write_text("/*\n")
    (outside / "packed-refs").write_text(f"{tip} refs/openprogram/sessions/s1\n")
    git_dir = folder / ".git"
    if (git_dir / "refs" / "openprogram").exists():
        subprocess.run(["rm", "-rf", str(git_dir / "refs" / "openprogram")], check=True)
    (git_dir / "refs" / "openprogram").symlink_to(team / "refs" / "openprogram")
    for name in ("logs", "info", "packed-refs"):
        if (git_dir / name).exists():
            subprocess.run(["rm", "-rf", str(git_dir / name)], check=True)
        (git_dir / name).symlink_to(outside / name)
    before = _files(team / "refs") | _files(outside)
    export_bundle(SessionStore(op_home), "s1", tmp_path / "s1.bundle")
    assert _files(team / "refs") | _files(outside) == before
    assert not [p for p in git_dir.rglob("*") if p.is_symlink()]


def test_a_linked_folder_deep_in_refs_is_never_read(op_home: Path, tmp_path: Path) -> None:
    """However deep under ``refs/`` a folder links outside, git never reads the refs there:
    one naming the session's tip would count its turns as pushed (``sessions delete`` would
    not warn)."""
    from openprogram.store.session.remotes import unpushed_turns

    one_turn("s1", "first", op_home)
    folder = op_home / "sessions" / "s1"
    tip = run_git(folder, "rev-parse", MAIN_REF).stdout
    deep = folder / ".git" / "refs" / "openprogram" / "remotes" / "team" / "sessions"
    for part in "abcdefghijkl":
        deep = deep / part
    deep.mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "s1").write_bytes(tip)
    (deep / "linked").symlink_to(tmp_path / "outside")
    counted = unpushed_turns(folder)
    assert (counted.turns, counted.ever_pushed) == (1, False)
    assert not (deep / "linked").is_symlink()


def test_a_planted_grafts_file_cuts_no_history(op_home: Path, tmp_path: Path) -> None:
    """git would take the commit named in ``.git/info/grafts`` for a root: an export missing
    history, turns not counted as unpushed.  (A ``shallow`` file is left: a shallow clone's
    log stops where its history does, tests/test_gitlog.py.)"""
    planted = "info/grafts"
    from openprogram.store.session.remotes import unpushed_turns
    from openprogram.store.session.sync import export_bundle

    for name in ("one", "two", "three"):
        one_turn("s1", name, op_home)
    folder = op_home / "sessions" / "s1"
    commits = len(commit_log(folder))
    cut = run_git(folder, "rev-parse", f"{MAIN_REF}~1").stdout
    (folder / ".git" / planted).parent.mkdir(exist_ok=True)
    (folder / ".git" / planted).write_bytes(cut)
    assert unpushed_turns(folder).turns == 3
    assert len(commit_log(folder)) == commits
    bundle = export_bundle(SessionStore(op_home), "s1", tmp_path / "s1.bundle")
    header = bundle.read_bytes().split(b"\n\n", 1)[0]
    assert not [line for line in header.splitlines() if line.startswith(b"-")]  # no prerequisite
    assert not (folder / ".git" / planted).exists()


CHUNKS = (b"OIDF", b"OIDL", b"CDAT")  # commit-graph: fan-out, names, parents


def _cut_in_commit_graph(git_dir: Path, cut: str) -> None:
    """A commit-graph of the history (git's own), then hand-edited: commit ``cut`` listed
    without parents (git trusts the file for parents without checking its checksum)."""
    env = {"GIT_DIR": str(git_dir), "PATH": os.environ["PATH"], "HOME": "/nonexistent"}
    subprocess.run(["git", "commit-graph", "write", "--reachable"], env=env, check=True)
    graph = bytearray((git_dir / "objects" / "info" / "commit-graph").read_bytes())
    table = {bytes(graph[at : at + 4]): at for at in range(8, 8 + 12 * graph[6], 12)}
    fan, oids, data = (int.from_bytes(graph[table[c] + 4 : table[c] + 12], "big") for c in CHUNKS)
    count = int.from_bytes(graph[fan + 1020 : fan + 1024], "big")  # (the fan-out's last entry)
    row = [graph[oids + 20 * i : oids + 20 * i + 20].hex() for i in range(count)].index(cut)
    first_parent = data + 36 * row + 20  # (a row: tree, two parents, generation and time)
    graph[first_parent : first_parent + 4] = b"\x70\0\0\0"  # git's "no parent"
    (git_dir / "objects" / "info" / "commit-graph").write_bytes(graph)


def test_a_planted_commit_graph_cuts_no_history(op_home: Path, tmp_path: Path) -> None:
    """git takes parents from ``.git/objects/info/commit-graph``: one listing a commit without
    parents would cut the history like grafts (a shorter log, turns not counted unpushed)."""
    from openprogram.store.session.remotes import unpushed_turns

    for name in ("one", "two", "three"):
        one_turn("s1", name, op_home)
    folder = op_home / "sessions" / "s1"
    commits = len(commit_log(folder))
    cut = run_git(folder, "rev-parse", f"{MAIN_REF}~1").stdout.decode().strip()
    _cut_in_commit_graph(folder / ".git", cut)
    plain = subprocess.run(
        ["git", "--git-dir", str(folder / ".git"), "rev-list", "--count", MAIN_REF],
        capture_output=True, check=True, env={"PATH": os.environ["PATH"], "HOME": "/nonexistent"},
    )  # fmt: skip
    assert int(plain.stdout) == 2  # the planted file is what git reads, unless told not to
    assert unpushed_turns(folder).turns == 3
    assert len(commit_log(folder)) == commits


def test_refs_nested_past_what_a_path_can_name_are_one_line(op_home: Path) -> None:
    """A folder under ``refs/`` nested past PATH_MAX (no ref of git's or ours is) cannot be
    checked for links: every command refuses the session in one line, nothing changed."""
    one_turn("s1", "first", op_home)
    folder = op_home / "sessions" / "s1"
    tip = run_git(folder, "rev-parse", MAIN_REF).stdout
    fd = os.open(folder / ".git" / "refs" / "tags", os.O_RDONLY)
    for _ in range(30):  # 30 names of 200 characters: 6,000 characters of path
        os.mkdir("x" * 200, dir_fd=fd)
        fd, parent = os.open("x" * 200, os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    os.close(fd)
    for command in (["sessions", "log", "s1"], ["sessions", "delete", "s1"]):
        done = subprocess.run(
            [sys.executable, "-m", "openprogram.cli", *command], capture_output=True, text=True
        )
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "refs: cannot be checked (File name too long)" in done.stderr
    assert (folder / ".git" / "refs").is_dir()
    assert (
        subprocess.run(["git", "rev-parse", MAIN_REF], cwd=folder, capture_output=True).stdout
        == tip
    )
