"""The store's git layer on its own: objects, trees, commits, refs and packing, each
checked by git itself (``git cat-file``, ``ls-tree``, ``log``, ``fsck --strict``)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from openprogram.errors import RefChanged, RefLocked
from openprogram.store.session import packing, repository
from openprogram.store.session.packing import (
    MAX_PACKS,
    MERGE_FAN,
    MERGE_LEVELS,
    combine_packs,
    loose_objects,
    merge_small_packs,
    pack_loose,
)
from openprogram.store.session.repository import (
    MAIN_REF,
    TREE_MODE,
    Repository,
    object_sha,
    parse_tree,
    tree_sha,
)
from openprogram.store.session.safegit import init_repository


def git(path: Path, *args: str, stdin: Path | None = None) -> str:
    with open(stdin or os.devnull, "rb") as data:
        out = subprocess.run(["git", *args], cwd=path, stdin=data, capture_output=True, check=True)
    return out.stdout.decode()


def fsck(path: Path) -> None:
    result = subprocess.run(["git", "fsck", "--strict", "--no-dangling"], cwd=path,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "error" not in result.stderr and "warning" not in result.stderr, result.stderr


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
    history = repo.head_tree()["history"]
    assert history[1] == TREE_MODE
    entries = parse_tree(repo.read(history[0]))
    assert tree_sha(entries, ordered=True) == history[0]
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
    """What the store reads for files left out of the working tree: a path's blob in HEAD,
    alone (``blob_at``) or many at once (``read_paths``, one ``git cat-file --batch``)."""
    files = {f"h/{i:02d}/n.json": f'{{"i":{i}}}\n'.encode() for i in range(40)}
    repo.commit({**files, "h/00/empty": b""}, "many")
    assert repo.blob_at("h/07/n.json") == b'{"i":7}\n'
    with pytest.raises(FileNotFoundError):
        repo.blob_at("h/07")  # a folder, not a file
    with pytest.raises(FileNotFoundError):
        repo.blob_at("h/99/n.json")
    asked = [*files, "h/00/empty", "h/99/n.json", "h/07"]
    assert repo.read_paths(asked) == {**files, "h/00/empty": b""}


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
    packed = pack_loose(repo.worktree)
    assert packed == 30
    assert loose_objects(repo.git_dir) == []
    assert all(repo.read(sha) == b"blob %d" % i for i, sha in enumerate(shas))
    assert git(repo.worktree, "show", "HEAD:d/7") == "file 7"
    repo.commit({"d/7": b"changed"}, "after packing")  # parents and trees read from the pack
    fsck(repo.worktree)


def packs_of(repo: Repository) -> list[int]:
    """The object count of each pack, smallest first."""
    folder = repo.git_dir / "objects" / "pack"
    counts = [
        int(git(repo.worktree, "show-index", stdin=folder / name).count("\n"))
        for name in os.listdir(folder)
        if name.endswith(".idx")
    ]
    return sorted(counts)


@pytest.mark.parametrize("sizes", [[1] * 24, [300, 50, *[1] * 22], [400, 150, *[1] * 22]])
def test_small_packs_merge_as_gits_geometric_repack_would_and_stay_readable(
    tmp_path: Path, sizes: list[int]
) -> None:
    """Past ``MAX_PACKS`` packs the maintenance merges the small ones the way ``git repack
    --geometric=2`` splits them — by naming their objects, not walking the history — and
    every commit reads back, ``git fsck --strict`` clean."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    init_repository(ours)
    repo = Repository(ours)
    for i, size in enumerate(sizes):  # a commit of ``size`` - 2 blobs: that many + tree + commit
        repo.commit({f"f{i}-{k}": b"file %d %d" % (i, k) for k in range(max(size - 2, 1))}, f"c{i}")
    before = packs_of(repo)
    assert len(before) == len(sizes) > MAX_PACKS
    subprocess.run(["cp", "-a", str(ours), str(theirs)], check=True)
    git(theirs, "repack", "-d", "-q", "--geometric=2")
    merged = merge_small_packs(repo.git_dir, ours)
    assert merged > 1 and len(packs_of(repo)) == len(before) - merged + 1
    assert sorted(packs_of(repo)) == sorted(packs_of(Repository(theirs)))  # git's split
    log = git(ours, "log", "--format=%s", "main").split()
    assert log == [f"c{i}" for i in reversed(range(len(sizes)))]
    assert repo.blob_at("f0-0") == b"file 0 0" and git(ours, "show", "main:f3-0") == "file 3 0"
    fsck(ours)


