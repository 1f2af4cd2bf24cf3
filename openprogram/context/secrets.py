"""What counts as a credential, in one place: mapping keys (``api_key``, ``Authorization``,
``x-api-key``…) whose values ``sanitize`` masks, and environment variables (``*_API_KEY``,
``*_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*_PASSWORD``…, and the password of a URL any
variable holds) whose values never reach a node, a saved output or printed text, even
inside an error message or traceback."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final
from urllib.parse import quote, quote_plus, unquote

# a key is secret when one of its ``_``/``-``/``.`` separated words is one of these, or it
# ends with ``api_key`` / ``apikey``; counts such as ``max_tokens`` are not credentials
SECRET_WORDS: Final = frozenset(
    {
        "apikey",
        "authorization",
        "auth",
        "bearer",
        "cookie",
        "credential",
        "credentials",
        "passwd",
        "password",
        "secret",
        "token",
        "access_token",
        "private_key",
    }
)
_SPLIT = re.compile(r"[_\-.\s]+")
_cache: dict[str, bool] = {}


def is_secret_key(key: str) -> bool:
    """Whether a mapping key or variable name looks like it holds a credential (cached)."""
    hit = _cache.get(key)
    if hit is None:
        norm = key.lower()
        words = [w for w in _SPLIT.split(norm) if w]
        joined = "_".join(words)
        hit = (
            any(w in SECRET_WORDS for w in words)
            or joined.endswith(("api_key", "apikey", "private_key", "access_key", "secret_key"))
            or "secret" in norm
            or "password" in norm
        )
        if len(_cache) < 4096:
            _cache[key] = hit
    return hit


# an environment variable whose last word is one of these holds a credential too
# (``AZURE_OPENAI_KEY``, ``MISTRAL_KEY``, ``GITHUB_PAT``); only for variable names: a
# mapping's ``key`` or ``sort_key`` is no credential
ENV_SECRET_ENDINGS: Final = frozenset({"key", "keys", "pat", "pass", "passphrase", "pw"})


def is_secret_env(name: str) -> bool:
    """Whether the environment variable ``name`` holds a credential."""
    if is_secret_key(name):
        return True
    words = [w for w in _SPLIT.split(name.lower()) if w]
    return bool(words) and (words[-1] in ENV_SECRET_ENDINGS or words[-1].endswith("token"))


# ``scheme://userinfo@``: the userinfo runs to the last ``@`` before the host (as urllib, httpx
# and git read an unencoded password); in text it also ends at a space, a quote or ``<>``, in a
# remote's URL only at ``/`` or a line's end (git sends a password holding a quote or a space).
# The scheme is bounded: unbounded, a long run like "a.b.c.d…" is scanned again from each of
# its word boundaries (quadratic: seconds per kernel message of 100 KB holding a URL)
URL_USERINFO: Final = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]{0,63})://([^\s/\"'<>]*)@")
_URL_USERINFO_BYTES: Final = re.compile(URL_USERINFO.pattern.encode())
_IN_REMOTE: Final = {  # what ends a userinfo in text and not in a remote's URL
    c: 0 for c in range(0x3001) if chr(c) in "\"'<>" or (chr(c).isspace() and c not in (10, 13))
}
# a credential in a URL's query string or fragment (``?private_token=…``, ``&X-Amz-Signature=…``,
# OAuth's ``#access_token=…``): a parameter named as a variable holding one would be
# (:func:`_secret_param`: ``api_token``, ``client_secret``, ``apiKey``), or one of the
# signed URLs' own names; its value is masked wherever a URL's password is, inside URLs only
_URL: Final = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]{0,63}://[^\s\"'<>]+")
_URL_BYTES: Final = re.compile(_URL.pattern.encode())
_PARAM: Final = re.compile(r"[?&;#]([\w.-]+)=([^&#;\s\"'<>]+)")
_PARAM_BYTES: Final = re.compile(_PARAM.pattern.encode())
_PARAM_SECRETS: Final = frozenset(
    {"key", "sig", "signature", "auth", "pwd", "passwd", "jwt", "awsaccesskeyid"}
    | {"x-amz-signature", "x-goog-signature"}
)


def _userinfos(text: str, remote: bool = False) -> Iterator[tuple[bool, int, int, str, str]]:
    """Each URL's userinfo in ``text``: whether http(s), its span, user name and password."""
    if "://" not in text or "@" not in text:
        return
    for found in URL_USERINFO.finditer(text.translate(_IN_REMOTE) if remote else text):
        user, _, password = text[found.start(2) : found.end(2)].partition(":")
        yield found.group(1).lower() in ("http", "https"), *found.span(2), user, password


