"""A damaged or lost object in the object store: CorruptDataError naming the oid, the tid and the object's key.

The damage is done as a failing disk or an operator would: to the object's
file in versitygw's directory (objects are plain files there).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.neostore.blobs.conftest import bucket_of, commit
from windvane import arrays, neostore


def object_of(store, s3_env, url, oid):
    """(key as messages name it, the object's file) of ``oid``'s latest value."""
    digest, compression = store.query(
        "SELECT d.hash, d.compression FROM obj o JOIN data d ON d.id = o.data_id WHERE o.oid = ? "
        "ORDER BY o.tid DESC LIMIT 1",
        (neostore.u64(oid),),
    )[0]
    key = store.tier.key(bytes(digest), compression)
    path = s3_env.root / bucket_of(url) / key.split(f"s3://{bucket_of(url)}/", 1)[1]
    assert path.is_file()
    return key, path


def damage(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one bit flipped in the middle: same size, other bytes
    path.write_bytes(bytes(data))


def assert_names(error, oid, tid, key):
    message = str(error)
    assert f"oid 0x{oid.hex()}" in message and f"tid 0x{tid.hex()}" in message and key in message, message
    assert "altered or deleted outside neostore" in message  # the object, not the database row


@pytest.mark.parametrize("compressible", [False, True], ids=["raw", "zstd"])
def test_a_damaged_object_is_corrupt_data_naming_oid_tid_and_key(tiered_url, s3_env, compressible):
    value = b"abc" * 200_000 if compressible else os.urandom(600_000)
    with neostore.open(tiered_url) as store:
        oid, good = store.new_oid(), store.new_oid()
        tid = commit(store, {oid: value, good: os.urandom(300_000)})
        key, path = object_of(store, s3_env, tiered_url, oid)
        assert key.endswith(".zst") == compressible
        damage(path)
        with pytest.raises(neostore.CorruptDataError) as caught:
            store.load(oid)
        assert_names(caught.value, oid, tid, key)
        with pytest.raises(neostore.CorruptDataError) as caught:
            list(store.load_many([good, oid]))
        assert_names(caught.value, oid, tid, key)
        with pytest.raises(neostore.CorruptDataError) as caught:
            store.load_serial(oid, tid)
        assert_names(caught.value, oid, tid, key)
        assert store.load(good)[0] != value  # the other value still reads


def test_a_deleted_object_is_corrupt_data_naming_its_key(tiered_url, s3_env):
    value = os.urandom(500_000)
    with neostore.open(tiered_url) as store:
        oid = store.new_oid()
        tid = commit(store, {oid: value})
        key, path = object_of(store, s3_env, tiered_url, oid)
        path.unlink()
        for read in (
            lambda: store.load(oid),
            lambda: list(store.load_many([oid])),
            lambda: store.load_range(oid, 5, 50),
        ):
            with pytest.raises(neostore.CorruptDataError, match="is missing") as caught:
                read()
            assert_names(caught.value, oid, tid, key)


def test_a_damaged_chunk_fails_a_whole_value_read_through_arrays(tiered_url, s3_env):
    data = np.random.default_rng(1).random(200_000)  # 1.6 MB of float64: chunks of 400 kB go to the tier
    with arrays.create(tiered_url, "a", (0,), "float64", chunks=50_000) as a:
        a.append(data)
    with neostore.open(tiered_url) as store:
        names = [r for r in store.list_names(b"a/c/") if r.size >= store.tier.threshold]
        assert len(names) == 4
        oid = names[1].oid
        key, path = object_of(store, s3_env, tiered_url, oid)
        damage(path)
    with arrays.open(tiered_url, "a") as a:
        np.testing.assert_array_equal(a[:50_000], data[:50_000])  # an undamaged chunk reads
        with pytest.raises(neostore.CorruptDataError) as caught:
            a[60_000:60_010]
        assert_names(caught.value, oid, names[1].serial, key)