def test_a_big_pack_is_left_as_it_is_while_the_small_ones_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a maintenance rewrites stays bounded: a pack over ``BIG_PACK_BYTES`` (as git's
    ``gc.bigPackThreshold``) is neither merged nor counted; past ``MAX_PACKS`` small ones,
    those merge, and everything reads back."""
    init_repository(tmp_path)
    repo = Repository(tmp_path)
    repo.commit({f"big-{k}": os.urandom(2000) for k in range(40)}, "big")
    (big,) = pack_names(repo)
    size = (repo.git_dir / "objects" / "pack" / f"{big}.pack").stat().st_size
    monkeypatch.setattr(packing, "BIG_PACK_BYTES", size)
    for i in range(MAX_PACKS):  # with the big one: one pack more than MAX_PACKS
        repo.commit({f"f{i}": b"file %d" % i}, f"c{i}")
    assert merge_small_packs(repo.git_dir, tmp_path) == 0  # MAX_PACKS small ones: not yet
    repo.commit({"one-more": b"x"}, "one more")
    assert merge_small_packs(repo.git_dir, tmp_path) > 1
    assert big in pack_names(repo)  # not rewritten
    assert git(tmp_path, "show", "main:f3") == "file 3" and repo.blob_at("big-7")
    fsck(tmp_path)


def pack_names(repo: Repository) -> set[str]:
    folder = repo.git_dir / "objects" / "pack"
    return {name[:-5] for name in os.listdir(folder) if name.endswith(".pack")}


def test_a_writers_own_packs_merge_level_by_level_and_every_commit_reads_back(
    repo: Repository,
) -> None:
    """A writer that keeps committing (a pack a commit) merges its own packs eight at a
    time, in levels: 200 commits leave a handful of packs, not 200, each object in one of
    them, and git and the writer itself still read every commit."""
    for i in range(200):
        repo.commit({f"history/0000/{i:06d}/node.json": b"node %d" % i}, f"turn {i}")
        repo.merge_own_packs(wait=True)
        if i == 100:
            assert repo.blob_at("history/0000/000003/node.json") == b"node 3"  # mid-way
    counts = packs_of(repo)
    assert len(counts) <= (MERGE_FAN - 1) * MERGE_LEVELS and len(counts) < 200 // MERGE_FAN
    objects = git(repo.worktree, "rev-list", "--objects", "--all").splitlines()
    assert sum(counts) == len(objects)  # no object kept twice
    log = git(repo.worktree, "log", "--format=%s").splitlines()
    assert log == [f"turn {i}" for i in reversed(range(200))]
    assert git(repo.worktree, "show", "HEAD:history/0000/000007/node.json") == "node 7"
    assert repo.blob_at("history/0000/000199/node.json") == b"node 199"
    assert repo.blob_at("history/0000/000000/node.json") == b"node 0"
    fsck(repo.worktree)


def test_a_writer_that_never_waits_still_merges_its_packs_and_close_ends_the_merging(
    repo: Repository,
) -> None:
    """Commits that never wait for a merge (a session's: the merging runs beside them):
    300 commits leave a handful of packs once the merging is done, readable by git and the
    writer, and closing the repository leaves no merging thread behind."""
    for i in range(300):
        repo.commit({f"history/0000/{i:06d}/node.json": b"node %d" % i}, f"turn {i}")
        repo.merge_own_packs()
    repo.wait_for_merge()
    counts = packs_of(repo)
    assert len(counts) <= (MERGE_FAN - 1) * MERGE_LEVELS and len(counts) < 300 // MERGE_FAN
    assert sum(counts) == len(git(repo.worktree, "rev-list", "--objects", "--all").splitlines())
    assert repo.blob_at("history/0000/000017/node.json") == b"node 17"
    repo.close()
    assert not [t for t in threading.enumerate() if t.name == "op-pack-merge"]


def test_a_repository_left_open_does_not_keep_its_merging_thread(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository that merged and is then left (never closed, as a script may leave a
    session) lets its merging thread end once it has been idle, and merges again later."""
    monkeypatch.setattr(repository, "MERGER_IDLE_S", 0.01)
    for i in range(MERGE_FAN):
        repo.commit({f"f{i}": b"%d" % i}, f"c{i}")
        repo.merge_own_packs()
    merger = repo._merger  # (None when it has ended already)
    if merger is not None:
        merger.join()  # it ends by itself (else: the suite's timeout)
    assert repo._merger is None and len(packs_of(repo)) == 1
    for i in range(MERGE_FAN):
        repo.commit({f"g{i}": b"%d" % i}, f"d{i}")
        repo.merge_own_packs()
    repo.wait_for_merge()
    assert len(packs_of(repo)) == 2 and git(repo.worktree, "show", "HEAD:g7") == "7"
    repo.commit({"after-close": b"x"}, "a commit after close")  # merging starts again
    assert git(repo.worktree, "show", "HEAD:after-close") == "x"
    fsck(repo.worktree)


def test_a_merge_of_own_packs_leaves_out_one_gone_and_one_with_deltas(repo: Repository) -> None:
    """A pack a maintenance merged meanwhile (gone) and a pack git made with deltas are
    left out: the others merge, git's stays, every object reads back."""
    made = []
    for i in range(MERGE_FAN):
        before = pack_names(repo)
        repo.commit({f"f{i}": b"a line that repeats\n" * 200 + b"%d" % i}, f"c{i}")
        made += sorted(pack_names(repo) - before)
    folder = repo.git_dir / "objects" / "pack"
    # as a maintenance does: the first two packs' objects into a pack git writes (the second
    # blob a delta of the first), the first pack removed
    names = []
    for name in made[:2]:
        names += git(repo.worktree, "show-index", stdin=folder / f"{name}.idx").split()[1::3]
    stdin = "\n".join(names).encode() + b"\n"
    subprocess.run(["git", "pack-objects", "-q", str(folder / "pack")], cwd=repo.worktree,
                   input=stdin, check=True, capture_output=True)  # fmt: skip
    (git_made,) = pack_names(repo) - set(made)
    assert "delta" in git(repo.worktree, "verify-pack", "-v", str(folder / f"{git_made}.idx"))
    (folder / f"{made[0]}.pack").unlink()
    (folder / f"{made[0]}.idx").unlink()
    merged = combine_packs(str(repo.git_dir / "objects"), [*made, git_made])
    assert merged is not None
    assert pack_names(repo) == {merged, git_made}
    assert git(repo.worktree, "log", "--format=%s").split() == [f"c{i}" for i in range(7, -1, -1)]
    assert Repository(repo.worktree).blob_at("f1").endswith(b"repeats\n1")
    fsck(repo.worktree)


def test_an_edit_of_a_big_tree_is_the_tree_git_would_write(repo: Repository) -> None:
    """A commit that changes one folder of many (history/ holds one per bucket) edits the
    parent tree's bytes in place rather than formatting every entry again: the trees are
    still git's own (``fsck --strict`` checks their order and format, ``mktree`` their
    sha) and every file reads back."""
    repo.commit({f"history/{b:04d}/x.json": b"bucket %d" % b for b in range(300)}, "many")
    for i in range(20):
        bucket = (i * 37) % 300
        repo.commit({f"history/{bucket:04d}/x.json": b"edit %d" % i}, f"edit {i}")
        listing = git(repo.worktree, "ls-tree", "HEAD:history")
        made = subprocess.run(["git", "mktree"], cwd=repo.worktree, input=listing.encode(),
                              capture_output=True, check=True).stdout.decode().strip()  # fmt: skip
        assert made == git(repo.worktree, "rev-parse", "HEAD:history").strip()
        assert git(repo.worktree, "show", f"HEAD:history/{bucket:04d}/x.json") == f"edit {i}"
    assert repo.blob_at("history/0001/x.json") == b"bucket 1"
    fsck(repo.worktree)


def test_an_object_in_several_own_packs_is_kept_once_by_their_merge(repo: Repository) -> None:
    """The same file in every commit (its blob stored by each batch again): the merged pack
    holds it once — an index lists each object once, as git's do — and reads back."""
    for i in range(MERGE_FAN):
        repo.commit({f"f{i}": b"the same content", "same": b"the same content"}, f"c{i}")
    assert sum(packs_of(repo)) > len(
        git(repo.worktree, "rev-list", "--objects", "--all").split("\n")
    )
    repo.merge_own_packs(wait=True)
    counts = packs_of(repo)
    objects = git(repo.worktree, "rev-list", "--objects", "--all").splitlines()
    assert len(counts) == 1 and counts[0] == len(objects)
    assert git(repo.worktree, "show", "HEAD:f7") == "the same content"
    fsck(repo.worktree)
