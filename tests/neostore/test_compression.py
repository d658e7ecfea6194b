"""Values compressed in the store's worker threads, and one value alone over zstd's threads, through ZODB's storage
API: what is stored, what loads back, and a failing encoding."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zstandard
from ZODB.Connection import TransactionMetaData

from windvane import neostore
from windvane.neostore import ZERO
from windvane.neostore.upload import INLINE_ENCODE_BYTES
from windvane.neostore.values import JOB_BYTES, RAW, ZSTD, spread_parameters, value_hash

#: Above a zstd job, so that a value compressed alone may spread over threads; two of them pass
#: INLINE_ENCODE_BYTES, so that the store's worker threads compress them.
SIZE = JOB_BYTES + JOB_BYTES // 4
assert 2 * SIZE >= INLINE_ENCODE_BYTES


def sensor_counts(index: int, size: int = SIZE) -> bytes:
    """``size`` bytes of int32 ADC counts of a noisy sine: compresses to about two thirds."""
    t = np.arange(size // 4) + index * (size // 4)
    noise = np.random.default_rng(index).normal(0.0, 20.0, t.size)
    return (20000 * np.sin(t / 500.0) + noise).astype("<i4").tobytes()


class Unreadable(bytes):
    """A value that fails when the encoder reads it: what a failing worker meets."""

    def __getitem__(self, key: object) -> bytes:
        raise RuntimeError("this value cannot be read")


def zodb_commit(storage: neostore.NeoStorage, values: dict[bytes, bytes]) -> bytes:
    """Store ``values`` by oid in one transaction through ZODB's storage API; the tid."""
    txn = TransactionMetaData()
    storage.tpc_begin(txn)
    try:
        for oid, value in values.items():
            storage.store(oid, ZERO, value, "", txn)
        storage.tpc_vote(txn)
    except BaseException:
        storage.tpc_abort(txn)
        raise
    return storage.tpc_finish(txn)


def test_values_compressed_in_parallel_are_what_the_serial_codec_gives(store_url):
    """Compressible values, compressed by the store's worker threads, are stored byte for byte as zstd
    compresses each alone on one thread; an incompressible one raw; each loads back whole, checked against
    its hash."""
    storage = neostore.ZODBStorage(store_url)
    try:
        values = {storage.new_oid(): sensor_counts(i) for i in range(4)}
        noise = os.urandom(SIZE)
        values[storage.new_oid()] = noise
        tid = zodb_commit(storage, values)
        rows = stored_rows(storage)
        serial = zstandard.ZstdCompressor(level=1)
        for oid, value in values.items():
            assert rows[value_hash(value)] == ((RAW, value) if value is noise else (ZSTD, serial.compress(value)))
            assert storage.load(oid) == (value, tid)
    finally:
        storage.close()


def test_a_value_compressed_alone_spreads_over_threads(store_url):
    """With ``compression_threads``, a transaction of one big value has it compressed over zstd's threads: the
    frame zstd writes with the same jobs on any number of threads; values compressed beside others keep to
    one thread each. Both load back."""
    storage = neostore.ZODBStorage(store_url, compression_threads=2)
    try:
        lone_oid, lone = storage.new_oid(), sensor_counts(9)
        lone_tid = zodb_commit(storage, {lone_oid: lone})
        values = {storage.new_oid(): sensor_counts(i) for i in range(3)}
        tid = zodb_commit(storage, values)
        rows = stored_rows(storage)
        spread = zstandard.ZstdCompressor(compression_params=spread_parameters(1, threads=1))
        assert rows[value_hash(lone)] == (ZSTD, spread.compress(lone))
        assert storage.load(lone_oid) == (lone, lone_tid)
        one_thread = zstandard.ZstdCompressor(level=1)
        for oid, value in values.items():
            assert rows[value_hash(value)] in ((ZSTD, spread.compress(value)), (ZSTD, one_thread.compress(value)))
            assert storage.load(oid) == (value, tid)
    finally:
        storage.close()


def stored_rows(storage: neostore.NeoStorage) -> dict[bytes, tuple[int, bytes]]:
    """``{hash: (compression, stored bytes)}`` of every ``data`` row."""
    query = "SELECT hash, compression, value FROM data"
    return {bytes(h): (c, bytes(stored)) for h, c, stored in storage.backing_store.query(query)}


def test_a_value_failing_in_a_worker_fails_the_vote_and_leaves_nothing(store_url):
    """The error of a worker's encoding is the vote's; what was uploaded before it is rolled back."""
    early = sensor_counts(0, 3 * SIZE)
    # flush_bytes: the first value is uploaded as soon as it is written, the others at vote, by the workers.
    storage = neostore.ZODBStorage(store_url, flush_bytes=len(early))
    try:
        store = storage.backing_store
        before = store.counts()
        first, second, third = storage.new_oid(), storage.new_oid(), storage.new_oid()
        with pytest.raises(RuntimeError, match="cannot be read"):
            zodb_commit(storage, {first: early, second: sensor_counts(1), third: Unreadable(sensor_counts(2))})
        assert store.counts() == before
        with pytest.raises(neostore.POSKeyError):
            storage.load(first)
        tid = zodb_commit(storage, {first: early})  # the store goes on
        assert storage.load(first) == (early, tid)
    finally:
        storage.close()


def test_a_lone_value_failing_fails_the_vote_and_leaves_nothing(store_url):
    """A transaction of one value encodes it in the committing thread: its error is the vote's all the same."""
    storage = neostore.ZODBStorage(store_url)
    try:
        store = storage.backing_store
        before = store.counts()
        oid = storage.new_oid()
        with pytest.raises(RuntimeError, match="cannot be read"):
            zodb_commit(storage, {oid: Unreadable(sensor_counts(3))})
        assert store.counts() == before
        value = sensor_counts(3)
        tid = zodb_commit(storage, {oid: value})
        assert storage.load(oid) == (value, tid)
    finally:
        storage.close()
