"""A connection lost during COMMIT: the outcome is learnt from the database, never guessed.

If the server made the COMMIT durable and only its answer was lost, the
commit succeeded and must be reported so; reporting it as failed makes the
caller store the same data again (an ingest resend, a ZODB retry). The
relay in tests/ingest/socket_proxy.py cuts real connections at their COMMIT.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from urllib.parse import quote

import numpy as np
import pytest
import transaction
import ZODB

from tests.ingest.socket_proxy import CommitCutter
from tests.mariadb import socket_of
from windvane import arrays, neostore
from windvane.ingest import Batch, CommitFailed
from windvane.ingest.committer import GroupCommitter
from windvane.ingest.schema import SchemaSet, parse_schema

SCHEMAS = SchemaSet(
    [
        parse_schema(
            {"kind": "log", "tags": ["m.**"], "fields": [{"name": "v", "dtype": "int64", "required": True}]}, name="m"
        )
    ]
)


@pytest.fixture
def cutter(mariadb_url):
    """A relay in front of the test server, and the store URL that goes through it."""
    directory = tempfile.mkdtemp(prefix="wv-cut-")  # short: unix socket paths are limited to 107 bytes
    listen = os.path.join(directory, "relay.sock")
    relay = CommitCutter(listen, socket_of(mariadb_url))
    url = mariadb_url.split("?")[0] + "?unix_socket=" + quote(listen, safe="/")
    yield relay, url
    relay.close()
    os.rmdir(directory)


def value(url: str) -> bytes | None:
    with neostore.Store(url, read_only=True) as store:
        oid = store.oids_for([b"k/a"]).get(b"k/a")
        if oid is None:
            return None
        try:
            return store.load(oid)[0]
        except neostore.POSKeyError:
            return None


def test_a_commit_whose_answer_was_lost_is_reported_committed(cutter, caplog):
    relay, url = cutter
    with neostore.Store(url) as store:
        tx = store.begin()
        oid = tx.oids_for([b"k/a"], create=True)[b"k/a"]
        tx.write(oid, None, b"first value")
        relay.arm("after")
        with caplog.at_level(logging.WARNING, logger="neostore"):
            tid = tx.commit()
        assert relay.cuts == 1
        assert "committed before the connection was lost" in caplog.text
        assert store.last_transaction() == tid
        # The store goes on: the pool's connections through the relay were replaced.
        tx2 = store.begin()
        tx2.write(oid, tid, b"second value")
        tx2.commit()
    assert value(url) == b"second value"


def test_a_commit_cut_before_the_server_got_it_raises_and_stores_nothing(cutter):
    relay, url = cutter
    with neostore.Store(url) as store:
        tx = store.begin()
        oid = tx.oids_for([b"k/a"], create=True)[b"k/a"]
        tx.write(oid, None, b"lost value")
        relay.arm("before")
        with pytest.raises(neostore.StorageUnavailableError) as raised:
            tx.commit()
        assert store.backend.is_connection_lost(raised.value.__cause__), raised.value
        assert relay.cuts == 1
    assert value(url) is None


def test_an_unreachable_database_leaves_the_outcome_unknown_until_asked(cutter):
    relay, url = cutter
    with neostore.Store(url, in_doubt_timeout=1.0) as store:
        tx = store.begin()
        oid = tx.oids_for([b"k/a"], create=True)[b"k/a"]
        tx.write(oid, None, b"value")
        relay.arm("after", down_for=3.0)
        with pytest.raises(neostore.CommitOutcomeUnknown) as raised:
            tx.commit()
        assert raised.value.tid == tx.tid
        assert "Store.transaction_committed" in str(raised.value)
        # Once the database is reachable again, the store answers.
        assert store.transaction_committed(tx.tid, timeout=30)
        assert not store.transaction_committed(neostore.p64(1), timeout=30)
    assert value(url) == b"value"


def test_zodb_tpc_finish_whose_answer_was_lost_succeeds(cutter):
    relay, url = cutter
    db = ZODB.DB(neostore.ZODBStorage(url))
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        conn.root()["x"] = 1
        tm.commit()
        conn.root()["x"] = 2
        relay.arm("after", skip=1)  # vote's COMMIT passes; finish's is cut once the server made it durable
        tm.commit()
        assert relay.cuts == 1
        conn.close()
        conn = db.open(tm)
        assert conn.root()["x"] == 2
        conn.close()
    finally:
        db.close()


def batch(start: int, n: int) -> Batch:
    return Batch(
        "m.a",
        [1_700_000_000_000_000_000 + i for i in range(start, start + n)],
        [{"v": i} for i in range(start, start + n)],
        source="test",
        size=16 * n,
    )


async def test_ingest_acknowledges_a_commit_whose_answer_was_lost_once(cutter):
    relay, url = cutter
    with neostore.Store(url) as store:
        committer = GroupCommitter(store, SCHEMAS)
        committer.start()
        try:
            await committer.submit([batch(0, 100)], key=b"chunk-0")
            relay.arm("after")
            receipt = await committer.submit([batch(100, 100)], key=b"chunk-1")
            assert receipt.accepted == 100 and not receipt.duplicate
            again = await committer.submit([batch(100, 100)], key=b"chunk-1")
            assert again.duplicate
            await committer.submit([batch(200, 100)], key=b"chunk-2")
        finally:
            committer.close()
        assert relay.cuts == 1
    with arrays.open_stream(url, "m.a") as stream:
        assert np.array_equal(stream["v"][:], np.arange(300))


async def test_ingest_after_an_unknown_outcome_recognises_the_resend(cutter):
    relay, url = cutter
    with neostore.Store(url, in_doubt_timeout=0.5) as store:
        committer = GroupCommitter(store, SCHEMAS)
        committer.start()
        try:
            await committer.submit([batch(0, 100)], key=b"chunk-0")
            relay.arm("after", down_for=2.0)
            with pytest.raises(CommitFailed, match="could not be reached"):
                await committer.submit([batch(100, 100)], key=b"chunk-1")
            await asyncio.sleep(2.0)
            # The sender never got an ack and sends again: it committed, so it is a duplicate.
            again = await committer.submit([batch(100, 100)], key=b"chunk-1")
            assert again.duplicate
            await committer.submit([batch(200, 100)], key=b"chunk-2")
        finally:
            committer.close()
    with arrays.open_stream(url, "m.a") as stream:
        assert np.array_equal(stream["v"][:], np.arange(300))
