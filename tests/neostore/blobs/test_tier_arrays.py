"""windvane.arrays on a store with a blob tier: BigArrays, streams and zarr arrays, written and read back.

Reads of part of a raw value must be ranged GETs that transfer only the range:
the relay in front of versitygw (tests/s3_relay.py) counts the requests and the
bytes the server really sent.
"""

from __future__ import annotations

import numpy as np
import zarr

from windvane import arrays, neostore
from windvane.arrays import Column, ZarrStore


def test_a_bigarray_round_trips_through_the_tier(relayed_url, relay):
    rng = np.random.default_rng(7)
    data = rng.integers(0, 2**63, size=(120_000, 4), dtype="int64")  # 1 MB chunks: each one an object
    with arrays.create(relayed_url, "m/a", (0, 4), "int64", chunks=(32_768, 4)) as a:
        a.append(data[:70_000])
        a.append(data[70_000:])  # rewrites the partial last chunk
        a[10:20] = -1
    data[10:20] = -1
    assert relay.seen.requests["PUT"] >= 4
    relay.reset()
    with arrays.open(relayed_url, "m/a") as a:
        np.testing.assert_array_equal(a[:], data)
        np.testing.assert_array_equal(a[-5:], data[-5:])
    assert relay.seen.requests["GET"] >= 4  # the chunks came from the object store
    with neostore.open(relayed_url, read_only=True) as store:
        assert store.query("SELECT COUNT(*) FROM data WHERE chunks = -1")[0][0] >= 4


def test_a_stream_round_trips_through_the_tier(relayed_url, relay):
    n = 100_000
    i = np.arange(n)
    columns = [Column("speed", "float64"), Column("msg", "str")]
    block = {
        "time": 1_700_000_000_000_000_000 + i,
        "speed": np.random.default_rng(5).random(n),
        "msg": [f"line {k} " * 8 for k in i],
    }
    with arrays.create_stream(relayed_url, "t1", columns, chunk_rows=n) as s:
        s.append(block)
    assert relay.seen.requests["PUT"] >= 1  # the speed chunk (800 kB of noise) at least
    relay.reset()
    with arrays.open_stream(relayed_url, "t1") as s:
        np.testing.assert_array_equal(s["speed"][:], block["speed"])
        assert list(s["msg"][:10]) == block["msg"][:10] and list(s["msg"][-3:]) == block["msg"][-3:]
        np.testing.assert_array_equal(s["time"][:], block["time"])
    assert relay.seen.requests["GET"] >= 1


def test_part_of_a_zarr_shard_is_read_by_ranged_gets_of_only_that_range(relayed_url, relay):
    rng = np.random.default_rng(3)
    data = rng.integers(0, 2**63, size=200_000, dtype="uint64")  # incompressible: stored raw, ranges slice it
    z = zarr.create_array(
        ZarrStore(relayed_url),
        name="s",
        shape=data.shape,
        chunks=(1000,),
        shards=(100_000,),
        dtype="uint64",
        compressors=None,
    )
    z[:] = data
    shard_bytes = 100_000 * 8
    assert relay.seen.requests["PUT"] == 2  # two shards of 800 kB, each an object
    relay.reset()
    reader = zarr.open_array(ZarrStore(relayed_url, read_only=True), path="s")
    np.testing.assert_array_equal(reader[150_500:150_510], data[150_500:150_510])
    seen = relay.reset()
    # the shard's index (its last 16 bytes per inner chunk + a checksum), then one inner chunk: ranged GETs only
    assert seen.requests["GET"] == len(seen.ranges) == 2, seen
    assert seen.body_bytes["GET"] == 1000 * 8 + 100 * 16 + 4
    assert seen.body_bytes["GET"] < shard_bytes // 50
    np.testing.assert_array_equal(reader[:], data)  # the whole array still reads
