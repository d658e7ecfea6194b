"""Part of a raw tiered value is one ranged GET transferring only that part (counted by the store and the relay)."""

from __future__ import annotations

import os

from tests.neostore.blobs.conftest import commit
from windvane import neostore


def test_load_range_of_a_raw_value_transfers_only_the_range(relayed_url, relay):
    value = os.urandom(4 << 20)
    with neostore.open(relayed_url) as store:
        oid = store.new_oid()
        tid = commit(store, {oid: value})
        relay.reset()
        store.tier.requests.clear()
        spans = [(0, 1), (1000, 5000), ((4 << 20) - 10, 4 << 20), (-100, None), (3_000_000, 10 << 20)]
        for start, stop in spans:
            assert store.load_range(oid, start, stop) == value[start:stop]
        assert store.load_range(oid, 10, 20, before=neostore.p64(neostore.u64(tid) + 1)) == value[10:20]
        assert store.load_range(oid, 50, 50) == b""  # nothing asked, nothing sent
    assert store.tier.requests == {"GET": len(spans) + 1}
    assert relay.seen.requests == {"GET": len(spans) + 1} and len(relay.seen.ranges) == len(spans) + 1
    assert relay.seen.body_bytes["GET"] == sum(len(value[a:b]) for a, b in spans) + 10
