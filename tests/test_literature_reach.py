"""The literature tools reach only what was asked (issue 34): a redirect is followed only to
the same scheme, host and port, at most 5 times; one deadline bounds the whole answer
however a server drips it; a local PDF must be a regular file.  Every server here is a
loopback socket this test starts and answers by hand (threads with sockets)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from openprogram.errors import LiteratureError
from openprogram.programs.research import http_get, literature
from openprogram.programs.research.literature import (
    fetch_page,
    read_pdf,
    search_arxiv,
)

PAGE = b"<html><head><title>Reached</title></head><body><p>the page asked for</p></body></html>"
Answer = Callable[["RawServer", socket.socket, str], None]


class RawServer:
    """A loopback HTTP server written on sockets: each connection is read up to the end of
    its request head and answered by ``routes[path]`` on a thread of its own.  ``closed`` is
    set when a client went away while an answer was still being sent."""

    def __init__(self, routes: dict[str, Answer]) -> None:
        self.routes = routes
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.stop = threading.Event()
        self.closed = threading.Event()
        self.paths: list[str] = []

    def __enter__(self) -> RawServer:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept()
        except OSError:
            pass
        self.listener.close()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                data = conn.recv(4096)
                if not data:
                    return
                head += data
            path = head.split(b" ", 2)[1].decode().split("?")[0]
            self.paths.append(path)
            answer = self.routes.get(path, not_found)
            try:
                answer(self, conn, path)
            except OSError:  # the client went away mid-answer
                self.closed.set()


def not_found(server: RawServer, conn: socket.socket, path: str) -> None:
    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


def page(server: RawServer, conn: socket.socket, path: str) -> None:
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n"
        b"Connection: close\r\n\r\n%s" % (len(PAGE), PAGE)
    )


def redirect(location: str, code: int = 302) -> Answer:
    def answer(server: RawServer, conn: socket.socket, path: str) -> None:
        where = location.format(url=server.url, port=server.port)
        conn.sendall(
            f"HTTP/1.1 {code} Moved\r\nLocation: {where}\r\nContent-Length: 0\r\n"
            "Connection: close\r\n\r\n".encode()
        )

    return answer


def drip(head: bytes, byte: bytes) -> Answer:
    """Send ``head``, then ``byte`` again and again, every 20 ms, until the client leaves (or
    the test ends): each read gets something, the answer never ends."""

    def answer(server: RawServer, conn: socket.socket, path: str) -> None:
        conn.sendall(head)
        while not server.stop.wait(0.02):
            conn.sendall(byte)

    return answer


def silent(server: RawServer, conn: socket.socket, path: str) -> None:
    server.stop.wait()  # the request is read; no answer ever comes


def not_http(server: RawServer, conn: socket.socket, path: str) -> None:
    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback port that listens and never accepts: anything that connects to it stays in
    its backlog, where the test can see it."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock


def contacted(sock: socket.socket) -> bool:
    """Whether anything connected to ``listener`` (the kernel completes a TCP connect before
    it is accepted, so one made before now is waiting here)."""
    sock.setblocking(False)
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def one_line(error: pytest.ExceptionInfo[LiteratureError]) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


CALLS: dict[str, Callable[[str], Any]] = {
    "fetch_page": fetch_page,
    "read_pdf": read_pdf,
    "search_arxiv": lambda url: search_arxiv("agents", base_url=url),
}


# -- redirects ----------------------------------------------------------------------------------
@pytest.mark.parametrize("call", CALLS.values(), ids=list(CALLS))
@pytest.mark.parametrize(
    "location",
    [
        "http://127.0.0.1:{target}/admin",  # another port on the same host
        "ftp://127.0.0.1:{target}/pub/file.pdf",  # another scheme (urllib would log in)
        "http://localhost:{target}/admin",  # another name for the host, another port
    ],
    ids=["other-port", "ftp", "other-host"],
)
def test_a_redirect_elsewhere_is_refused_before_it_is_reached(
    listener: socket.socket, call: Callable[[str], Any], location: str
) -> None:
    target = location.format(target=listener.getsockname()[1])
    with RawServer({"/go": redirect(target)}) as server, pytest.raises(LiteratureError) as error:
        call(f"{server.url}/go")
    message = one_line(error)
    assert f"redirected to {target!r}" in message and "not followed" in message
    assert not contacted(listener)  # the internal service / FTP port never saw us


@pytest.mark.parametrize(
    "location",
    [
        "http://localhost:{port}/page",  # same port, another host name
        "https://127.0.0.1:{port}/page",  # same host and port, another scheme
        "file:///etc/passwd",
        "gopher://127.0.0.1:{port}/",
        "http://127.0.0.1:{port}\x1b[2J/page",  # a control character in the header
    ],
    ids=["host", "scheme", "file", "gopher", "control"],
)
def test_only_the_same_scheme_host_and_port_are_followed(location: str) -> None:
    with (
        RawServer({"/go": redirect(location), "/page": page}) as server,
        pytest.raises(LiteratureError, match=r"redirected to .*not followed") as error,
    ):
        fetch_page(f"{server.url}/go")
    assert "\x1b" not in one_line(error)  # named, escaped
    assert server.paths == ["/go"]


@pytest.mark.parametrize("code", [301, 303, 307, 308])
def test_every_kind_of_redirect_is_checked(listener: socket.socket, code: int) -> None:
    target = f"http://127.0.0.1:{listener.getsockname()[1]}/admin"
    with RawServer(
        {"/go": redirect(target, code), "/same": redirect("/page", code), "/page": page}
    ) as server:
        assert fetch_page(f"{server.url}/same")["title"] == "Reached"
        with pytest.raises(LiteratureError, match=r"redirected to .* not followed"):
            fetch_page(f"{server.url}/go")
    assert not contacted(listener)


@pytest.mark.parametrize(
    "location", ["/page", "{url}/page", "page", "HTTP://127.0.0.1:{port}/page"]
)
def test_a_redirect_to_the_same_place_is_followed(location: str) -> None:
    with RawServer({"/dir/go": redirect(location), "/page": page, "/dir/page": page}) as server:
        assert fetch_page(f"{server.url}/dir/go")["title"] == "Reached"


def hops(count: int) -> dict[str, Answer]:
    """/hop/N redirects to /hop/N-1 ... /hop/0, the page: N redirects in all."""
    routes: dict[str, Answer] = {f"/hop/{n}": redirect(f"/hop/{n - 1}") for n in range(1, 10)}
    routes["/hop/0"] = page
    return routes


def test_at_most_five_redirects() -> None:
    with RawServer(hops(9)) as server:
        assert fetch_page(f"{server.url}/hop/5")["text"] == "the page asked for"
        with pytest.raises(LiteratureError) as error:
            fetch_page(f"{server.url}/hop/6")
    assert "more than 5 redirects (the last to " in one_line(error)
    assert server.paths.count("/hop/0") == 1  # reached by the first call only


def test_a_redirect_loop_is_one_line() -> None:
    with RawServer({"/loop": redirect("/loop")}) as server, pytest.raises(LiteratureError) as error:
        fetch_page(f"{server.url}/loop")
    assert one_line(error) == (
        f"{server.url}/loop: more than 5 redirects (the last to '{server.url}/loop'); not followed"
    )
    assert server.paths == ["/loop"] * 6


# -- one deadline -------------------------------------------------------------------------------
DRIPS = {
    "body": drip(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<p>", b"x"),
    "headers": drip(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nX-Drip: ", b"a"),
    "header-lines": drip(b"HTTP/1.1 200 OK\r\n", b"X: 1\r\n"),
    "chunks": drip(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"1\r\nx\r\n",
    ),
    "silent": silent,
}


@pytest.mark.timeout(60)  # a safety net only: without the deadline these never end
@pytest.mark.parametrize("answer", DRIPS.values(), ids=list(DRIPS))
def test_one_deadline_bounds_the_whole_answer(
    answer: Answer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(literature, "TIMEOUT", 600.0)  # no single read ever waits that long
    monkeypatch.setattr(literature, "DEADLINE", 0.5)
    with RawServer({"/slow": answer, "/go": redirect("/slow")}) as server:
        with pytest.raises(LiteratureError) as error:
            fetch_page(f"{server.url}/go")  # a redirect first: the deadline covers both
        assert one_line(error) == f"{server.url}/go: too slow (no full answer in 0.5 s)"
        if answer is not silent:  # the connection was ended, not left dripping
            assert server.closed.wait(30)


@pytest.mark.timeout(60)
def test_a_read_the_deadline_cut_short_names_the_deadline() -> None:
    """A socket's timeout is cut to the time left, so the fetching thread's read of a silent
    server ends at the deadline too, and under load it can end a moment before the waiting
    caller's: its error is the deadline's, not the per-read timeout's (seen as "nothing for
    600 s" with a 0.5 s deadline).  The fetching side alone, so its answer is the one seen."""
    with RawServer({"/slow": silent, "/go": redirect("/slow")}) as server:
        url = f"{server.url}/go"
        with pytest.raises(LiteratureError) as error:
            http_get._get(
                url, http_get.origin(url), http_get._Sockets(0.3),
                max_bytes=10_000, timeout=600.0, user_agent="test",
            )  # fmt: skip
    assert one_line(error) == f"{url}: too slow (no full answer in 0.3 s)"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("call", CALLS.values(), ids=list(CALLS))
