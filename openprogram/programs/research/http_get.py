"""One GET over http(s) for the literature tools: it reaches only what was asked, within one
deadline, or raises :class:`LiteratureError` with one line saying why.

- Only ``http``/``https`` URLs; a redirect is followed (by urllib's own redirect handler,
  checked at every hop) only to the same scheme, host and port as the URL asked for, and at
  most :data:`MAX_REDIRECTS` times; anything else is refused in one line naming where it
  pointed, before any connection to it is made.
- Each socket operation has a timeout, and one deadline bounds the whole answer (name
  lookup, connect, TLS, headers and body, however slowly a server drips them): the request
  runs on a helper thread, the caller waits for it until the deadline, and at the deadline
  the request's sockets are shut down (so the helper ends too) and the caller gets "too
  slow".  Neither urllib nor httpx has such a deadline: their timeouts are per operation,
  which a server sending one byte at a time never trips.
- A size limit: the declared ``Content-Length`` is checked before reading, bytes are counted
  while reading.

Pure stdlib (urllib, http.client, socket, threading).
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import IO, Any

from openprogram.context.secrets import redact_secrets
from openprogram.errors import LiteratureError

MAX_REDIRECTS = 5
SCHEMES = {"http": 80, "https": 443}
Origin = tuple[str, str, int]


def shown(text: str, limit: int = 200) -> str:
    """``text`` quoted for a one-line message (control characters escaped, cut at ``limit``)."""
    return repr(text[:limit] + ("…" if len(text) > limit else ""))


def origin(url: str) -> Origin | None:
    """(scheme, host, port) of an http(s) URL with a host, the port filled in; else None."""
    if any(ord(c) <= 32 or ord(c) == 127 for c in url):
        return None  # whitespace or control characters: not a URL to send
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:  # a malformed port or IPv6 literal
        return None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port if port is not None else SCHEMES[scheme]


# -- the deadline -------------------------------------------------------------------------------
class _Sockets:
    """The sockets one GET opened, shut down at its deadline.  Each is kept as a duplicate
    descriptor: shutting that one down ends the connection for every descriptor of it, also
    after TLS has taken the original socket object over."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.capped = False  # a socket's timeout was cut to the time left: it ends at the deadline
        self.expired = False
        self._lock = threading.Lock()
        self._held: list[socket.socket] = []

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def too_slow(self, url: str) -> LiteratureError:
        return LiteratureError(f"{url}: too slow (no full answer in {self.seconds:g} s)")

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            if self.expired:
                _shut(sock)
            else:
                self._held.append(sock.dup())

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._held:
                _shut(sock)

    def close(self) -> None:
        with self._lock:
            for sock in self._held:
                sock.close()
            self._held.clear()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected (any more): nothing to end


class _Connection(http.client.HTTPConnection):
    """An HTTP connection whose socket is shut down at the GET's deadline; connecting waits
    no longer than the time left."""

    sockets: _Sockets

    def connect(self) -> None:
        if isinstance(self.timeout, (int, float)):
            left = self.sockets.remaining()
            if left < self.timeout:
                self.sockets.capped = True
                self.timeout = max(0.001, left)
        super().connect()  # the plain TCP connection (HTTPS wraps it after this returns)
        self.sockets.add(self.sock)


class _TLSConnection(http.client.HTTPSConnection, _Connection):
    """HTTPS: ``HTTPSConnection.connect`` calls ``_Connection.connect`` for the TCP part, so the
    socket is watched before the TLS handshake starts."""


def _factory(cls: type[_Connection], sockets: _Sockets) -> Callable[..., _Connection]:
    def make(host: str, **kwargs: Any) -> _Connection:
        connection = cls(host, **kwargs)
        connection.sockets = sockets
        return connection

    return make


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, sockets: _Sockets) -> None:
        super().__init__()
        self._sockets = sockets

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_factory(_Connection, self._sockets), req)  # type: ignore[arg-type]


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, sockets: _Sockets) -> None:
        super().__init__()
        self._sockets = sockets

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        context = getattr(self, "_context", None)
        return self.do_open(_factory(_TLSConnection, self._sockets), req, context=context)  # type: ignore[arg-type]


