"""How sharing runs git: every git command of :mod:`sync` and :mod:`syncmerge` goes through
:func:`git` (no hooks, no programs the repository names, objects checked on receipt), plus
the few questions they ask of a commit (a branch's tip, ancestry) and the one-line error a
failed git command becomes.
"""

from __future__ import annotations

import subprocess
import zlib
from pathlib import Path
from typing import BinaryIO

from openprogram.store.session.history import read_ref
from openprogram.store.session.incoming import (
    Caps,
    Header,
    PackFile,
    PackScan,
    pack_objects,
    scan_pack,
)
from openprogram.store.session.safegit import git_command, git_dir_of, run_git
from openprogram.store.session.syncrules import SyncError, redact_text

INCOMING = "refs/openprogram/incoming"
QUARANTINE_PREFIX = ".incoming-"


def git(
    repo: Path,
    *args: str,
    input: bytes | None = None,
    check: bool = True,
    network: str | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run git on ``repo`` through :func:`safegit.run_git` (no hooks, no programs the
    repository names, objects checked on receipt).  ``network`` (the allowed protocols)
    also lets git use the user's own ways to authenticate — their credential helper,
    askpass, ssh agent — and nothing else.  A quarantine keeps its ``alternates`` (ours)."""
    return run_git(
        repo,
        "-c",
        "transfer.fsckObjects=true",
        *args,
        input=input,
        check=check,
        network=network,
        sanitize=not repo.name.startswith(QUARANTINE_PREFIX),
    )


def git_out(repo: Path, *args: str) -> str:
    return git(repo, *args).stdout.decode().strip()


def git_fail(what: str, result: subprocess.CompletedProcess[bytes], url: str = "") -> SyncError:
    """The error of a failed git command: git's first ``fatal:``/``error:`` line, which
    says why (``'…' does not appear to be a git repository``), not its last, which is
    often advice (``… and the repository exists.``); else its last line."""
    lines = [" ".join(t.split()) for t in result.stderr.decode(errors="replace").splitlines()]
    lines = [t for t in lines if t]
    said = [t.split(":", 1)[1].strip() for t in lines if t.startswith(("fatal:", "error:"))]
    reason = said[0] if said else lines[-1] if lines else "git failed"
    # git quotes the URL it was given (``could not read Password for 'https://TOKEN@…'``):
    # no credential of any URL, nor the parts of ``url``'s, reaches the message
    return SyncError(redact_text(f"{what}: {reason[:300]}", url))


def main_commit(repo: Path) -> str | None:
    """The commit a session's ``main`` names (read as git does: loose, else packed-refs;
    no git process)."""
    found = read_ref(git_dir_of(repo), "refs/heads/main")
    return found.hex() if found is not None else None


def own_objects(repo: Path) -> bytes:
    """The names (hex, one a line) of the objects stored in ``repo`` itself — its packs'
    indexes and its loose objects, not what it borrows through ``alternates``: in a
    quarantine, exactly what arrived."""
    objects = repo / ".git" / "objects"
    names: list[bytes] = []
    for idx in sorted((objects / "pack").glob("*.idx")):
        data = idx.read_bytes()
        if data[:8] != b"\377tOc\x00\x00\x00\x02":
            raise SyncError(f"refused: {idx.name} is not a version 2 pack index")
        count = int.from_bytes(data[8 + 255 * 4 : 8 + 256 * 4], "big")
        table = data[8 + 256 * 4 : 8 + 256 * 4 + 20 * count]
        names.extend(table[i : i + 20].hex().encode() for i in range(0, len(table), 20))
    for fan in sorted(objects.glob("[0-9a-f][0-9a-f]")):
        names.extend(f"{fan.name}{obj.name}".encode() for obj in fan.iterdir())
    return b"".join(n + b"\n" for n in names)


def own_object_kinds(
    repo: Path, scanned: dict[int, Header] | None = None
) -> dict[bytes, tuple[bytes, int]] | None:
    """The type and size of each object stored in ``repo`` itself (binary sha -> (type,
    size)), read here from its packs' headers and its loose objects' — in a quarantine, of
    what arrived, checked by git as it arrived — or None when one is not as git writes it
    (then ``git cat-file --batch-check`` of :func:`own_objects` says).  ``scanned``: the
    headers :func:`index_pack` read of the one pack ``repo`` holds."""
    objects = repo / ".git" / "objects"
    out: dict[bytes, tuple[bytes, int]] = {}
    indexes = sorted((objects / "pack").glob("*.idx"))
    if scanned is not None and len(indexes) != 1:
        scanned = None
    for idx in indexes:
        try:
            with idx.with_suffix(".pack").open("rb") as f:
                found = pack_objects(idx.read_bytes(), PackFile(f.fileno()), scanned)
        except (OSError, ValueError):
            return None
        if found is None:
            return None
        out.update(found)
    for fan in sorted(objects.glob("[0-9a-f][0-9a-f]")):
        for obj in fan.iterdir():
            try:  # "<type> <size>\0" deflated, then the content
                with obj.open("rb") as f:
                    head = zlib.decompressobj().decompress(f.read(512), 32)
                kind, size = head.split(b"\0", 1)[0].split(b" ")
                out[bytes.fromhex(fan.name + obj.name)] = (kind, int(size))
            except (OSError, ValueError, zlib.error):
                return None
    return out


def is_ancestor(repo: Path, a: str, b: str) -> bool:
    return git(repo, "merge-base", "--is-ancestor", a, b, check=False).returncode == 0


def index_pack(repo: Path, pack: BinaryIO, caps: Caps) -> PackScan:
    """Store the pack read from ``pack`` in ``repo`` (a quarantine) through ``git
    index-pack --strict`` (git's fsck of every object, thin packs completed from the
    borrowed objects), counting it against ``caps`` as it streams: git is stopped the
    moment the declared sizes pass them, before it inflates what would pass them."""
    argv, env = git_command(
        repo, "index-pack", "--strict", "--fix-thin", "--stdin",
        sanitize=not repo.name.startswith(QUARANTINE_PREFIX),
    )  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=repo, env=env, stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stderr is not None
    stdin = proc.stdin

    def feed(data: bytes) -> None:
        try:
            stdin.write(data)
        except BrokenPipeError:  # git stopped (it says why on stderr)
            pass

    try:
        scan = scan_pack(pack, feed, caps)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        try:
            stdin.close()
        except BrokenPipeError:
            pass
    err = proc.stderr.read()
    if proc.wait() != 0:
        lines = err.decode(errors="replace").splitlines()
        why = next((t for t in lines if t.startswith("error:")), lines[-1] if lines else "")
        failed = subprocess.CompletedProcess[bytes]([], 1, b"", why.encode())
        raise git_fail("refused by git's object check", failed)
    return scan