def _secret_param(name: str) -> bool:
    """A query parameter holds a credential when its last word says so (``api_token``,
    ``client_secret``, ``apiKey``; not ``token_type``)."""
    words = [w for w in _SPLIT.split(name.lower()) if w]
    last = words[-1] if words else ""
    return (
        name.lower() in _PARAM_SECRETS
        or last in SECRET_WORDS
        or last in ENV_SECRET_ENDINGS
        or last.endswith(("token", "secret", "password", "apikey"))
    )


def _query_spans(text: str) -> list[tuple[int, int]]:
    """Where the credentials in the queries and fragments of the URLs in ``text`` are."""
    if "://" not in text or "=" not in text:
        return []
    return _credential_params(_URL.finditer(text), _PARAM)


def _credential_params(urls: Iterable[re.Match[Any]], params: re.Pattern[Any]) -> list[Any]:
    """The spans of the credentials among the ``params`` of ``urls`` (text or bytes)."""
    spans = []
    for url in urls:
        for found in params.finditer(url.group()):
            name = found.group(1)
            if _secret_param(name if isinstance(name, str) else name.decode("ascii", "replace")):
                spans.append((url.start() + found.start(2), url.start() + found.end(2)))
    return spans


def _masked(text: str, spans: list[tuple[int, int]]) -> str:
    out, at = [], 0
    for start, end in spans:
        out += [text[at:start], REDACTED]
        at = end
    return "".join(out) + text[at:]


def redact_url_passwords(text: str, remote: bool = False) -> str:
    """``text`` with the password of every URL in it replaced by ``***``
    (``http://user:PASS@host/v1`` → ``http://user:***@host/v1``), and a credential in its
    query (``?private_token=***``); ``remote``: the password dropped, and the user name of an
    http(s) URL too (often a token: ``https://host/v1``)."""
    text = _masked(text, _query_spans(text))
    out, at = [], 0
    for http, start, end, user, password in _userinfos(text, remote):
        if remote or password:  # (a remote's: up to its "@", kept for a user name only)
            out.append(
                text[at:start] + (("" if http else f"{user}@") if remote else f"{user}:{REDACTED}")
            )
            at = end + remote
    return "".join(out) + text[at:]


def strip_url_credentials(text: str, url: str = "") -> str:
    """``text`` (a remote's URL, a git message) as it may be printed or stored: no password
    in any URL (no user name either for http(s)), nor ``url``'s anywhere."""
    text = redact_url_passwords(text, remote=True)
    parts = [url[start:end] for start, end in _query_spans(url)]
    for http, _, _, user, password in list(_userinfos(url, remote=True))[:1]:
        parts += (user, password) if http else (password,)
    for form in {f for part in parts for f in (part, unquote(part)) if len(f) >= 4}:
        text = text.replace(form, REDACTED)
    return text


def url_passwords(text: str) -> set[str]:
    """The passwords of the URLs in ``text`` and the credentials in their queries, as written
    and percent-decoded."""
    found = [password for *_, password in _userinfos(text) if password]
    found += [text[start:end] for start, end in _query_spans(text)]
    return set(found) | {unquote(p) for p in found}


MIN_SECRET = 8  # shorter values are not treated as secrets (too many false matches)
REDACTED = "***"
_explicit: set[str] = set()  # keys passed to a provider explicitly
_values: frozenset[str] = frozenset()
_patterns: tuple[bytes, ...] = ()  # what a secret looks like inside serialized JSON
_read_from: dict[bytes, bytes] | None = None  # the environment _values were read from