# -- redirects ----------------------------------------------------------------------------------
class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirect handling (Location parsing, relative URLs, method and headers of the
    next request), with a check at every hop: same scheme, host and port as the URL asked
    for, and no more than ``MAX_REDIRECTS`` hops.  urllib's own loop limits sit above ours
    (its loop error spans several lines)."""

    max_repeats = max_redirections = MAX_REDIRECTS + 2

    def __init__(self, url: str, asked: Origin) -> None:
        super().__init__()
        self.url = url
        self.asked = asked
        self.hops = 0

    def refuse_unless_same_origin(self, target: str, fp: IO[bytes]) -> None:
        if origin(target) != self.asked:
            fp.close()
            raise LiteratureError(
                f"{self.url}: redirected to {shown(target)}, another scheme, host or port; "
                "not followed"
            )

    def http_error_302(  # type: ignore[override]
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: Any
    ) -> Any:
        target = headers.get("location") or headers.get("uri")
        if target:  # before urllib's own scheme check (it would let ftp:// through)
            try:
                target = urllib.parse.urljoin(req.full_url, target)
            except ValueError:  # e.g. an unbalanced "[" (urllib would raise it as it is)
                pass  # refused below, named as it came
            self.refuse_unless_same_origin(target, fp)
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302  # type: ignore[assignment]

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        self.refuse_unless_same_origin(newurl, fp)  # the URL urllib will actually open
        self.hops += 1
        if self.hops > MAX_REDIRECTS:
            fp.close()
            raise LiteratureError(
                f"{self.url}: more than {MAX_REDIRECTS} redirects (the last to {shown(newurl)}); "
                "not followed"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


# -- the GET ------------------------------------------------------------------------------------
def get(
    url: str, *, max_bytes: int, timeout: float, deadline: float, user_agent: str
) -> tuple[bytes, str]:
    """GET ``url``: (body, content type), or LiteratureError.  ``timeout``: seconds per socket
    operation; ``deadline``: seconds for the whole answer, redirects included.  An error's
    message names the URL with its password (and any credential) masked."""
    try:
        return _get_by(url, max_bytes, timeout, deadline, user_agent)
    except LiteratureError as exc:
        raise LiteratureError(redact_secrets(str(exc))) from None


def _get_by(
    url: str, max_bytes: int, timeout: float, deadline: float, user_agent: str
) -> tuple[bytes, str]:
    asked = origin(url)
    if asked is None:
        raise LiteratureError(f"not an http(s) URL: {shown(url)}")
    sockets = _Sockets(deadline)
    done = threading.Event()
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            box.append((True, _get(url, asked, sockets, max_bytes, timeout, user_agent)))
        except BaseException as exc:  # handed to the waiting caller as it is
            box.append((False, exc))
        finally:
            sockets.close()
            done.set()

    threading.Thread(target=run, name="openprogram-literature-get", daemon=True).start()
    try:
        finished = done.wait(max(0.0, sockets.remaining()))
    finally:
        if not done.is_set():
            sockets.expire()  # the helper's reads end now; its result is dropped
    if not finished:
        raise sockets.too_slow(url)
    ok, value = box[0]
    if ok:
        return value  # type: ignore[no-any-return]
    raise value


def _get(
    url: str,
    asked: Origin,
    sockets: _Sockets,
    max_bytes: int,
    timeout: float,
    user_agent: str,
) -> tuple[bytes, str]:
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),  # the environment's proxies, as urlopen has them
        urllib.request.UnknownHandler(),  # any other scheme: an error, never a fetch
        _HTTPHandler(sockets),
        _HTTPSHandler(sockets),
        urllib.request.HTTPDefaultErrorHandler(),
        _SameOriginRedirects(url, asked),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    request = urllib.request.Request(url, headers={"User-Agent": user_agent})
    host = asked[1]
    try:
        with opener.open(request, timeout=timeout) as response:
            declared = response.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise LiteratureError(
                    f"{url}: {int(declared):,} bytes is over the {max_bytes:,} limit"
                )
            chunks: list[bytes] = []
            size = 0
            while chunk := response.read1(65536):
                size += len(chunk)
                if size > max_bytes:
                    raise LiteratureError(f"{url}: more than the {max_bytes:,}-byte limit")
                chunks.append(chunk)
            kind = response.headers.get_content_type() or ""
    except LiteratureError:
        raise
    except urllib.error.HTTPError as exc:
        raise LiteratureError(
            f"{url}: HTTP {exc.code} {' '.join(str(exc.reason).split())}"
        ) from None
    except urllib.error.URLError as exc:  # connecting (or sending) failed
        if sockets.capped and isinstance(exc.reason, TimeoutError):
            raise sockets.too_slow(url) from None
        raise LiteratureError(
            f"cannot reach {host} ({' '.join(str(exc.reason).split())}); offline? the URL was {url}"
        ) from None
    except TimeoutError:
        if sockets.capped:  # the deadline's, ending here a moment before the caller's wait
            raise sockets.too_slow(url) from None
        raise LiteratureError(f"{url}: too slow (nothing for {timeout:g} s)") from None
    except (OSError, http.client.HTTPException) as exc:
        what = " ".join(str(exc).split())[:200]
        raise LiteratureError(f"{url}: a broken answer ({type(exc).__name__}: {what})") from None
    return b"".join(chunks), kind
