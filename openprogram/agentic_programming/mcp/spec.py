"""What names an MCP server: :class:`ServerSpec` (a name and a command, or a URL).

Pure: parsing what a user wrote — ``create_runtime(mcp=[...])`` entries, ``openprogram chat
--mcp "NAME=CMD ARGS"``, ``%openprogram mcp add NAME -- CMD ARGS`` — into specs, and the
checks that say how to fix a bad one.  Nothing is started here.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from openprogram.context.secrets import redact_command, redact_url_passwords
from openprogram.errors import UserError

DEFAULT_TIMEOUT_S = 30.0  # how long one call may take before it ends the call
START_TIMEOUT_S = 60.0  # how long a server may take to start and answer the handshake
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")
HOW = "an MCP server is NAME=COMMAND ARGS… (stdio) or NAME=http(s)://HOST/PATH (streamable HTTP)"


@dataclass(frozen=True)
class ServerSpec:
    """An MCP server: ``command`` (and its arguments) started over stdio, or ``url``
    reached over streamable HTTP.  ``timeout`` bounds every call, ``start_timeout`` the
    start (a Python server importing its SDK takes seconds on a busy machine)."""

    name: str
    command: tuple[str, ...] = ()
    url: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout: float = DEFAULT_TIMEOUT_S
    start_timeout: float = START_TIMEOUT_S

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME.fullmatch(self.name):
            raise UserError(
                f"MCP server name {self.name!r}: a letter, then letters, digits, _ or - "
                "(at most 40)"
            )
        if bool(self.command) == bool(self.url):
            raise UserError(f"MCP server {self.name!r}: give a command or a url, not both; {HOW}")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise UserError(f"MCP server {self.name!r}: the url must be http(s)://…; {HOW}")
        for which in ("timeout", "start_timeout"):
            value = getattr(self, which)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise UserError(f"MCP server {self.name!r}: {which} must be seconds > 0")

    @property
    def shown(self) -> str:
        """What the server is, for a listing and errors (a URL without its query or its
        password, a command line without its credentials: they may hold a token)."""
        if self.url is not None:
            return redact_url_passwords(self.url.split("?", 1)[0])
        return redact_command(shlex.join(self.command), self.command)


def parse_assignment(text: str) -> ServerSpec:
    """``NAME=COMMAND ARGS…`` or ``NAME=URL`` (the CLI's ``--mcp``) as a spec."""
    name, sep, rest = text.partition("=")
    if not sep or not rest.strip():
        raise UserError(f"--mcp {text!r}: {HOW}")
    return from_words(name.strip(), shlex.split(rest))


def from_words(name: str, words: Sequence[str]) -> ServerSpec:
    """A spec from a name and the words after it (one URL, or a command and its args)."""
    words = list(words)
    if len(words) == 1 and words[0].startswith(("http://", "https://")):
        return ServerSpec(name, url=words[0])
    if not words:
        raise UserError(f"MCP server {name!r} has no command; {HOW}")
    return ServerSpec(name, command=tuple(words))


def spec_of(value: Any) -> ServerSpec:
    """A spec from what ``create_runtime(mcp=[...])`` takes: a :class:`ServerSpec`, a
    ``"NAME=COMMAND ARGS"`` string, or a dict ``{"name", "command" (list or string), "args",
    "url", "env", "cwd", "timeout", "start_timeout"}``."""
    if isinstance(value, ServerSpec):
        return value
    if isinstance(value, str):
        return parse_assignment(value)
    if isinstance(value, Mapping):
        known = {"name", "command", "args", "url", "env", "cwd", "timeout", "start_timeout"}
        extra = sorted(set(value) - known)
        if extra:
            raise UserError(f"MCP server spec: unknown keys {extra}; the keys are {sorted(known)}")
        command = value.get("command") or ()
        words = shlex.split(command) if isinstance(command, str) else list(command)
        words += [str(a) for a in value.get("args") or ()]
        return ServerSpec(
            str(value.get("name")),
            command=tuple(words),
            url=value.get("url"),
            env=dict(value.get("env") or {}),
            cwd=value.get("cwd"),
            timeout=float(value.get("timeout", DEFAULT_TIMEOUT_S)),
            start_timeout=float(value.get("start_timeout", START_TIMEOUT_S)),
        )
    raise UserError(
        f"mcp= takes server specs (a ServerSpec, 'NAME=CMD ARGS' or a dict), not {value!r}"
    )