def register_secret(value: str | None) -> None:
    """Treat ``value`` (a key passed to a provider explicitly) as a secret from now on."""
    global _read_from
    if value and len(value) >= MIN_SECRET and value not in _explicit:
        _explicit.add(value)
        _read_from = None
        refresh_secrets()


def refresh_secrets() -> frozenset[str]:
    """Re-read the credential variables of the environment (when a turn begins, so the
    per-write check below stays a few ``bytes in bytes`` tests); returns the secret values."""
    global _values, _patterns, _read_from
    raw = getattr(os.environ, "_data", None)  # CPython's own dict: compared in C, not decoded
    if raw is not None and raw == _read_from:
        return _values  # unchanged since the last turn (the usual case)
    _read_from = dict(raw) if raw is not None else None
    found = set(_explicit)
    for name, value in os.environ.items():
        if len(value) >= MIN_SECRET and is_secret_env(name):
            found.add(value)
        found |= {p for p in url_passwords(value) if len(p) >= MIN_SECRET}
    found |= {quote(v, safe="") for v in found} | {quote_plus(v) for v in found}  # in a URL
    values = frozenset(found)
    if values != _values:
        patterns = set()
        for value in values:
            patterns.add(value.encode("utf-8", "surrogatepass"))
            patterns.add(json.dumps(value)[1:-1].encode())  # as JSON escapes it
        _values, _patterns = values, tuple(patterns)
    return values


def may_contain_secret(data: bytes) -> bool:
    """Whether serialized ``data`` may hold a known secret (the cheap check on every write)."""
    for pattern in _patterns:  # noqa: SIM110 (a loop: any() + a generator costs more here)
        if pattern in data:
            return True
    return False


def redact_value(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, strings…) with every known secret inside a string
    or a key replaced by ``***``."""
    kind = type(value)
    if kind is str:
        for secret in _values:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value
    if kind is dict:
        return {redact_value(k): redact_value(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [redact_value(v) for v in value]
    return value


def holds_secret(data: bytes) -> bool:
    """Whether serialized ``data`` holds a known secret or a URL with a password or a
    credential in its query (the cheap check on every node written; :func:`redact_shown`
    masks what it finds)."""
    return may_contain_secret(data) or bool(_password_spans(data))


def _password_spans(data: bytes) -> list[tuple[int, int]]:
    """Where the password of each URL in serialized ``data`` is, and each credential in a
    URL's query."""
    if b"://" not in data:
        return []
    found = _URL_USERINFO_BYTES.finditer(data)
    spans = [(data.find(b":", m.start(2), m.end(2)) + 1, m.end(2)) for m in found]
    spans += _credential_params(_URL_BYTES.finditer(data), _PARAM_BYTES)
    return [(start, end) for start, end in spans if 0 < start < end]  # (no ":": -1 + 1)


def mask_binary(data: bytes) -> bytes:
    """``data`` (a binary buffer: a widget's bytes) with every known secret and every URL's
    password (and query credential) in it overwritten by as many ``*``: its length and
    offsets stay, so a binary format around the text stays readable."""
    if not holds_secret(data):
        return data
    out = bytearray(data)
    for pattern in _patterns:
        at = data.find(pattern)
        while at != -1:
            out[at : at + len(pattern)] = b"*" * len(pattern)
            at = data.find(pattern, at + len(pattern))
    for start, end in _password_spans(data):
        out[start:end] = b"*" * (end - start)
    return bytes(out)


def needs_masking(data: bytes) -> bool:
    """:func:`holds_secret` with the environment re-read first (every message a kernel
    sends: a variable set in a cell counts at once)."""
    refresh_secrets()  # a comparison of the environment's raw dict when nothing changed
    return holds_secret(data)


