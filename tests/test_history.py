"""The store's git layer on its own (``store/session/history.py``): objects, trees, commits,
refs, packs and the log, each checked by git itself (``git cat-file``, ``ls-tree``,
``log``, ``fsck --strict``); and no hand-written git format anywhere in the package."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from openprogram.errors import RefChanged, RefLocked
from openprogram.store.session.files import wait_closed
from openprogram.store.session.history import (
    MAIN_REF,
    REPACK_EVERY,
    TREE_MODE,
    Repository,
    object_sha,
    parse_tree,
    repack,
    tree_data,
)
from openprogram.store.session.queries import read_paths
from openprogram.store.session.safegit import init_repository
from tests.waiting import open_files, running_in, until

ROOT = Path(__file__).resolve().parent.parent

# What writing git's formats by hand looks like; history.py's ref lock is the one allowed.
HAND_WRITTEN = {
    "an object compressed by hand": r"zlib\.compress(obj)?\(",
    "an object header built by hand": (
        r"""[bf]?["'](blob|tree|commit|tag) (%[sd]|\{)|%s %d\\0|%o %s\\0|\{mode:o\} """
    ),
    "a pack or its index built by hand": (
        r"""b["']PACK["']\s*\+|struct\.pack\(|b["']\\377tOc["'],"""
    ),
    "a ref lock made by hand": r"""f["']\{[^}]*\}\.lock["']|\+ ["']\.lock["']""",
    "a ref written by hand": r"""refs/\S*["'].*\.(write_bytes|write_text)\(""",
}


def hand_written_git(package: Path) -> list[str]:
    """``path:line: what`` for every line of ``package`` that writes a git format itself."""
    found = []
    for path in sorted(package.rglob("*.py")):
        allowed = {"a ref lock made by hand"} if path.name == "history.py" else set()
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for what, pattern in HAND_WRITTEN.items():
                if what not in allowed and re.search(pattern, line):
                    found.append(f"{path.relative_to(package.parent)}:{n}: {what}")
    return found


def test_no_git_format_is_written_by_hand_in_the_package() -> None:
    """Objects, trees, commits, packs, indexes and refs are GitPython's, gitdb's or git's
    own: the package holds no zlib call, object header, pack or index layout of its own,
    and moves refs only through ``history.update_ref``."""
    assert hand_written_git(ROOT / "openprogram") == []
    assert hand_written_git(ROOT / "openprogram_magics") == []


def git(path: Path, *args: str, stdin: Path | None = None) -> str:
    with open(stdin or os.devnull, "rb") as data:
        out = subprocess.run(["git", *args], cwd=path, stdin=data, capture_output=True, check=True)
    return out.stdout.decode()


