"""A real ``dask.distributed`` cluster on loopback for the tests that run work on it.

Import as::

    from dask_cluster import local_cluster, process_cluster

The workers run without Dask's profiler.  On Python 3.11 it deadlocks a worker now and then:
every 10 ms it calls ``sys._current_frames()``, which holds the runtime's lock while it
allocates; a garbage collection that starts there and frees a ``threading.local`` (each
call's tenacity ``Retrying`` holds one) takes the same lock again — the worker hangs for
good holding the GIL, alive and connected, so a map waits on it forever (CPython
gh-106883, fixed from 3.12; Dask already skips its event-loop profiler on 3.11, not this
one).  That was the Dask tests' hang on a loaded machine.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from waiting import until

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")

PROFILER = "distributed.worker.profile.enabled"
NO_PROFILER_ENV = {"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False"}  # dask worker CLI


@contextlib.contextmanager
def local_cluster(threads_per_worker: int = 2, workers: int = 2) -> Iterator[Any]:
    """A ``LocalCluster`` of worker processes on 127.0.0.1 and a client, the workers up.

    The workers are started when this is entered: the environment at that moment is
    theirs (a test that sets provider variables sets them first)."""
    with (
        dask.config.set({PROFILER: False}),  # handed to the worker processes
        distributed.LocalCluster(
            n_workers=workers,
            threads_per_worker=threads_per_worker,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=50,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.wait_for_workers(workers, timeout=60)
        yield client


@dataclass
class ProcessCluster:
    """A scheduler and its workers, each a process of its own; a killed worker stays dead
    (no nanny restarts it), as on machines that went away."""

    client: Any
    scheduler: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]]


def _start(module: str, *args: str) -> subprocess.Popen[bytes]:
    """``python -m module args``, seeing the tests' modules, its output dropped."""
    env = {**os.environ, **NO_PROFILER_ENV, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.DEVNULL
    return subprocess.Popen([sys.executable, "-m", module, *args], stdout=out, stderr=out, env=env)


@contextlib.contextmanager
def process_cluster(folder: Path, workers: int = 2, threads: int = 2) -> Iterator[ProcessCluster]:
    """``dask scheduler`` and ``workers`` times ``dask worker --no-nanny`` on 127.0.0.1, and
    a client, the workers up.  The processes see the tests' modules (``sys.path``) and the
    environment at the moment this is entered."""
    address = str(folder / "scheduler.json")
    started: list[subprocess.Popen[bytes]] = []
    try:
        scheduler = _start(
            "distributed.cli.dask_scheduler",
            *("--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", address),
        )
        started.append(scheduler)
        assert until((folder / "scheduler.json").exists, 120), "the scheduler did not start"
        for name in range(workers):
            started.append(
                _start(
                    "distributed.cli.dask_worker",
                    *("--scheduler-file", address, "--no-nanny", "--no-dashboard"),
                    *("--nthreads", str(threads), "--host", "127.0.0.1", "--name", str(name)),
                )
            )
        with distributed.Client(scheduler_file=address) as client:
            client.wait_for_workers(workers, timeout=120)
            yield ProcessCluster(client, scheduler, started[1:])
    finally:
        for proc in reversed(started):
            proc.kill()
            proc.wait()