def redact_shown(value: Any) -> Any:
    """``value`` (JSON-like) as it may be shown or saved: :func:`redact_value` and every
    URL's password masked (the one masking of what leaves the process as output)."""
    if isinstance(value, str):
        return redact_url_passwords(redact_value(str(value)))
    if isinstance(value, dict):  # a subclass too (a kernel's message parts may be one)
        return {redact_shown(k): redact_shown(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_shown(v) for v in value]
    return value


def redact_secrets(text: str) -> str:
    """``text`` with the values of credential-like environment variables (and keys given to
    a provider) replaced by ``***`` (an exception message or traceback may quote a key),
    and every URL's password too."""
    return redact_url_passwords(_mask(text, refresh_secrets()))


# what a credential looks like in text, wherever it came from (a session recorded on another
# machine, a key pasted into a prompt): vendor key prefixes, bearer tokens, `api_key=...`
KEY_LIKE: Final = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{16,}|sk_(?:live|test)_[A-Za-z0-9]{16,}|AKIA[0-9A-Z]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|AIza[0-9A-Za-z_-]{30,}|hf_[A-Za-z0-9]{30,})"
    r"|(?<=Bearer )[A-Za-z0-9._~+/=-]{16,}"
    r"|(?i:(?<=api_key=)|(?<=api-key: )|(?<=apikey=))[^\s\"',;]{8,}"
)


def redact_key_like(text: str) -> str:
    """``text`` with whatever looks like a credential (:data:`KEY_LIKE`, a URL's password,
    and the shapes :mod:`openprogram.context.shapes` knows: JWTs, AWS secrets, Slack
    webhooks, 32-digit hex tokens, ``X-Api-Token: …``…) replaced by ``***``: for text
    published from a session (a methods appendix), where the key may not be one this
    machine knows."""
    from openprogram.context.shapes import redact_shapes

    return redact_shapes(redact_url_passwords(KEY_LIKE.sub(REDACTED, text)))


# a credential on a command line (an MCP server's): the value of a flag whose name says so
# (``--token V``, ``--api-key=V``, ``-auth V``, curl's ``-u user:PASS``) and a bearer token
# (``-H "…: Bearer V"``).  A flag is matched whole and its name judged in Python (its words:
# :func:`is_secret_flag`): a flag inside a run of ``[\w.-]`` never starts a match, so every
# match is tried once per run (linear; a name pattern like ``--?[\w.-]*key[\w.-]*`` is tried
# from every ``-`` of a run, cubic: minutes for 10 KB of ``.-key.-key…``)
CLI_FLAG: Final = re.compile(r"(?<![\w.-])(--?[\w.-]+)(=|\s+)(?!-)([^\s\"']+)")
CLI_FLAG_WORD: Final = re.compile(r"--?[\w.-]+")
CLI_BEARER: Final = re.compile(r"(?i)\b(bearer\s+)(?!-)([^\s\"',;]+)")
# last words that make a flag a credential's beyond a variable's (``--pwd``, ``--db-pwd``;
# a variable ``PWD`` is the working folder)
_FLAG_SECRET_ENDINGS: Final = frozenset({"pwd", "cookies"})
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_USER_FLAGS: Final = frozenset({"-u", "--user"})  # curl's ``-u user:password``


def is_secret_flag(flag: str) -> bool:
    """Whether the command-line flag ``flag`` (``--api-key``) takes a credential: the last of
    its ``-``/``_``/``.`` words says so, as a query parameter's would (``--github-token``,
    ``--password``, ``--pat``, ``--pwd``); ``--tokenizer``, ``--author``, ``--max-tokens``,
    ``--auth-mode``, ``--key-file`` and a switch ``--no-auth`` do not."""
    name = flag.lstrip("-")
    words = [w for w in _SPLIT.split(name.lower()) if w]
    if not words or words[0] == "no":
        return False
    return _secret_param(name) or words[-1] in _FLAG_SECRET_ENDINGS  # (by its last word)


def _flag_secret(flag: str, value: str) -> str:
    """The credential in ``value`` given to ``flag`` (``""``: none)."""
    if flag.lower() in _USER_FLAGS:  # (not a URL's port: ``-u http://host:8080``)
        return "" if "/" in value else value.partition(":")[2]
    return value if is_secret_flag(flag) else ""


