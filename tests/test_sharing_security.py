"""Sharing with someone who may be hostile (issue 19, security items 1-2).

A remote a notebook's metadata names can be a local repository carrying hooks; a bundle,
embedded or not, can carry what the session layout forbids behind a zero-padded tree mode,
or inflate far past its size.  Real git throughout: a bare repository whose every hook and
``core.alternateRefsCommand`` leave a marker, bundles made by git or packed by hand.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import resource
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from test_sync import craft, git, state, turns

from openprogram.cli import main as cli_main
from openprogram.errors import SyncError
from openprogram.store.session.store import SessionStore
from openprogram.store.session.sync import export_bundle, import_bundle

HOOKS = (
    "pre-receive",
    "update",
    "post-receive",
    "post-update",
    "reference-transaction",
    "proc-receive",
    "push-to-checkout",
    "pre-auto-gc",
)


def hostile_remote(path: Path, marks: Path) -> Path:
    """A bare repository that leaves a marker in ``marks`` whenever git runs one of its
    programs: every hook, and ``core.alternateRefsCommand`` (it has an alternate, so
    receive-pack asks for the alternate's refs)."""
    marks.mkdir(exist_ok=True)
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    for hook in HOOKS:
        script = path / "hooks" / hook
        script.write_text(f"#!/bin/sh\ntouch '{marks}/{hook}'\ncat >/dev/null\nexit 0\n")
        script.chmod(0o755)
    other = path.with_name(path.name + "-alternate")
    subprocess.run(["git", "init", "-q", "--bare", str(other)], check=True)
    (path / "objects" / "info" / "alternates").write_text(f"{other / 'objects'}\n")
    git(path, "config", "core.alternateRefsCommand", f"touch '{marks}/alternateRefsCommand'; :")
    git(path, "config", "receive.autogc", "true")
    return path


def test_the_hostile_remote_runs_its_programs_for_plain_git(tmp_path: Path) -> None:
    """Without the project's precautions a push to it runs its hooks (so the fixture can
    catch the project doing the same)."""
    marks = tmp_path / "marks"
    remote = hostile_remote(tmp_path / "share.git", marks)
    work = tmp_path / "work"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "a").write_text("a")
    git(work, "add", "a")
    git(work, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "a")
    git(work, "-c", "core.hooksPath=/dev/null", "push", "-q", str(remote), "HEAD:refs/x/y")
    assert {"pre-receive", "post-receive", "alternateRefsCommand"} <= set(os.listdir(marks))


def notebook(project: Path, sid: str, remote: str | None) -> Path:
    meta: dict[str, object] = {"session_id": sid}
    if remote is not None:
        meta["remote"] = remote
    path = project / "analysis" / "nb.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nb = {"cells": [], "metadata": {"openprogram": meta}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return path


