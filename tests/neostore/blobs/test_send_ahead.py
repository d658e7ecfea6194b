"""Values sent ahead of their transaction: the commit that writes them sends nothing more, while they are fresh.

``Store.send_ahead`` is how a writer preparing its next commit (the ingest
committer's stage step, through ``StreamWriter.stage``) overlaps that
commit's uploads with the commit before it. Counted at the relay, so the
counts are the server's, not neostore's own bookkeeping.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from tests.neostore.blobs.conftest import bucket_of
from windvane import arrays, neostore
from windvane.arrays import Column
from windvane.neostore.blobs.sweep import sweep

BIG = 300 * 1024


def values(count: int) -> dict[bytes, bytes]:
    found = {}
    for _ in range(count):
        value = os.urandom(BIG)
        found[neostore.value_hash(value)] = value
    return found


def write_raw(store: neostore.Store, by_hash: dict[bytes, bytes]) -> list[bytes]:
    """Commit the values to new oids as incompressible, as arrays writes codec-compressed chunks."""
    oids = [store.new_oid() for _ in by_hash]
    txn = store.begin()
    for oid, value in zip(oids, by_hash.values()):
        txn.write(oid, None, value, compress=False)
    txn.vote()
    txn.finish()
    return oids


def test_values_sent_ahead_are_not_sent_again_by_their_commit(relayed_url, relay):
    sent = values(6)
    with neostore.open(relayed_url) as store:
        relay.reset()
        store.send_ahead(sent)  # returns with the uploads under way
        store.tier.wait_ahead(sent)
        assert relay.reset().requests["PUT"] == 6
        oids = write_raw(store, sent)
        assert relay.reset().requests == {}  # no PUT, no HEAD: the objects are this process's, and fresh
        assert [store.load(oid)[0] for oid in oids] == list(sent.values())


def test_values_the_database_holds_are_not_sent_ahead(relayed_url, relay):
    sent = values(3)
    with neostore.open(relayed_url) as store:
        write_raw(store, sent)
        relay.reset()
        store.send_ahead(sent)
        store.send_ahead({neostore.value_hash(b"small"): b"small"})  # below the threshold: stays in the database
        assert relay.reset().requests == {}


def test_a_writer_trusts_its_uploads_for_half_its_grace_only(relayed_url, relay, s3_env):
    sent = values(3)
    with neostore.open(relayed_url, blob_grace=0) as store:  # nothing is fresh for long
        store.send_ahead(sent)
        store.tier.wait_ahead(sent)
        # A sweep of another process with grace 0 takes the unreferenced objects meanwhile.
        with neostore.open(relayed_url, blob_grace=0) as other:
            assert sweep(other).deleted == 3
        assert s3_env.objects(bucket_of(relayed_url)) == []
        relay.reset()
        oids = write_raw(store, sent)
        seen = relay.reset().requests
        assert seen["HEAD"] == 3 and seen["PUT"] == 3  # asked for under the lock, found gone, sent again
        assert [store.load(oid)[0] for oid in oids] == list(sent.values())


def test_a_commit_waits_for_the_uploads_sent_ahead_of_it(relayed_url, relay):
    sent = values(4)
    with neostore.open(relayed_url) as store:
        relay.stall("PUT")
        store.send_ahead(sent)  # returns although no upload can finish
        done = threading.Event()
        writer = threading.Thread(target=lambda: (write_raw(store, sent), done.set()))
        writer.start()
        assert relay.stalled.wait(30)
        assert not done.wait(1)  # the commit waits for the uploads, rather than sending them again
        relay.release()
        writer.join(60)
        assert done.is_set()
        seen = relay.reset().requests
        assert seen["PUT"] == 4 and seen["HEAD"] == 0
        assert sorted(store.load(oid)[0] for oid in store_oids(store)) == sorted(sent.values())


def store_oids(store: neostore.Store) -> list[bytes]:
    return [neostore.p64(row[0]) for row in store.query("SELECT DISTINCT oid FROM obj")]


def test_without_a_tier_send_ahead_does_nothing(sqlite_url):
    with neostore.open(sqlite_url) as store:
        store.send_ahead(values(2))
        assert store.tier is None
        assert store.last_transaction() == neostore.ZERO


def test_a_stream_writer_sends_its_staged_chunks_ahead(relayed_url, relay):
    rows = 200_000
    data = {"time": np.arange(rows, dtype="int64"), "x": np.random.default_rng(1).random(rows)}
    with neostore.open(relayed_url) as store:
        arrays.create_stream(store, "vib", [Column("x", "float64")], chunk_rows=65536).close()
        writer = arrays.StreamWriter(store, "vib")
        with arrays.transaction(store) as tx:  # the writer's state, loaded once as the committer does
            writer.append(tx, {"time": data["time"][:10], "x": data["x"][:10]})
        relay.reset()
        staged = writer.stage({"time": data["time"][10:], "x": data["x"][10:]})
        store.tier.wait_ahead([digest for _, _, _, digest in staged.chunks])
        ahead = relay.reset().requests["PUT"]
        assert ahead >= 3  # the full chunks of x, each over the threshold (time's compress below it)
        with arrays.transaction(store) as tx:
            writer.append(tx, staged)
        assert relay.reset().requests["PUT"] == 0
    with arrays.open_stream(relayed_url, "vib") as stream:
        assert np.array_equal(stream["x"][:], data["x"]) and np.array_equal(stream["time"][:], data["time"])
