"""Values the store holds already are never sent again: counted by the store and, independently, at the server.

The store URL reaches versitygw through tests/s3_relay.py, which counts the
requests that really arrived, so the counts are not only the store's own
bookkeeping (``store.tier.requests``).
"""

from __future__ import annotations

import os

from tests.neostore.blobs.conftest import bucket_of, commit, new_oids
from windvane import neostore


def test_recommitting_identical_values_sends_nothing(relayed_url, relay, s3_env):
    values = [os.urandom(300_000 + i) for i in range(5)]
    with neostore.open(relayed_url) as store:
        oids = new_oids(store, len(values))
        commit(store, dict(zip(oids, values)))
        assert store.tier.requests["PUT"] == relay.seen.requests["PUT"] == len(values)
        relay.reset()
        store.tier.requests.clear()
        commit(store, dict(zip(oids, values)))  # new revisions, same values
        others = new_oids(store, len(values))
        commit(store, dict(zip(others, values)))  # other objects, same values
        assert +store.tier.requests == {}
        assert relay.seen.requests == {} and relay.seen.refused == {}  # the server saw nothing at all
        assert [store.load(oid)[0] for oid in oids + others] == values + values
        assert relay.seen.requests == {"GET": 2 * len(values)}
    assert len(s3_env.objects(bucket_of(relayed_url))) == len(values)


def test_a_second_store_on_the_url_sends_nothing_for_values_held(relayed_url, relay):
    values = [os.urandom(400_000) for _ in range(3)]
    with neostore.open(relayed_url) as first:
        oids = new_oids(first, len(values))
        commit(first, dict(zip(oids, values)))
    relay.reset()
    with neostore.open(relayed_url) as second:
        commit(second, dict(zip(oids, values)))
        fresh = os.urandom(500_000)
        commit(second, {second.new_oid(): fresh, oids[0]: values[0]})
        assert second.tier.requests == {"PUT": 1}  # only the new value
    assert relay.seen.requests == {"PUT": 1}
    assert relay.seen.body_bytes["PUT"] == 0  # a PUT's answer has no body; the 500 kB went up, once


def test_one_value_written_twice_in_a_transaction_is_sent_once(relayed_url, relay):
    value = os.urandom(1 << 20)
    with neostore.open(relayed_url) as store:
        oids = new_oids(store, 4)
        tid = commit(store, dict.fromkeys(oids, value))
        assert store.tier.requests == {"PUT": 1}
        assert [store.load(oid) for oid in oids] == [(value, tid)] * 4
    assert relay.seen.requests["PUT"] == 1
