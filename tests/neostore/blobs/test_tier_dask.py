"""A dask computation in worker processes over an array in a tiered store: the workers GET from S3 themselves.

The dask graph carries the store's URL (arrays/dask_source.py keeps its
query, the blob tier options included); each worker process opens the store
and fetches the chunks' objects. The URL's endpoint is a relay
(tests/s3_relay.py) that notes which process each connection comes from (the
owner of the client's socket, as the kernel reports it), so the test sees
that the requests came from the workers, not from this process.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.conftest import with_blobs
from tests.s3_relay import S3Relay
from windvane import arrays


@pytest.fixture
def pid_relay(s3_env):
    relay = S3Relay(s3_env.port, track_pids=True)
    yield relay
    relay.close()


def test_process_workers_read_the_tier_themselves(store_url, s3_env, pid_relay):
    url = with_blobs(store_url, f"blobs=s3://{s3_env.new_bucket()}/d&endpoint={pid_relay.endpoint}")
    data = np.random.default_rng(11).random((400_000, 2))  # 8 chunks of 800 kB: every one an object
    with arrays.create(url, "x", (0, 2), "float64", chunks=(50_000, 2)) as a:
        a.append(data)
    pid_relay.reset()
    with arrays.open(url, "x") as a:
        x = a.to_dask()
        total = x.sum(axis=0).compute(scheduler="processes", num_workers=2)
        values = x[123_456:323_456].compute(scheduler="processes", num_workers=2)
        assert a.store.tier.requests["GET"] == 0  # this process fetched nothing
    np.testing.assert_allclose(total, data.sum(axis=0))
    np.testing.assert_array_equal(values, data[123_456:323_456])
    seen = pid_relay.reset()
    getters = {pid for pid, methods in seen.by_pid.items() if methods["GET"]}
    assert getters and os.getpid() not in getters and None not in getters
    assert sum(seen.by_pid[pid]["GET"] for pid in getters) == seen.requests["GET"] >= 8
    assert seen.body_bytes["GET"] >= data.nbytes  # every chunk came from the object store
