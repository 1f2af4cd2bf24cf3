"""Who runs this process: the author of the session commits and turns it writes.

The person's own git identity, read the way git would find it for them but without
trusting anything a session brings: ``GIT_AUTHOR_NAME``/``GIT_AUTHOR_EMAIL`` first, then
``author.*``/``user.*`` of their *global* config file only (``$GIT_CONFIG_GLOBAL``, else
``$XDG_CONFIG_HOME/git/config`` then ``~/.gitconfig``, the later winning as in git), each
read as a plain file by ``git config --file F --no-includes`` under
:func:`safegit.git_env` from ``/`` (no repository around it, no include followed).  A
session's own ``.git/config`` is never read: it comes from whoever wrote the folder.

Without one, the login name at the host name, marked ``(unverified)`` in the name so the
log says it is a guess.  Read once per process (:func:`current_author`); the committer of
every session commit stays ``openprogram`` (:data:`safegit.ACTOR_NAME`): the person is who
ran the turn, the committer says that the program wrote the commit.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openprogram.store.session.safegit import ACTOR_EMAIL, ACTOR_NAME, git_env

MAX_PART = 120  # characters of a name or an email kept
_CRUD = re.compile(r"[<>\x00-\x1f\x7f]")  # what git strips or cannot hold in an ident
_KEYS = r"^(user|author)\.(name|email)$"


@dataclass(frozen=True)
class Author:
    name: str
    email: str
    verified: bool = True  # False: guessed from the login and host names

    @property
    def ident(self) -> str:
        """``Name <email>`` as a commit's author line holds it."""
        return f"{self.name} <{self.email}>"

    def to_json(self) -> dict[str, Any]:
        """What a turn node records as ``metadata.author``."""
        out: dict[str, Any] = {"name": self.name, "email": self.email}
        if not self.verified:
            out["unverified"] = True
        return out


OPENPROGRAM = Author(ACTOR_NAME, ACTOR_EMAIL)

_cached: Author | None = None
_record: tuple[Author, dict[str, Any]] | None = None  # (author, its to_json())
_mu = threading.Lock()


def clean(text: str) -> str:
    """``text`` fit for a git ident: no ``<``, ``>`` or control characters, one line."""
    return " ".join(_CRUD.sub(" ", text).split())[:MAX_PART]


def current_author() -> Author:
    """The person running this process (read once, then cached)."""
    global _cached
    known = _cached  # once read, no lock (one reference read is atomic)
    if known is not None:
        return known
    with _mu:
        if _cached is None:
            _cached = _find_author()
        return _cached


def author_record() -> dict[str, Any]:
    """``current_author().to_json()`` -- what a turn node records as ``metadata.author`` --
    built once per author value (a turn-level node writes it on every turn), handed out as
    a copy each call: the node owns its metadata."""
    global _record
    author = current_author()
    made = _record
    if made is None or made[0] is not author:
        made = _record = (author, author.to_json())
    return dict(made[1])


def forget_author() -> None:
    """Read the identity again at the next :func:`current_author` (tests, a changed env)."""
    global _cached
    with _mu:
        _cached = None


def global_config_files() -> list[Path]:
    """The user's global git config files, in the order git reads them (later wins)."""
    named = os.environ.get("GIT_CONFIG_GLOBAL")
    if named:
        return [Path(named)]
    home = Path(os.environ.get("HOME") or Path.home())
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    return [Path(xdg) / "git" / "config", home / ".gitconfig"]


def read_config(path: Path) -> dict[str, str]:
    """``user.*``/``author.*`` of one config file, read as a file (includes not followed);
    empty when it is missing or git cannot read it."""
    if not path.is_file():
        return {}
    try:
        result = subprocess.run(
            ["git", "config", "--file", str(path), "--no-includes", "--get-regexp", _KEYS],
            cwd="/",
            env=git_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    found: dict[str, str] = {}
    for line in result.stdout.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(" ")
        found[key.lower()] = value
    return found


def _find_author() -> Author:
    name = clean(os.environ.get("GIT_AUTHOR_NAME", ""))
    email = clean(os.environ.get("GIT_AUTHOR_EMAIL", ""))
    if not (name and email):
        config: dict[str, str] = {}
        for path in global_config_files():
            config.update(read_config(path))
        name = name or clean(config.get("author.name") or config.get("user.name") or "")
        email = email or clean(config.get("author.email") or config.get("user.email") or "")
    email = email or clean(os.environ.get("EMAIL", ""))
    if name and email:
        return Author(name, email)
    login = _login()
    host = clean(socket.gethostname()).replace(" ", "") or "localhost"
    return Author(f"{name or login} (unverified)", email or f"{login}@{host}", verified=False)


def _login() -> str:
    try:
        login = clean(getpass.getuser()).replace(" ", "")
    except (OSError, KeyError, ImportError):  # no USER/LOGNAME and no passwd entry
        login = ""
    return login or "user"
