"""A real ``dask.distributed`` cluster on loopback for the tests that run work on it.

Import as::

    from dask_cluster import local_cluster
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

distributed = pytest.importorskip("distributed")


@contextlib.contextmanager
def local_cluster(threads_per_worker: int = 2, workers: int = 2) -> Iterator[Any]:
    """A ``LocalCluster`` of worker processes on 127.0.0.1 and a client, the workers up.

    The workers are started when this is entered: the environment at that moment is
    theirs (a test that sets provider variables sets them first)."""
    with (
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
