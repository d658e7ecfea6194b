"""The idempotency ledger: bounded rewrites, and every committed key read back by a restarted service."""

from __future__ import annotations

import time

import msgpack

from windvane import arrays, neostore
from windvane.ingest.ledger import BUCKET_KEYS, PREFIX, KeyLedger


def commit_keys(store: neostore.Store, ledger: KeyLedger, keys: list[bytes]) -> int:
    """Commit ``keys`` as the committer does; returns how many keys the bucket written holds."""
    name, value, where, bucket = ledger.to_write(keys)
    tx = arrays.Transaction(store, message="keys")
    tx.set(name, value)
    tx.commit()
    ledger.committed(where, bucket, keys)
    return len(bucket)


def test_many_commits_of_many_keys_rewrite_bounded_buckets_and_all_are_read_back(sqlite_url):
    with neostore.open(sqlite_url) as store:
        ledger = KeyLedger()
        written = [commit_keys(store, ledger, [b"%d-%d" % (c, i) for i in range(100)]) for c in range(200)]
        # One bucket per second rewritten by every commit would copy ~2 M keys here.
        assert max(written) <= BUCKET_KEYS + 100
        assert sum(written) <= 200 * (BUCKET_KEYS + 100) // 2 + 200 * 100
        restarted = KeyLedger()
        assert restarted.load(store) == 20_000
        assert all(b"%d-%d" % (c, i) in restarted for c in range(200) for i in range(100))


def test_a_restarted_ledger_reads_buckets_of_the_old_naming_and_never_rewrites_what_it_loaded(sqlite_url):
    with neostore.open(sqlite_url) as store:
        second = int(time.time())
        old_name = f"{PREFIX}{second:012d}"  # one bucket per second, as windvane wrote it before parts
        tx = arrays.Transaction(store, message="old ledger")
        tx.set(old_name, msgpack.packb([b"old-1", b"old-2"], use_bin_type=True))
        tx.commit()
        first = KeyLedger()
        first.load(store)
        commit_keys(store, first, [b"new-1"])
        ledger = KeyLedger()
        assert ledger.load(store) == 3
        assert b"old-1" in ledger and b"new-1" in ledger
        names = sorted(e.key for e in arrays.Snapshot(store).list(PREFIX))
        assert old_name in names and len(names) == 2
        assert msgpack.unpackb(arrays.Snapshot(store).get(old_name)) == [b"old-1", b"old-2"]
