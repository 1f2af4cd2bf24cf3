"""Replacing a file by rename with the old file freed off the caller's path
(``store/session/files.replace``): what a reader and a long-lived process can notice."""

from __future__ import annotations

import os
import threading

from openprogram.store.session.files import replace, wait_closed
from tests.waiting import open_files


def test_every_replaced_file_is_released_and_readers_see_old_or_new(tmp_path):
    target = tmp_path / "ref"
    target.write_bytes(b"0" * 40 + b"\n")
    before = len(os.listdir("/proc/self/fd"))
    seen: set[bytes] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.add(target.read_bytes())

    watching = threading.Thread(target=reader)
    watching.start()
    try:
        for i in range(1, 301):
            tmp = tmp_path / "ref.lock"
            tmp.write_bytes(b"%040d\n" % i)
            replace(tmp, target)
    finally:
        stop.set()
        watching.join()
    wait_closed()
    assert target.read_bytes() == b"%040d\n" % 300
    assert all(len(content) == 41 for content in seen)  # never empty, never torn
    assert open_files(tmp_path, deleted=True) == []  # no old file kept alive
    assert len(os.listdir("/proc/self/fd")) <= before  # (the closer's thread opens none)


def test_a_symlink_or_fifo_in_the_way_is_replaced_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep me")
    link = tmp_path / "meta.json"
    link.symlink_to(outside)
    new = tmp_path / "new"
    new.write_bytes(b"new")
    replace(new, link)
    assert not link.is_symlink() and link.read_bytes() == b"new"
    assert outside.read_bytes() == b"keep me"

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening a FIFO for reading would block without O_NONBLOCK
    new.write_bytes(b"over the fifo")
    replace(new, fifo)
    wait_closed()
    assert fifo.read_bytes() == b"over the fifo"


def test_a_forked_child_replaces_files_without_the_parents_thread(tmp_path):
    target = tmp_path / "f"
    target.write_bytes(b"parent 0")
    for i in range(1, 20):  # leave descriptors pending, maybe, at the fork
        (tmp_path / "t").write_bytes(b"parent %d" % i)
        replace(tmp_path / "t", target)
    pid = os.fork()
    if pid == 0:  # the child: its own closer thread, the parent's pending copies closed
        code = 1
        try:
            (tmp_path / "c").write_bytes(b"child")
            replace(tmp_path / "c", target)
            wait_closed()  # would hang if the child waited on the parent's thread
            code = 0 if open_files(tmp_path, deleted=True) == [] else 2
        finally:
            os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert target.read_bytes() == b"child"
    wait_closed()
    assert open_files(tmp_path, deleted=True) == []
