"""The S3 server stopped while a transaction with big values commits.

The commit raises BlobStoreUnavailableError (a StorageUnavailableError)
once the client's retries run out (``blob_retry_timeout``, shortened here),
nothing of the transaction is visible, the store stays usable, and once the
server is back the same commit succeeds. Each test runs its own versitygw
(tests/s3.py), so stopping it disturbs no other test.
"""

from __future__ import annotations

import os
import threading

import pytest

from tests.conftest import with_blobs
from tests.neostore.blobs.conftest import commit, new_oids
from tests.s3 import S3Server
from tests.s3_relay import S3Relay
from windvane import neostore

# Seconds the client retries before giving up; the hang guard below is far longer.
RETRY = 2.0
HANG_GUARD = 90.0


@pytest.fixture
def own_server(tmp_path, s3_env):
    server = S3Server(tmp_path / "s3" / "data")
    server.start()
    yield server
    server.remove()


def committing(store, values):
    """Run ``commit(store, values)`` in a thread: (thread, outcome dict with "tid" or "error")."""
    outcome: dict[str, object] = {}

    def run():
        try:
            outcome["tid"] = commit(store, values)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_a_commit_meeting_a_stopped_server_fails_cleanly_and_succeeds_after_restart(store_url, own_server):
    relay = S3Relay(own_server.port)  # only to hold the upload until the server is gone
    url = with_blobs(store_url, f"blobs=s3://{own_server.new_bucket()}/p&endpoint={relay.endpoint}")
    values = [os.urandom(700_000), os.urandom(2 << 20), b"small"]
    try:
        with neostore.open(url, blob_retry_timeout=RETRY) as store:
            before = store.last_transaction()
            oids = new_oids(store, len(values))
            relay.stall("PUT")
            thread, outcome = committing(store, dict(zip(oids, values)))
            assert relay.stalled.wait(HANG_GUARD)  # the upload is on its way ...
            own_server.stop()  # ... when the server goes away
            relay.release()
            thread.join(HANG_GUARD)
            assert not thread.is_alive(), "the commit kept retrying past its retry window"
            error = outcome["error"]
            assert isinstance(error, neostore.BlobStoreUnavailableError), repr(error)
            assert isinstance(error, neostore.StorageUnavailableError)
            assert "failed after its retries" in str(error) and "s3://" in str(error)
            assert store.last_transaction() == before  # nothing of it visible
            for oid in oids:
                with pytest.raises(neostore.POSKeyError):
                    store.load(oid)
            assert store.query("SELECT COUNT(*) FROM data")[0][0] == 0  # not a row of it left behind
            small = store.new_oid()
            commit(store, {small: b"the database alone still works"})  # usable without the object store
            own_server.start()
            tid = commit(store, dict(zip(oids, values)))  # the same commit, now through
            assert [store.load(oid) for oid in oids] == [(v, tid) for v in values]
        with neostore.open(url) as again:
            assert [again.load(oid)[0] for oid in oids] == values
    finally:
        relay.close()


def test_reads_of_tiered_values_fail_while_the_server_is_down_then_work(store_url, own_server):
    url = with_blobs(store_url, f"blobs=s3://{own_server.new_bucket()}/p&endpoint={own_server.endpoint}")
    value = os.urandom(400_000)
    with neostore.open(url, blob_retry_timeout=RETRY) as store:
        oid = store.new_oid()
        tid = commit(store, {oid: value})
        own_server.stop()
        with pytest.raises(neostore.BlobStoreUnavailableError, match="GET s3://"):
            store.load(oid)
        with pytest.raises(neostore.BlobStoreUnavailableError):
            list(store.load_many([oid]))
        with pytest.raises(neostore.BlobStoreUnavailableError):
            store.load_range(oid, 10, 20)
        own_server.start()
        assert store.load(oid) == (value, tid)
        assert store.load_range(oid, 10, 20) == value[10:20]


def test_a_bad_retry_timeout_is_refused(tiered_url):
    with pytest.raises(neostore.InvalidOptionError, match="blob_retry_timeout"):
        neostore.open(tiered_url, blob_retry_timeout=0)