def run_cli(*argv: str) -> int:
    try:
        return cli_main(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize("how", ["relative", "dot-relative", "absolute", "file-url"])
def test_push_and_pull_to_a_local_remote_from_notebook_metadata_run_nothing_of_it(
    how: str, op_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    marks = tmp_path / "marks"
    remote = hostile_remote(project / "shared" / "share.git", marks)
    recorded = {
        "relative": "shared/share.git",
        "dot-relative": "./shared/../shared/share.git",
        "absolute": str(remote),
        "file-url": f"file://{remote}",
    }[how]
    store = SessionStore(op_home)
    turns(store, "s_team", "one", "two")
    store.close()
    nb = notebook(project, "s_team", recorded)
    assert run_cli("sessions", "push", "--notebook", str(nb)) == 0
    assert "pushed to" in capsys.readouterr().out
    assert git(remote, "for-each-ref", "--format=%(refname)") == (
        "refs/openprogram/sessions/s_team\n"
    )
    assert run_cli("sessions", "pull", "--notebook", str(nb)) == 0
    assert "up to date" in capsys.readouterr().out
    assert not marks.exists() or os.listdir(marks) == []


def test_a_local_remote_outside_the_notebooks_repository_is_refused_unless_typed(
    op_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    marks = tmp_path / "marks"
    outside = hostile_remote(tmp_path / "elsewhere.git", marks)
    store = SessionStore(op_home)
    turns(store, "s_team", "one")
    store.close()
    for recorded in ("../../elsewhere.git", str(outside), f"file://{outside}"):
        nb = notebook(project, "s_team", recorded)
        for op in ("push", "pull"):
            assert run_cli("sessions", op, "--notebook", str(nb)) != 0
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "outside the notebook's repository" in err[0], err
    assert git(outside, "for-each-ref") == ""
    # typed by the user, the same path is theirs to use (and still runs nothing of it)
    assert run_cli("sessions", "push", "--notebook", str(nb), str(outside)) == 0
    assert "pushed to" in capsys.readouterr().out
    assert not marks.exists() or os.listdir(marks) == []


# -- what arrives --------------------------------------------------------------------------
def literal(repo: Path, kind: str, data: bytes) -> str:
    out = subprocess.run(
        ["git", "hash-object", "-w", "--literally", "-t", kind, "--stdin"],
        cwd=repo, input=data, capture_output=True, check=True,
    )  # fmt: skip
    return out.stdout.decode().strip()


def tree(repo: Path, *entries: tuple[str, str, str]) -> str:
    """A tree written as given (mode text kept, e.g. zero-padded)."""
    data = b"".join(
        f"{mode} {name}".encode() + b"\0" + bytes.fromhex(sha) for mode, name, sha in entries
    )
    return literal(repo, "tree", data)


def bundle_of(repo: Path, sid: str, commit: str, out: Path) -> Path:
    git(repo, "update-ref", f"refs/openprogram/sessions/{sid}", commit)
    git(repo, "bundle", "create", "-q", str(out), f"refs/openprogram/sessions/{sid}")
    return out


def zero_padded_bundle(tmp_path: Path, source: Path, sid: str) -> Path:
    """The session's history plus a commit whose ``history`` is a ``040000`` tree holding a
    symlink to /etc, a ``.gitattributes`` and an executable node file."""
    work = tmp_path / "zp"
    subprocess.run(["git", "clone", "-q", str(source), str(work)], check=True)
    blob = literal(work, "blob", b"* filter=evil\n")
    exe = literal(work, "blob", b"#!/bin/sh\necho pwned\n")
    link = literal(work, "blob", b"/etc")
    turn = tree(
        work,
        ("100644", ".gitattributes", blob),
        ("120000", "00000099-c-n_link.json", link),
        ("100755", "00000100-c-n_exe.json", exe),
    )
    bucket = tree(work, ("40000", "000099", turn))
    history = tree(work, ("40000", "0000", bucket))
    meta = git(work, "rev-parse", "HEAD:meta.json").strip()
    top = tree(work, ("100644", "meta.json", meta), ("040000", "history", history))
    env = ["-c", "user.name=x", "-c", "user.email=x@x"]
    commit = git(work, *env, "commit-tree", top, "-p", "HEAD", "-m", "crafted").strip()
    return bundle_of(work, sid, commit, tmp_path / "zero-padded.bundle")


def _pack_header(kind: int, size: int) -> bytes:
    out = bytearray([(kind << 4) | (size & 15)])
    size >>= 4
    while size:
        out[-1] |= 0x80
        out.append(size & 0x7F)
        size >>= 7
    return bytes(out)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def bomb_bundle(out: Path, sid: str) -> Path:
    """A bundle of ~0.1 MB whose pack inflates to ~4.7 GB: a 16 MiB blob of zeros and a
    delta that copies it 280 times (the kind of pack git would inflate in memory)."""
    base_size = 1 << 24
    ops = b"".join(b"\xf0\xff\xff\xff" for _ in range(280))  # copy 0xffffff bytes at 0
    result = 280 * 0xFFFFFF
    delta = _varint(base_size) + _varint(result) + ops
    base = _pack_header(3, base_size) + zlib.compress(bytes(base_size), 9)
    offset = 12 + len(base)
    back = bytearray([offset & 0x7F])
    rest = offset >> 7
    while rest:
        rest -= 1
        back.insert(0, 0x80 | (rest & 0x7F))
        rest >>= 7
    delta_entry = _pack_header(6, len(delta)) + bytes(back) + zlib.compress(delta, 9)
    body = b"PACK" + (2).to_bytes(4, "big") + (2).to_bytes(4, "big") + base + delta_entry
    pack = body + hashlib.sha1(body).digest()
    sha = "1" * 40
    out.write_bytes(
        b"# v2 git bundle\n" + f"{sha} refs/openprogram/sessions/{sid}\n\n".encode() + pack
    )
    return out


def huge_commit_bundle(tmp_path: Path, source: Path, sid: str) -> Path:
    """The session's history plus a commit with a 300 MB message."""
    work = tmp_path / "huge"
    subprocess.run(["git", "clone", "-q", str(source), str(work)], check=True)
    message = b"x" * (300 << 20)
    env = ["-c", "user.name=x", "-c", "user.email=x@x"]
    top = git(work, "rev-parse", "HEAD^{tree}").strip()
    commit = subprocess.run(
        ["git", *env, "commit-tree", top, "-p", "HEAD"],
        cwd=work, input=message, capture_output=True, check=True,
    ).stdout.decode().strip()  # fmt: skip
    return bundle_of(work, sid, commit, tmp_path / "huge.bundle")


def embedded(tmp_path: Path, bundle: Path, name: str) -> Path:
    """A notebook carrying ``bundle`` as ``%openprogram embed`` saves it."""
    from openprogram_magics.sharing import BUNDLE_MIME

    data = bundle.read_bytes()
    part = {
        "session_id": "s_a",
        "format": "git-bundle",
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "data": base64.b64encode(data).decode(),
    }
    output = {"output_type": "display_data", "data": {BUNDLE_MIME: part}, "metadata": {}}
    cell = {"cell_type": "code", "source": "", "metadata": {}, "outputs": [output]}
    nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / f"{name}.ipynb"
    path.write_text(json.dumps(nb))
    return path


@pytest.fixture
def two(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    a, b = SessionStore(tmp_path / "alice"), SessionStore(tmp_path / "bob")
    monkeypatch.setenv("OPENPROGRAM_HOME", str(b.home))  # the embedded import is bob's
    from openprogram.store.session import store as session_db

    monkeypatch.setattr(session_db, "_db", None)
    yield a, b
    a.close()
    b.close()


def test_hostile_bundles_and_their_embedded_copies_are_refused_in_one_line(
    two, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from openprogram.errors import UserError
    from openprogram_magics.sharing import import_embedded

    alice, bob = two
    turns(alice, "s_a", "one")
    src = alice.session_path("s_a")
    deep = b"[" * 100_000 + b"]" * 100_000
    cases = {
        "zero-padded": (zero_padded_bundle(tmp_path, src, "s_a"), "zeroPaddedFilemode"),
        "bomb": (bomb_bundle(tmp_path / "bomb.bundle", "s_a"), "inflate to more than"),
        "huge commit": (huge_commit_bundle(tmp_path, src, "s_a"), "a commit object of"),
        "deep meta": (craft(tmp_path, src, "s_a", {"meta.json": deep}), "meta.json is not JSON"),
    }
    assert cases["bomb"][0].stat().st_size < 200_000
    import_bundle(bob, export_bundle(alice, "s_a", tmp_path / "ok.bundle"))
    before = state(bob, "s_a")
    listing = sorted(p.name for p in bob.root.iterdir())
    outside = sorted(p.name for p in tmp_path.iterdir())
    for name, (bundle, message) in cases.items():
        for as_id in (None, "s_fresh"):
            with pytest.raises(SyncError, match=message) as caught:
                import_bundle(bob, bundle, as_id=as_id)
            assert "\n" not in str(caught.value), name
        with pytest.raises(UserError, match=message) as caught:
            import_embedded(str(embedded(tmp_path, bundle, name)), "s_fresh", cap=1 << 30)
        assert "\n" not in str(caught.value), name
        assert state(bob, "s_a") == before, name
        assert sorted(p.name for p in bob.root.iterdir()) == listing, name
    # nothing was written outside: only the notebooks this test wrote are new
    new = set(p.name for p in tmp_path.iterdir()) - set(outside)
    assert new == {f"{name}.ipynb" for name in cases}
    # the bomb never inflated: no git process (nor this one) came near its 4.7 GB
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        assert resource.getrusage(who).ru_maxrss < 2 * 1024 * 1024  # KiB: under 2 GiB


def test_an_ordinary_bundle_still_arrives_whole(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice, bob = two
    turns(alice, "s_a", "one", "two", "three")
    received = import_bundle(bob, export_bundle(alice, "s_a", tmp_path / "a.bundle"))
    assert received.status == "new"
    assert state(bob, "s_a")[0] == state(alice, "s_a")[0]
    fsck = subprocess.run(
        ["git", "fsck", "--strict"], cwd=bob.session_path("s_a"), capture_output=True
    )
    assert fsck.returncode == 0, fsck.stderr


def test_a_killed_import_leaves_no_quarantine_behind(op_home: Path) -> None:
    code = (
        "import os, signal\n"
        "from openprogram.store.session.store import SessionStore\n"
        "from openprogram.store.session.sync import _quarantine\n"
        f"store = SessionStore({str(op_home)!r})\n"
        "with _quarantine(store) as q:\n"
        "    (q / 'half-received').write_text('x')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert killed.returncode == -9
    root = op_home / "sessions"
    assert [p.name for p in root.iterdir() if p.name.startswith(".incoming-")]
    SessionStore(op_home).list_sessions()  # the next look at the sessions cleans up
    assert not [p.name for p in root.iterdir() if p.name.startswith(".incoming-")]


def test_the_next_open_of_the_session_removes_a_killed_pulls_quarantine(op_home: Path) -> None:
    """A pull into an existing session killed mid-way: the next command that opens the
    session (here ``sessions show``) leaves no ``.incoming-*`` behind (issue 36 item 4)."""
    SessionStore(op_home).create_session("s_a")
    code = (
        "import os, signal\n"
        "from openprogram.store.session.store import SessionStore\n"
        "from openprogram.store.session.sync import _quarantine\n"
        f"store = SessionStore({str(op_home)!r})\n"
        "with _quarantine(store, 's_a') as q:\n"
        "    (q / 'half-received').write_text('x')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == -9
    root = op_home / "sessions"
    assert [p.name for p in root.iterdir() if p.name.startswith(".incoming-")]
    assert run_cli("sessions", "show", "s_a") == 0
    assert not [p.name for p in root.iterdir() if p.name.startswith(".incoming-")]


def test_the_pack_scanner_reads_a_real_pack_object_by_object_as_git_does(tmp_path: Path) -> None:
    """Objects larger than the scanner's chunk, deltas and many small objects: it finds
    every object git finds and adds up the sizes git reports (so the caps count what git
    would inflate)."""
    from openprogram.store.session.incoming import Caps, scan_pack

    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    text = b"".join(b"line %d of a long node file\n" % i for i in range(20_000))  # ~500 KB
    for i in range(30):
        (repo / f"f{i}.txt").write_bytes(text[: 1000 * (i + 1)] + os.urandom(64).hex().encode())
        (repo / "big.txt").write_bytes(text + b"v%d" % i)
        git(repo, "add", ".")
        git(repo, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", f"c{i}")
    git(repo, "repack", "-adq")
    pack = next((repo / ".git" / "objects" / "pack").glob("*.pack"))
    sizes = git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectsize)").split()
    seen = bytearray()
    with pack.open("rb") as stream:
        scan = scan_pack(stream, seen.extend, Caps())
    assert scan.objects == len(sizes)
    assert scan.inflated == sum(map(int, sizes))
    assert bytes(seen) == pack.read_bytes()  # every byte passed on to git exactly once
    with pack.open("rb") as stream, pytest.raises(SyncError, match="inflate to more than"):
        scan_pack(stream, lambda _: None, Caps(total_bytes=sum(map(int, sizes)) // 2))


def test_a_pack_object_that_is_not_zlib_data_is_refused_in_one_line() -> None:
    """An object whose data does not inflate (here: its header one byte too long) is a
    one-line refusal, not zlib's traceback."""
    import io
    import zlib

    from openprogram.store.session.incoming import Caps, scan_pack

    pack = b"PACK" + (2).to_bytes(4, "big") + (1).to_bytes(4, "big")
    pack += b"\xb0\x80" + zlib.compress(b"") + bytes(20)
    with pytest.raises(SyncError, match=r"^refused: an object in the git pack is not zlib data$"):
        scan_pack(io.BytesIO(pack), lambda _: None, Caps())