def _masked_flag(found: re.Match[str]) -> str:
    flag, between, value = found.groups()
    secret = _flag_secret(flag, value)
    if not secret:
        return found.group()
    return f"{flag}{between}{value[: len(value) - len(secret)]}{REDACTED}"


def command_secrets(words: Sequence[str]) -> set[str]:
    """The credentials on the command line ``words`` (:func:`is_secret_flag`, a bearer
    token), and the value of a ``NAME: VALUE`` header whose name is a credential's
    (``X-Api-Key: V``)."""
    found = set()
    for word, after in zip(words, [*words[1:], ""], strict=False):
        if CLI_FLAG_WORD.fullmatch(word) and not after.startswith("-"):
            found.add(_flag_secret(word, after))  # --token V
        found |= {_flag_secret(flag, value) for flag, _, value in CLI_FLAG.findall(word)}  # =V
        found |= {value for _, value in CLI_BEARER.findall(word)}  # "Authorization: Bearer V"
        name, colon, value = word.partition(":")
        if colon and is_secret_key(name.strip()):
            found.add(value.strip())
        name, equals, value = word.partition("=")  # docker's -e NAME=V, env NAME=V
        if equals and _ENV_NAME.fullmatch(name) and is_secret_env(name):
            found.add(value)
    return found - {""}


def redact_command(text: str, words: Sequence[str]) -> str:
    """``text`` (the command line ``words``, what its program said) with the credentials
    the command line holds masked, wherever they are, and :func:`redact_secrets`."""
    text = CLI_BEARER.sub(rf"\1{REDACTED}", CLI_FLAG.sub(_masked_flag, text))
    return redact_secrets(_mask(text, {v for v in command_secrets(words) if len(v) >= 4}))


def without_home(text: str, home: str | None = None) -> str:
    """``text`` with the user's home folder in a path written ``~`` (``/home/ada/work/nb.ipynb``
    → ``~/work/nb.ipynb``): for what travels (a session's title, a published appendix), so
    no user name or home path leaves the machine.  ``home``: the folder (default: ``~``)."""
    home = (home if home is not None else os.path.expanduser("~")).rstrip("/\\")
    if len(home) < 2 or home not in text:  # no home, or "/": nothing to hide
        return text
    out, at = [], 0
    while (found := text.find(home, at)) != -1:
        end = found + len(home)
        boundary = end == len(text) or text[end] in "/\\"
        starts = found == 0 or not (text[found - 1].isalnum() or text[found - 1] in "._-~/")
        out.append(text[at:found] + ("~" if boundary and starts else home))
        at = end
    return "".join(out) + text[at:]


def _mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` replaced by ``***`` (the longest first, so a
    secret holding another is masked whole)."""
    for value in sorted(secrets, key=len, reverse=True):
        if value in text:
            text = text.replace(value, REDACTED)
    return text


class SecretStream:
    """:func:`redact_secrets` for text that arrives in pieces (a streamed reply): a secret
    split across two pieces is masked too.  ``feed`` returns what may be shown now and
    holds back a tail that could be the start of a secret until the next piece shows
    whether it is one; ``end`` returns what is held back."""

    def __init__(self) -> None:
        self.secrets = refresh_secrets()
        self._held = ""

    def feed(self, piece: str) -> str:
        if not self.secrets:
            return piece
        text = _mask(self._held + piece, self.secrets)
        keep = self._partial(text)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def end(self) -> str:
        held, self._held = self._held, ""
        return held

    @property
    def holding(self) -> bool:
        """Whether a tail is held back (:meth:`end` returns it)."""
        return bool(self._held)

    def _partial(self, text: str) -> int:
        """The length of the longest tail of ``text`` that begins some secret."""
        longest = 0
        for secret in self.secrets:
            start = max(0, len(text) - len(secret) + 1)  # a tail shorter than the secret
            at = text.find(secret[0], start)
            while at != -1:
                if len(text) - at <= longest:
                    break
                if secret.startswith(text[at:]):
                    longest = len(text) - at
                    break
                at = text.find(secret[0], at + 1)
        return longest


refresh_secrets()
