"""503 SlowDown from the object store: the client backs off and retries, commits and reads succeed.

The answers come from tests/s3_relay.py, a real relay in front of versitygw
that answers the next N requests itself with the 503 SlowDown AWS S3 sends;
every other request reaches the server unchanged.
"""

from __future__ import annotations

import os

from tests.neostore.blobs.conftest import commit, new_oids
from windvane import neostore


def test_a_commit_and_a_read_succeed_through_slow_downs(relayed_url, relay):
    value = os.urandom(600_000)
    with neostore.open(relayed_url) as store:
        oid = store.new_oid()
        relay.reset()
        relay.fail_next(3)
        tid = commit(store, {oid: value})
        seen = relay.reset()
        assert seen.refused["PUT"] == 3  # three PUTs answered 503 ...
        assert seen.requests["PUT"] == 1  # ... then the retry reached the server and wrote the object
        assert store.tier.requests["PUT"] == 1  # one upload as the store sees it: the retries were the client's
        relay.fail_next(2)
        assert store.load(oid) == (value, tid)
        seen = relay.reset()
        assert seen.refused["GET"] == 2 and seen.requests["GET"] == 1
        assert seen.body_bytes["GET"] == len(value)


def test_load_many_succeeds_through_slow_downs(relayed_url, relay):
    values = [os.urandom(300_000 + i) for i in range(6)]
    with neostore.open(relayed_url) as store:
        oids = new_oids(store, len(values))
        commit(store, dict(zip(oids, values)))
        relay.reset()
        relay.fail_next(4)
        assert [v for v, _ in store.load_many(oids)] == values
        seen = relay.reset()
        assert seen.refused["GET"] == 4 and seen.requests["GET"] == len(values)
