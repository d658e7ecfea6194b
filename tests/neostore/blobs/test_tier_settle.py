"""Under the commit lock, an object found at upload but gone by then (a sweep took it) is sent again.

The object is left by an earlier upload no row references (as a writer that
died before its commit leaves it); the relay (tests/s3_relay.py) holds the
commit's HEAD while the object's file is deleted, as a sweep would.
"""

from __future__ import annotations

import os
import threading

from tests.neostore.blobs.conftest import bucket_of, commit
from windvane import neostore


def test_an_object_gone_before_the_rows_go_in_is_uploaded_again(relayed_url, relay, s3_env):
    value = os.urandom(300_000)
    with neostore.open(relayed_url) as dead_writer:
        dead_writer.tier.upload([dead_writer.codec.encode(value)])  # an orphan: no row references it
    (orphan,) = s3_env.objects(bucket_of(relayed_url))
    with neostore.open(relayed_url) as store:
        relay.reset()
        relay.stall("HEAD")
        oid = store.new_oid()
        outcome = {}
        thread = threading.Thread(target=lambda: outcome.setdefault("tid", commit(store, {oid: value})))
        thread.start()
        assert relay.stalled.wait(60)  # the writer asks whether the object it found is still there ...
        orphan.unlink()  # ... and a sweep has just taken it
        relay.release()
        thread.join(60)
        assert "tid" in outcome
        assert relay.seen.requests["HEAD"] == 1 and relay.seen.requests["PUT"] == 2  # found, then sent again
        assert orphan.is_file()
        assert store.load(oid) == (value, outcome["tid"])
