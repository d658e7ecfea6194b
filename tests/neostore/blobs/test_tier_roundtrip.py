"""Values through a store with a blob tier, on the real S3 server: what goes where, and back exactly."""

from __future__ import annotations

import os

import pytest

from tests.conftest import with_blobs
from tests.neostore.blobs.conftest import bucket_of, commit, commit_new, new_oids
from windvane import neostore
from windvane.neostore.blobs import TIERED


def test_big_values_go_to_the_object_store_small_ones_stay(tiered_url, s3_env):
    threshold = neostore.BLOB_THRESHOLD
    sizes = [10, 1000, threshold - 1, threshold, 3 << 20, 17 << 20]
    values = [os.urandom(n) for n in sizes] + [b"z" * (1 << 20)]
    with neostore.open(tiered_url) as store:
        oids = commit_new(store, values)
        assert [store.load(oid)[0] for oid in oids] == values
        assert [value for value, _ in store.load_many(oids)] == values
        rows = store.query("SELECT size, chunks, value IS NULL FROM data ORDER BY size")
    tiered = sorted(size for size, chunks, _ in rows if chunks == TIERED)
    assert tiered == sorted([threshold, 3 << 20, 17 << 20, 1 << 20])
    assert all(empty for _, chunks, empty in rows if chunks == TIERED)
    assert len(s3_env.objects(bucket_of(tiered_url))) == 4


def test_unknown_url_options_are_refused(sqlite_url):
    with pytest.raises(neostore.InvalidURLError, match="unknown option 'blob'"):
        neostore.open(sqlite_url + "?blob=s3://bucket/x")


def test_many_values_around_the_threshold(tiered_url):
    threshold = neostore.BLOB_THRESHOLD
    sizes = [threshold + d for d in (-4096, -2, -1, 0, 1, 2, 4096)] * 3
    values = [os.urandom(n) if i % 2 else bytes([i]) * n for i, n in enumerate(sizes)]
    with neostore.open(tiered_url) as store:
        oids = new_oids(store, len(values))
        tid = commit(store, dict(zip(oids, values)))
        expected_tiered = {v for v in values if len(v) >= threshold}
        assert store.tier.requests["PUT"] == len(expected_tiered)
        assert [v for v, _ in store.load_many(oids)] == values
    with neostore.open(tiered_url, read_only=True) as store:
        assert [store.load(oid) for oid in oids] == [(v, tid) for v in values]
        rows = store.query("SELECT size, chunks FROM data")
    assert sorted(size for size, chunks in rows if chunks == TIERED) == sorted(len(v) for v in expected_tiered)
    assert all(size < threshold for size, chunks in rows if chunks != TIERED)


def test_the_blob_threshold_option_is_honoured(store_url, blobs_option, s3_env):
    url = with_blobs(store_url, blobs_option + "&blob_threshold=1000")
    values = [os.urandom(n) for n in (999, 1000, 1001, 50)]
    with neostore.open(url) as store:
        assert store.tier.threshold == 1000
        oids = new_oids(store, len(values))
        commit(store, dict(zip(oids, values)))
        assert store.tier.requests == {"PUT": 2}
        assert [store.load(oid)[0] for oid in oids] == values
        assert sorted(size for size, chunks in store.query("SELECT size, chunks FROM data") if chunks == TIERED) == [
            1000,
            1001,
        ]
    assert len(s3_env.objects(bucket_of(url))) == 2


def test_history_of_tiered_values(tiered_url):
    revisions = [os.urandom(300_000), b"small in between", os.urandom(500_000), b"q" * 400_000]
    with neostore.open(tiered_url) as store:
        oid = store.new_oid()
        tids = [commit(store, {oid: value}) for value in revisions]
        assert [r.tid for r in store.history(oid, None)] == tids[::-1]
        assert [store.load_serial(oid, tid) for tid in tids] == revisions
        for i, tid in enumerate(tids[1:], 1):
            assert store.load_before(oid, tid)[:2] == (revisions[i - 1], tids[i - 1])
        assert store.load_revisions(oid, tids[0]) == list(zip(tids[1:], revisions[1:]))
        assert store.load_range(oid, 100, 200, before=tids[3]) == revisions[2][100:200]
        assert store.load_range(oid, 5, 10) == revisions[3][5:10]  # a zstd value: read whole, then sliced
        gets = store.tier.requests["GET"]
        assert list(store.load_many([oid], before=tids[1])) == [(revisions[0], tids[0])]
        assert store.tier.requests["GET"] == gets + 1


def test_undo_of_a_transaction_that_wrote_tiered_values(tiered_url):
    first, second = os.urandom(300_000), os.urandom(400_000)
    with neostore.open(tiered_url) as store:
        a, b = store.new_oid(), store.new_oid()
        commit(store, {a: first})
        undone = commit(store, {a: second, b: second})
        txn = store.begin()
        assert sorted(txn.undo(undone)) == sorted([a, b])
        txn.vote()
        tid = txn.finish()
        assert store.load(a) == (first, tid)
        with pytest.raises(neostore.POSKeyError):
            store.load(b)
        assert store.load_serial(b, undone) == second  # history keeps what was undone
        puts = store.tier.requests["PUT"]
        assert puts == 2  # undo reuses the rows: nothing sent again
    with neostore.open(tiered_url) as store:
        assert store.load(a)[0] == first


def test_a_zodb_database_keeps_big_persistent_values_in_the_tier(tiered_url):
    import transaction
    import ZODB
    from persistent.mapping import PersistentMapping

    payloads = {f"doc{i}": os.urandom(300_000 + 50_000 * i) for i in range(4)}
    db = ZODB.DB(neostore.ZODBStorage(tiered_url))
    try:
        conn = db.open()
        root = conn.root()
        for name, payload in payloads.items():
            root[name] = PersistentMapping(payload=payload, name=name)
        transaction.commit()
        root["doc1"]["payload"] = b"replaced"
        transaction.commit()
        conn.close()
    finally:
        db.close()
    db = ZODB.DB(neostore.ZODBStorage(tiered_url))
    try:
        root = db.open().root()
        assert {name: root[name]["payload"] for name in payloads} == dict(payloads, doc1=b"replaced")
    finally:
        db.close()
    with neostore.open(tiered_url, read_only=True) as store:
        tiered = store.query(f"SELECT COUNT(*) FROM data WHERE chunks = {TIERED}")[0][0]
    assert tiered == 4  # each big record, doc1's first one kept as history (its new one is small)