def fsck(path: Path) -> None:
    result = subprocess.run(["git", "fsck", "--strict", "--no-dangling"], cwd=path,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "error" not in result.stderr and "warning" not in result.stderr, result.stderr


def loose_objects(git_dir: Path) -> list[str]:
    objects = git_dir / "objects"
    return [
        fan.name + name
        for fan in objects.iterdir()
        if len(fan.name) == 2 and fan.is_dir()
        for name in os.listdir(fan)
    ]


def packs_of(repo: Repository) -> list[int]:
    """The object count of each pack, smallest first."""
    folder = repo.git_dir / "objects" / "pack"
    counts = [
        int(git(repo.worktree, "show-index", stdin=folder / name).count("\n"))
        for name in os.listdir(folder)
        if name.endswith(".idx")
    ]
    return sorted(counts)


def pack_names(repo: Repository) -> set[str]:
    folder = repo.git_dir / "objects" / "pack"
    return {name[:-5] for name in os.listdir(folder) if name.endswith(".pack")}


def repacks_running() -> list[str]:
    """This process's children that run ``git repack`` (or its ``pack-objects``)."""
    found = []
    for task in os.listdir("/proc/self/task"):
        try:
            children = Path(f"/proc/self/task/{task}/children").read_text().split()
        except OSError:
            continue
        for pid in children:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"repack" in cmdline or b"pack-objects" in cmdline:
                found.append(pid)
    return found


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    init_repository(tmp_path)
    return Repository(tmp_path)


def test_a_blob_is_the_object_git_would_write_and_reads_back(repo: Repository) -> None:
    data = "a node ✓\n".encode()
    sha = repo.store(b"blob", data)
    assert sha == object_sha(b"blob", data)
    out = subprocess.run(["git", "cat-file", "-p", sha.hex()], cwd=repo.worktree,
                         capture_output=True, check=True).stdout  # fmt: skip
    assert out == data
    assert repo.read(sha) == data
    assert repo.store(b"blob", data) == sha  # writing it again is a no-op


def test_trees_are_in_git_order_and_a_commit_nests_them(repo: Repository) -> None:
    files = {
        "meta.json": b"{}",
        "history/0000/000001/00000001-t-n_a.json": b'{"a":1}',
        "history/0000/000001/00000002-f-n_b.json": b'{"b":2}',
        "history/0000/index.json": b"[]",
        "a.b": b"file before a folder named a",
        "a/x": b"in a folder that sorts as a/",
    }
    commit = repo.commit(files, "turn 1 ✓")
    assert repo.read_ref() == commit
    assert git(repo.worktree, "rev-parse", "HEAD").strip() == commit.hex()
    listed = git(repo.worktree, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert sorted(listed) == sorted(files)
    assert git(repo.worktree, "show", "HEAD:a/x") == "in a folder that sorts as a/"
    assert git(repo.worktree, "log", "--format=%an <%ae>|%s").strip() == (
        "openprogram <openprogram@localhost>|turn 1 ✓"
    )
    # trees written here parse back, and their sha is the one computed without writing
    history = repo.tree_at("")["history"]
    assert history[1] == TREE_MODE
    entries = parse_tree(repo.read(history[0]))
    assert object_sha(b"tree", tree_data(entries)) == history[0]
    fsck(repo.worktree)


def test_a_commit_by_an_author_names_them_and_the_openprogram_committer(
    repo: Repository,
) -> None:
    repo.commit({"x": b"1"}, "by ada", author="Ada L <ada@example.org>", when=1_700_000_000)
    shown = git(repo.worktree, "log", "-1", "--format=%an|%ae|%at|%cn|%ce|%ct|%B")
    assert shown.strip() == (
        "Ada L|ada@example.org|1700000000|openprogram|openprogram@localhost|1700000000|by ada"
    )
    fsck(repo.worktree)


def test_a_second_commit_changes_only_its_paths_and_deletes_with_none(repo: Repository) -> None:
    first = repo.commit({"a/1": b"one", "a/2": b"two", "b/3": b"three"}, "first")
    second = repo.commit({"a/2": None, "c/4": b"four"}, "second")
    assert git(repo.worktree, "rev-parse", "HEAD^").strip() == first.hex()
    assert sorted(git(repo.worktree, "ls-tree", "-r", "--name-only", "HEAD").split()) == [
        "a/1", "b/3", "c/4",
    ]  # fmt: skip
    changed = git(repo.worktree, "diff", "--name-status", "HEAD^", "HEAD").split("\n")
    assert sorted(filter(None, changed)) == ["A\tc/4", "D\ta/2"]
    assert repo.read_ref() == second
    fsck(repo.worktree)


def test_committed_files_read_back_one_by_one_and_in_one_batch(repo: Repository) -> None:
    """A path's blob in HEAD, alone (``blob_at``) or many at once (``queries.read_paths``,
    one ``git cat-file --batch``)."""
    files = {f"h/{i:02d}/n.json": f'{{"i":{i}}}\n'.encode() for i in range(40)}
    repo.commit({**files, "h/00/empty": b""}, "many")
    assert repo.blob_at("h/07/n.json") == b'{"i":7}\n'
    with pytest.raises(FileNotFoundError):
        repo.blob_at("h/07")  # a folder, not a file
    with pytest.raises(FileNotFoundError):
        repo.blob_at("h/99/n.json")
    asked = [*files, "h/00/empty", "h/99/n.json", "h/07"]
    assert read_paths(repo, asked) == {**files, "h/00/empty": b""}


def test_a_ref_moves_only_from_the_value_the_writer_read(repo: Repository) -> None:
    first = repo.commit({"x": b"1"}, "one")
    other = repo.store(b"commit", repo.read(first))  # same object, any sha will do
    stale = object_sha(b"commit", b"not the current one")
    with pytest.raises(RefChanged):
        repo.update_ref(MAIN_REF, other, stale)
    assert repo.read_ref() == first
    assert not (repo.git_dir / f"{MAIN_REF}.lock").exists()  # the lock is released
    # a new ref: expected None; then it exists and None no longer matches
    name = "refs/openprogram/sessions/s1"
    repo.update_ref(name, first, None)
    assert git(repo.worktree, "rev-parse", name).strip() == first.hex()
    with pytest.raises(RefChanged):
        repo.update_ref(name, first, None)
    with pytest.raises(ValueError):
        repo.update_ref("HEAD/../../x", first, None)


def test_a_ref_locked_by_git_waits_and_a_stale_lock_is_cleared(repo: Repository) -> None:
    first = repo.commit({"x": b"1"}, "one")
    lock = repo.git_dir / f"{MAIN_REF}.lock"
    lock.write_text("held by someone else\n")
    with pytest.raises(RefLocked):
        repo.update_ref(MAIN_REF, first, first, wait_s=0.05)
    released = threading.Timer(0.1, lock.unlink)
    released.start()
    second = repo.commit({"x": b"2"}, "two")  # waits until the other writer is done
    released.join()
    assert repo.read_ref() == second
    lock.write_text("left by a killed process\n")
    old = time.time() - 3600
    os.utime(lock, (old, old))
    third = repo.commit({"x": b"3"}, "three")
    assert git(repo.worktree, "rev-parse", "HEAD").strip() == third.hex()
    fsck(repo.worktree)


def test_a_ref_only_in_packed_refs_is_read_and_moved(repo: Repository) -> None:
    first = repo.commit({"x": b"1"}, "one")
    git(repo.worktree, "pack-refs", "--all")
    assert not (repo.git_dir / MAIN_REF).exists()
    assert repo.read_ref() == first
    second = repo.commit({"x": b"2"}, "two")
    assert git(repo.worktree, "rev-parse", "HEAD").strip() == second.hex()


def test_a_ref_read_while_it_moves_is_the_old_or_the_new_never_torn(repo: Repository) -> None:
    """A reader of the ref file while a writer moves it 300 times sees a whole sha each
    time, and no replaced ref file is kept open afterwards."""
    first = repo.commit({"x": b"0"}, "zero")
    shas = [first, *(repo.store(b"blob", b"%d" % i) for i in range(300))]
    path = repo.git_dir / MAIN_REF
    seen: set[bytes] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.add(path.read_bytes())

    watching = threading.Thread(target=reader)
    watching.start()
    try:
        for old, new in itertools.pairwise(shas):
            repo.update_ref(MAIN_REF, new, old)
    finally:
        stop.set()
        watching.join()
    assert path.read_bytes() == shas[-1].hex().encode() + b"\n"
    assert all(len(content) == 41 for content in seen)  # never empty, never torn
    wait_closed()  # (the replaced ref files are closed by a thread of files.replace)
    assert open_files(repo.git_dir, deleted=True) == []


def test_concurrent_writers_each_land_their_commit_or_see_it_moved(repo: Repository) -> None:
    """Two repositories objects (two processes' worth) committing on one ref: every commit
    either lands on the one it read, or fails with RefChanged and nothing is lost."""
    repo.commit({"start": b"0"}, "start")
    landed: list[bytes] = []
    mu = threading.Lock()

    def writer(k: int) -> None:
        mine = Repository(repo.worktree)
        for i in range(20):
            while True:
                try:
                    sha = mine.commit({f"w{k}/{i}": b"%d" % i}, f"w{k} {i}")
                except (RefChanged, RefLocked):
                    continue
                with mu:
                    landed.append(sha)
                break
        mine.close()

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    history = git(repo.worktree, "rev-list", "HEAD").split()
    assert set(h.hex() for h in landed) <= set(history)
    assert len(history) == 41
    assert len(git(repo.worktree, "ls-tree", "-r", "--name-only", "HEAD").split()) == 41
    fsck(repo.worktree)


def test_a_commit_is_one_pack_git_reads_and_fsck_finds_clean(repo: Repository) -> None:
    before = set(os.listdir(repo.git_dir / "objects" / "pack"))
    repo.commit({f"history/0000/000001/{i}.json": b"node %d" % i for i in range(8)}, "turn")
    added = set(os.listdir(repo.git_dir / "objects" / "pack")) - before
    assert sorted(name.rsplit(".", 1)[1] for name in added) == ["idx", "pack"]
    assert loose_objects(repo.git_dir) == []
    assert git(repo.worktree, "show", "HEAD:history/0000/000001/5.json") == "node 5"
    assert git(repo.worktree, "log", "--format=%s").splitlines()[0] == "turn"
    fsck(repo.worktree)
    assert repo.blob_at("history/0000/000001/7.json") == b"node 7"  # gitdb reads it too


def test_packing_leaves_no_loose_object_and_everything_readable(repo: Repository) -> None:
    shas = [repo.store(b"blob", b"blob %d" % i) for i in range(30)]
    repo.commit({f"d/{i}": b"file %d" % i for i in range(30)}, "many")
    assert len(loose_objects(repo.git_dir)) == 30  # a commit's own objects are one pack
    repack(repo.git_dir)
    assert loose_objects(repo.git_dir) == []
    assert all(repo.read(sha) == b"blob %d" % i for i, sha in enumerate(shas))
    assert git(repo.worktree, "show", "HEAD:d/7") == "file 7"
    repo.commit({"d/7": b"changed"}, "after packing")  # parents and trees read from the pack
    fsck(repo.worktree)


@pytest.mark.parametrize("sizes", [[1] * 9, [300, 50, *[1] * 7], [400, 150, *[1] * 7]])
def test_small_packs_merge_geometrically_and_stay_readable(
    tmp_path: Path, sizes: list[int]
) -> None:
    """The small packs roll up into one the way ``git repack --geometric=2`` splits them
    (the big ones left), and every commit reads back, ``git fsck --strict`` clean."""
    init_repository(tmp_path)
    repo = Repository(tmp_path)
    for i, size in enumerate(sizes):  # a commit of ``size`` - 2 blobs: that many + tree + commit
        repo.commit({f"f{i}-{k}": b"file %d %d" % (i, k) for k in range(max(size - 2, 1))}, f"c{i}")
    before = packs_of(repo)
    assert len(before) == len(sizes) < REPACK_EVERY  # none started beside the writer yet
    repack(repo.git_dir)
    after = packs_of(repo)
    assert 1 <= len(after) < len(before)
    assert sum(after) == len(git(tmp_path, "rev-list", "--objects", "--all").splitlines())
    log = git(tmp_path, "log", "--format=%s", "main").split()
    assert log == [f"c{i}" for i in reversed(range(len(sizes)))]
    assert repo.blob_at("f0-0") == b"file 0 0" and git(tmp_path, "show", "main:f3-0") == "file 3 0"
    fsck(tmp_path)


def test_a_big_pack_is_left_as_it_is_while_the_small_ones_merge(tmp_path: Path) -> None:
    """What a repack rewrites stays bounded: a pack holding more objects than all the
    small ones together, twice over, is not rewritten; those merge, and everything reads
    back."""
    init_repository(tmp_path)
    repo = Repository(tmp_path)
    repo.commit({f"big-{k}": b"%d" % k for k in range(400)}, "big")
    (big,) = pack_names(repo)
    for i in range(REPACK_EVERY - 2):
        repo.commit({f"f{i}": b"file %d" % i}, f"c{i}")
    repack(repo.git_dir)
    assert big in pack_names(repo) and len(pack_names(repo)) == 2  # not rewritten
    assert git(tmp_path, "show", "main:f3") == "file 3" and repo.blob_at("big-7") == b"7"
    fsck(tmp_path)


def test_a_writer_that_keeps_committing_keeps_few_packs_and_every_commit_reads_back(
    repo: Repository,
) -> None:
    """A writer that keeps committing (a pack a commit) starts git's repack beside itself
    every ``REPACK_EVERY`` packs: 200 commits leave a handful of packs, not 200, each
    object in one of them, and git and the writer itself still read every commit."""
    for i in range(200):
        repo.commit({f"history/0000/{i:06d}/node.json": b"node %d" % i}, f"turn {i}")
        if i == 100:
            assert repo.blob_at("history/0000/000003/node.json") == b"node 3"  # mid-way
    repo.wait_for_repack()
    counts = packs_of(repo)
    assert len(counts) < 200 // REPACK_EVERY
    objects = git(repo.worktree, "rev-list", "--objects", "--all").splitlines()
    assert sum(counts) == len(objects)  # no object kept twice
    log = git(repo.worktree, "log", "--format=%s").splitlines()
    assert log == [f"turn {i}" for i in reversed(range(200))]
    assert git(repo.worktree, "show", "HEAD:history/0000/000007/node.json") == "node 7"
    assert repo.blob_at("history/0000/000199/node.json") == b"node 199"
    assert repo.blob_at("history/0000/000000/node.json") == b"node 0"
    fsck(repo.worktree)


def test_a_writer_never_waits_for_its_repack_and_close_leaves_none_running(
    repo: Repository,
) -> None:
    """Commits never wait for the repack (it runs beside them); closing the repository
    leaves no repack running, and a commit after close starts them again."""
    for i in range(3 * REPACK_EVERY):
        repo.commit({f"history/0000/{i:06d}/node.json": b"node %d" % i}, f"turn {i}")
    repo.close()
    assert repacks_running() == []
    assert repo.blob_at("history/0000/000017/node.json") == b"node 17"
    for i in range(REPACK_EVERY):
        repo.commit({f"after/{i}": b"%d" % i}, f"after close {i}")
    repo.wait_for_repack()
    assert len(packs_of(repo)) < 2 * REPACK_EVERY
    assert git(repo.worktree, "show", "HEAD:after/3") == "3"
    fsck(repo.worktree)


def test_a_read_finds_objects_whose_pack_a_repack_replaced(repo: Repository) -> None:
    """The packs a reader listed are replaced by git (another process's repack, deltas
    and all): the reader looks again and finds every object."""
    for i in range(8):
        repo.commit({f"f{i}": b"a line that repeats\n" * 200 + b"%d" % i}, f"c{i}")
    assert repo.blob_at("f0").endswith(b"repeats\n0")  # the packs listed by this reader
    listed = pack_names(repo)
    git(repo.worktree, "repack", "-a", "-d", "-q")
    assert pack_names(repo).isdisjoint(listed)
    folder = repo.git_dir / "objects" / "pack"
    (made,) = pack_names(repo)
    assert "delta" in git(repo.worktree, "verify-pack", "-v", str(folder / f"{made}.idx"))
    assert repo.blob_at("f1").endswith(b"repeats\n1")
    assert git(repo.worktree, "log", "--format=%s").split() == [f"c{i}" for i in range(7, -1, -1)]
    fsck(repo.worktree)


def test_an_edit_of_a_big_tree_is_the_tree_git_would_write(repo: Repository) -> None:
    """A commit that changes one folder of many (history/ holds one per bucket) writes the
    trees git would (``fsck --strict`` checks their order and format, ``mktree`` their
    sha) and every file reads back."""
    repo.commit({f"history/{b:04d}/x.json": b"bucket %d" % b for b in range(300)}, "many")
    for i in range(20):
        bucket = (i * 37) % 300
        repo.commit({f"history/{bucket:04d}/x.json": b"edit %d" % i}, f"edit {i}")
        repo.wait_for_repack()  # (git reading beside a `repack -d` may miss a pack it drops)
        listing = git(repo.worktree, "ls-tree", "HEAD:history")
        made = subprocess.run(["git", "mktree"], cwd=repo.worktree, input=listing.encode(),
                              capture_output=True, check=True).stdout.decode().strip()  # fmt: skip
        assert made == git(repo.worktree, "rev-parse", "HEAD:history").strip()
        assert git(repo.worktree, "show", f"HEAD:history/{bucket:04d}/x.json") == f"edit {i}"
    assert repo.blob_at("history/0001/x.json") == b"bucket 1"
    fsck(repo.worktree)


def test_an_object_in_several_packs_is_kept_once_by_their_repack(repo: Repository) -> None:
    """The same file in every commit (its blob in each commit's pack again): the repack
    holds it once — an index lists each object once, as git's do — and reads back."""
    for i in range(8):
        repo.commit({f"f{i}": b"the same content", "same": b"the same content"}, f"c{i}")
    assert sum(packs_of(repo)) > len(
        git(repo.worktree, "rev-list", "--objects", "--all").split("\n")
    )
    repack(repo.git_dir)
    counts = packs_of(repo)
    objects = git(repo.worktree, "rev-list", "--objects", "--all").splitlines()
    assert len(counts) == 1 and counts[0] == len(objects)
    assert git(repo.worktree, "show", "HEAD:f7") == "the same content"
    fsck(repo.worktree)


def test_a_writer_killed_mid_commit_leaves_a_readable_repository(repo: Repository) -> None:
    """Temporary pack files and an index whose pack never came (a writer killed between
    its writes) are ignored by git and by readers, and removed by the next repack once old."""
    repo.commit({"x": b"1"}, "one")
    folder = repo.git_dir / "objects" / "pack"
    debris = [
        folder / "tmp_pack_1_2_abc",
        folder / "tmp_idx_1_2_abc",
        folder / f"pack-{'0' * 40}.idx",
    ]
    for path in debris:
        path.write_bytes(b"half written")
        os.utime(path, (time.time() - 7200,) * 2)
    repo.commit({"x": b"2"}, "two")
    assert git(repo.worktree, "show", "HEAD:x") == "2" and repo.blob_at("x") == b"2"
    fsck(repo.worktree)
    repack(repo.git_dir)
    assert [path for path in debris if path.exists()] == []
    assert git(repo.worktree, "log", "--format=%s").split() == ["two", "one"]


KEEP_COMMITTING = """
import sys
from pathlib import Path
from openprogram.store.session.history import Repository
repo = Repository(Path(sys.argv[1]))
i = 0
while True:
    files = {f"history/0000/{i:06d}/node.json": b"node %d" % i, "meta.json": b"%d" % i}
    repo.commit(files, f"c{i}")
    print(i, flush=True)
    i += 1
"""


def test_a_writer_killed_mid_commit_leaves_every_commit_it_reported_readable(
    repo: Repository,
) -> None:
    """A process SIGKILLed while it commits (wherever the kill lands: objects, pack, index,
    ref lock, repack child started): every commit it reported is in git, ``fsck --strict``
    is clean, and the next writer commits on top."""
    repo.lock_held = lambda: True  # as a session's writer: the dead one's write lock died too
    for kill in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", KEEP_COMMITTING, str(repo.worktree)],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert child.stdout is not None
        reported = [child.stdout.readline() for _ in range(2 * REPACK_EVERY + kill)][-1]
        child.kill()
        child.wait()
        child.stdout.close()
        # git's repack the dead writer started goes on and ends by itself; a fsck beside a
        # running `repack -d` may see packs it removes go (git's own, as beside `git gc`)
        assert until(lambda: running_in(repo.worktree) == [], timeout=300)
        log = git(repo.worktree, "log", "--format=%s").split()
        assert f"c{int(reported)}" in log
        fsck(repo.worktree)
        head = repo.commit({"after": b"%d" % kill}, f"after kill {kill}")
        assert git(repo.worktree, "rev-parse", "HEAD").strip() == head.hex()
