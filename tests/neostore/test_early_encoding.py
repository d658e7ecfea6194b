"""Big values compressed in the store's worker threads while the transaction goes on, through ZODB's storage API."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zstandard
from ZODB.Connection import TransactionMetaData

from windvane import neostore
from windvane.neostore import ZERO
from windvane.neostore.upload import EARLY_ENCODE_BYTES
from windvane.neostore.values import RAW, ZSTD, ValueCodec, compression_parameters, value_hash


def sensor_counts(index: int, size: int = 2 * EARLY_ENCODE_BYTES) -> bytes:
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


def test_values_compressed_ahead_are_what_the_serial_encoder_gives(store_url):
    """Compressible values are stored compressed, byte for byte as the codec compresses one alone and as
    zstd does on one thread; an incompressible one raw; each loads back whole and checked against its hash."""
    storage = neostore.ZODBStorage(store_url)
    try:
        values = {storage.new_oid(): sensor_counts(i) for i in range(5)}
        noise = os.urandom(2 * EARLY_ENCODE_BYTES)
        values[storage.new_oid()] = noise
        tid = zodb_commit(storage, values)
        store = storage.backing_store
        rows = {
            bytes(h): (c, bytes(stored)) for h, c, stored in store.query("SELECT hash, compression, value FROM data")
        }
        serial = ValueCodec()
        one_thread = zstandard.ZstdCompressor(compression_params=compression_parameters(1, threads=1))
        for oid, value in values.items():
            compression, stored = rows[value_hash(value)]
            assert (compression, stored) == (serial.encode(value).compression, serial.encode(value).stored)
            assert compression == (RAW if value is noise else ZSTD)
            assert value is noise or stored == one_thread.compress(value)
            assert storage.load(oid) == (value, tid)
    finally:
        storage.close()


def test_a_value_failing_in_a_worker_fails_the_vote_and_leaves_nothing(store_url):
    """The error of a worker's encoding is the vote's; what was uploaded before it is rolled back."""
    early = sensor_counts(0, 3 * EARLY_ENCODE_BYTES)
    # flush_bytes: the first value is uploaded as soon as it is written, the failing one at vote.
    storage = neostore.ZODBStorage(store_url, flush_bytes=len(early))
    try:
        store = storage.backing_store
        before = store.counts()
        first, second = storage.new_oid(), storage.new_oid()
        with pytest.raises(RuntimeError, match="cannot be read"):
            zodb_commit(storage, {first: early, second: Unreadable(sensor_counts(1))})
        assert store.counts() == before
        with pytest.raises(neostore.POSKeyError):
            storage.load(first)
        tid = zodb_commit(storage, {first: early})  # the store goes on
        assert storage.load(first) == (early, tid)
    finally:
        storage.close()
