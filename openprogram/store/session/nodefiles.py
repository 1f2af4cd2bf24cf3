"""Where a node file's content comes from: the working tree, or git for the turns left out
of it (:mod:`checkout`).  A folder on the way that is a symlink is never followed: the
committed content is read instead."""

from __future__ import annotations

from pathlib import Path

from openprogram.store.session.files import MAX_FILE_BYTES, is_real_dir, read_bytes
from openprogram.store.session.history import Repository, cat_file_batch
from openprogram.store.session.safegit import run_git

BATCH_MIN = 32  # left-out files read by one `git cat-file --batch` rather than one by one
DIRS_KEPT = 1024  # turn folders remembered as checked out


class NodeFiles:
    """Reads (and tells where to write) the node files of one session."""

    def __init__(self, root: Path, repo: Repository) -> None:
        self.root = root
        self.repo = repo
        self._real_dirs: set[str] = set()  # turn folders seen to be real directories

    def read(self, rel: str) -> bytes:
        """The content of node file ``rel``: on disk, else its blob in HEAD; raises
        ``OSError`` (``FileNotFoundError`` when it is neither)."""
        if self.checked_out(rel):
            try:
                return read_bytes(str(self.root / rel))
            except FileNotFoundError:
                pass
        try:
            return self.repo.blob_at(rel)
        except Exception as exc:  # not in HEAD, or objects gitdb cannot read
            raise FileNotFoundError(f"not on disk and not committed ({exc})") from exc

    def read_left_out(self, rels: list[str]) -> dict[str, bytes]:
        """The contents of those of ``rels`` that are not checked out, read from git in one
        go when there are many (the caller reads the rest with :meth:`read`)."""
        self._real_dirs.clear()  # a maintenance may have left some out since
        folders: dict[str, bool] = {}
        left_out = []
        for rel in rels:
            folder = rel.rpartition("/")[0]
            on_disk = folders.get(folder)
            if on_disk is None:
                on_disk = folders[folder] = self.checked_out(rel)
            if not on_disk:
                left_out.append(rel)
        return read_paths(self.repo, left_out) if len(left_out) >= BATCH_MIN else {}

    def checked_out(self, rel: str) -> bool:
        """Whether the turn folder of node file ``rel`` is on disk (a real directory)."""
        folder = rel.rsplit("/", 1)[0]
        if folder not in self._real_dirs:
            bucket_dir = folder.rsplit("/", 1)[0]
            if not (is_real_dir(self.root / folder) and is_real_dir(self.root / bucket_dir)):
                return False
            if len(self._real_dirs) >= DIRS_KEPT:
                self._real_dirs.clear()
            self._real_dirs.add(folder)
        return True

    def on_disk(self, rel_dir: str) -> bool:
        """Whether the turn folder ``rel_dir`` and the folders above it are real directories
        (looked at now, not remembered): a node written there is written to disk too.  A
        turn folder not on disk is in git only until the maintenance puts it there whole."""
        bucket_dir = rel_dir.rsplit("/", 1)[0]
        return all(
            is_real_dir(self.root / rel)
            for rel in (bucket_dir.split("/", 1)[0], bucket_dir, rel_dir)
        )


def read_paths(repo: Repository, paths: list[str]) -> dict[str, bytes]:
    """Many files of HEAD at once (one ``git ls-tree`` of their folders, one ``git
    cat-file --batch``); those not there or over ``MAX_FILE_BYTES`` left out."""
    commit = repo.read_ref()
    if commit is None or not paths:
        return {}
    # the folders two levels up (history/<bucket>), or the whole tree
    folders = {path.rsplit("/", 2)[0] if path.count("/") >= 2 else "" for path in paths}
    listed = run_git(
        repo.worktree, "ls-tree", "-r", "-l", "-z", "--full-tree", commit.hex(), "--",
        *([] if "" in folders else sorted(folders)), check=False,
    )  # fmt: skip
    blobs: dict[str, bytes] = {}  # path -> hex sha, "<mode> blob <sha> <size>\t<path>"
    for item in listed.stdout.split(b"\0") if listed.returncode == 0 else []:
        info, _, name = item.partition(b"\t")
        parts = info.split()
        if len(parts) == 4 and parts[1] == b"blob" and int(parts[3]) <= MAX_FILE_BYTES:
            blobs[name.decode("utf-8", "surrogateescape")] = parts[2]
    wanted = [(path, blobs[path]) for path in paths if path in blobs]
    fetched = cat_file_batch(repo.worktree, [sha for _p, sha in wanted])
    pairs = zip(wanted, fetched, strict=True)
    return {path: got[2] for (path, _sha), got in pairs if got is not None}
