"""Values through a store with a blob tier, on the real S3 server: what goes where, and back exactly."""

from __future__ import annotations

import os

import pytest

from windvane import neostore
from windvane.neostore.blobs import TIERED


def test_big_values_go_to_the_object_store_small_ones_stay(tiered_url, s3_env):
    sizes = [10, 1000, 256 * 1024 - 1, 256 * 1024, 3 << 20, 17 << 20]
    values = [os.urandom(n) for n in sizes] + [b"z" * (1 << 20)]
    with neostore.open(tiered_url) as store:
        txn = store.begin()
        oids = [store.new_oid() for _ in values]
        for oid, value in zip(oids, values):
            txn.write(oid, None, value)
        txn.vote()
        txn.finish()
        assert [store.load(oid)[0] for oid in oids] == values
        assert [value for value, _ in store.load_many(oids)] == values
        rows = store._query("SELECT size, chunks, value IS NULL FROM data ORDER BY size")
    tiered = sorted(size for size, chunks, _ in rows if chunks == TIERED)
    assert tiered == sorted([256 * 1024, 3 << 20, 17 << 20, 1 << 20])
    assert all(empty for _, chunks, empty in rows if chunks == TIERED)
    bucket = tiered_url.split("blobs=s3://")[1].split("/")[0]
    assert len(s3_env.objects(bucket)) == 4


def test_unknown_url_options_are_refused(sqlite_url):
    with pytest.raises(neostore.InvalidURLError, match="unknown option 'blob'"):
        neostore.open(sqlite_url + "?blob=s3://bucket/x")