def test_every_tool_has_the_deadline(
    call: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(literature, "TIMEOUT", 600.0)
    monkeypatch.setattr(literature, "DEADLINE", 0.5)
    with (
        RawServer({"/slow": DRIPS["body"]}) as server,
        pytest.raises(LiteratureError, match=r"too slow \(no full answer in 0\.5 s\)"),
    ):
        call(f"{server.url}/slow")


@pytest.mark.timeout(60)
def test_the_deadline_covers_the_tls_handshake(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port that takes the connection and never says a word of TLS: the caller hears "too
    slow" at the deadline, and the connection is closed (not left waiting in the handshake)."""
    monkeypatch.setattr(literature, "TIMEOUT", 600.0)
    monkeypatch.setattr(literature, "DEADLINE", 0.5)
    url = f"https://127.0.0.1:{listener.getsockname()[1]}/paper.pdf"
    with pytest.raises(LiteratureError) as error:
        read_pdf(url)
    assert one_line(error) == f"{url}: too slow (no full answer in 0.5 s)"
    conn, _ = listener.accept()  # connected before the error: waiting in the backlog
    with conn:
        conn.settimeout(30)  # a safety net: the client's end of the connection comes first
        while conn.recv(4096):  # its ClientHello, then the end
            pass


def test_an_answer_that_is_not_http_is_one_line() -> None:
    with (
        RawServer({"/x": not_http}) as server,
        pytest.raises(LiteratureError, match="a broken answer") as error,
    ):
        fetch_page(f"{server.url}/x")
    one_line(error)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:1/a\nb", "http://127.0.0.1:1/a b", "http://127.0.0.1:99999/"]
)
def test_a_url_that_cannot_be_sent_is_refused(url: str) -> None:
    with pytest.raises(LiteratureError, match=r"not an http\(s\) URL") as error:
        fetch_page(url)
    one_line(error)


# -- local files --------------------------------------------------------------------------------
def special_files(tmp_path: Path) -> dict[str, tuple[str, str]]:
    fifo = tmp_path / "paper.pdf"
    os.mkfifo(fifo)
    link = tmp_path / "link.pdf"
    link.symlink_to("/proc/self/pagemap")
    return {
        "pagemap": ("/proc/self/pagemap", "is a system file under /proc"),
        "proc-status": ("/proc/self/status", "is a system file under /proc"),
        "sys": ("/sys/kernel/mm", "is a system file under /sys"),
        "link-to-proc": (str(link), "is a system file under /proc"),
        "dev-zero": ("/dev/zero", "is a character device"),
        "dev-null": ("/dev/null", "is a character device"),
        "fifo": (str(fifo), "is a named pipe"),
        "folder": (str(tmp_path), "is a folder"),
    }


@pytest.mark.timeout(60)  # a FIFO opened for reading would wait for a writer for ever
@pytest.mark.parametrize(
    "name",
    ["pagemap", "proc-status", "sys", "link-to-proc", "dev-zero", "dev-null", "fifo", "folder"],
)
def test_read_pdf_refuses_special_files(tmp_path: Path, name: str) -> None:
    path, message = special_files(tmp_path)[name]
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist here")
    with pytest.raises(LiteratureError) as error:
        read_pdf(path)
    assert message in one_line(error) and "refused" in str(error.value)


def test_read_pdf_refuses_a_local_file_over_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(literature, "MAX_PDF_BYTES", 1000)
    big = tmp_path / "big.pdf"
    big.write_bytes(b"%PDF-1.4\n" + b"x" * 2000)
    with pytest.raises(LiteratureError, match="over the 1,000-byte limit"):
        read_pdf(str(big))


@pytest.mark.parametrize("source", ["ftp://example.org/paper.pdf", "file:///etc/passwd"])
def test_read_pdf_takes_no_other_url(source: str) -> None:
    with pytest.raises(LiteratureError, match=r"not an http\(s\) URL"):
        read_pdf(source)
