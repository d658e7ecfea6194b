"""neostore's blob tier against raw obstore on the same S3 server: commit, read back, dedup.

``WINDVANE_BENCH_BYTES`` (default 1 GiB) of random, incompressible 2 MiB
values, on one versitygw (:mod:`s3_bench`) and SQLite (WAL, the store's
default settings); every request path runs 16 in flight.

1. commit: the values through ``Transaction.write`` into a fresh store
   whose URL has ``?blobs=``, 32 values (64 MiB) per transaction as the
   neostore benchmark commits, and as an arrays write of 1 GiB does in one
   transaction (``BigArray[:] = ...``); against raw ``obstore.put`` of the
   same values, 16 at once, nothing else (no hashing, no database). Goal
   >= 0.8.
2. read: a BigArray of ``uint8`` whose chunks are 2 MiB (codec ``none``, so
   each chunk is one tiered value), read whole by ``array[:]`` from a fresh
   ``arrays.open``; against raw ranged GETs (``obstore.get_range``) of the
   same objects, 16 at once, their bodies dropped (goal >= 0.8), and
   against the same GETs each copied into its place in one new array (the
   result ``array[:]`` gives: a reader that keeps what it reads pays for the
   new memory too, which on this VM costs as much as the transfer).
3. dedup: the same values committed again (new oids) into the store holding
   them: the tier's PUT count must stay 0, and the bucket's objects must be
   the same files, unmodified (what the server saw).

The process runs with glibc's malloc thresholds raised as ``windvane
serve`` raises its own (:func:`windvane.ingest.memory.tune_malloc`: 2 MiB
buffers are then reused instead of mapped, faulted in and unmapped each
time), which made every path here faster, the tier's most (its GETs copy
each body into a new ``bytes``). ``WINDVANE_BENCH_DEFAULT_MALLOC=1`` runs
without it.

MB/s (10^6 bytes of values), median of ``WINDVANE_BENCH_ROUNDS`` (3) rounds,
the pairs alternating order each round::

    .venv/bin/python -m pytest benchmarks/test_blob_tier.py -p no:cacheprovider --benchmark-enable --benchmark-only -s
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import numpy as np
import obstore
import pytest
from obstore.store import S3Store
from s3_bench import (
    CONCURRENCY,
    ROUNDS,
    alternate,
    mbps,
    per_round,
    random_values,
    raw_store,
    run_all,
    s3_server,
    total_of,
)
from sensor_data import TOTAL_BYTES, VALUE_BYTES
from test_log_parsing import publish

from windvane import arrays, neostore
from windvane.arrays.keys import encode_key
from windvane.ingest.memory import tune_malloc
from windvane.neostore import p64

pytestmark = pytest.mark.timeout(7200)
# Set by the environment (MALLOC_*_THRESHOLD_, as for the recorded run) or here.
TUNED_MALLOC = bool(os.environ.get("MALLOC_MMAP_THRESHOLD_")) or (
    not os.environ.get("WINDVANE_BENCH_DEFAULT_MALLOC") and tune_malloc()
)
NAME = "bench/tiered"
VALUES_PER_TXN = 32


def neostore_commit(store: neostore.Store, values: list[bytes]) -> None:
    """Commit ``values`` to new oids, ``VALUES_PER_TXN`` per transaction (as the neostore benchmark does)."""
    oids = [p64(oid) for oid in store.new_oids(len(values))]
    for start in range(0, len(values), VALUES_PER_TXN):
        txn = store.begin()
        for i in range(start, min(len(values), start + VALUES_PER_TXN)):
            txn.write(oids[i], None, values[i])
        txn.vote()
        txn.finish()


class Bench:
    """One server, a work directory, fresh stores and buckets on request."""

    def __init__(self, server, values: list[bytes]):
        self.server = server
        self.values = values
        self.nbytes = total_of(values)
        self.dir = Path(tempfile.mkdtemp(prefix="wvb-tier-", dir="/tmp"))

    def url(self) -> tuple[str, str]:
        bucket = self.server.new_bucket("tier")
        path = self.dir / f"{uuid.uuid4().hex[:8]}.db"
        return f"sqlite:///{path}?blobs=s3://{bucket}/store&endpoint={self.server.endpoint}", bucket

    def drop(self, bucket: str) -> None:
        shutil.rmtree(self.server.root / bucket, ignore_errors=True)
        for f in self.dir.iterdir():
            f.unlink()

    def commit_neostore(self) -> float:
        url, bucket = self.url()
        with neostore.open(url) as store:
            rate = mbps(self.nbytes, lambda: neostore_commit(store, self.values))
            assert store.tier.requests["PUT"] == len(self.values)
        self.drop(bucket)
        return rate

    def commit_arrays(self) -> float:
        url, bucket = self.url()
        data = np.frombuffer(b"".join(self.values), dtype="u1")
        with arrays.create(url, NAME, data.shape, "u1", chunks=VALUE_BYTES, codec="none") as array:
            rate = mbps(self.nbytes, lambda: array.__setitem__(slice(None), data))
        self.drop(bucket)
        return rate

    def commit_raw(self) -> float:
        bucket = self.server.new_bucket("raw")
        store = raw_store(self.server, bucket)
        rate = mbps(
            self.nbytes, lambda: run_all(lambda i: obstore.put(store, f"v/{i}", self.values[i]), len(self.values))
        )
        self.drop(bucket)
        return rate


def read_setup(bench: Bench) -> tuple[str, S3Store, list[tuple[str, int]]]:
    """A store holding the values as one BigArray; a raw client of its bucket and its objects' keys and sizes."""
    url, bucket = bench.url()
    data = np.frombuffer(b"".join(bench.values), dtype="u1")
    with arrays.create(url, NAME, data.shape, "u1", chunks=VALUE_BYTES, codec="none") as array:
        array[:] = data
    raw = raw_store(bench.server, bucket, "store")
    objects = [(m["path"], m["size"]) for batch in obstore.list(raw) for m in batch]
    assert len(objects) == len(bench.values) and all(size == VALUE_BYTES for _, size in objects)
    return url, raw, objects


def read_arrays(url: str, expected: np.ndarray) -> float:
    with arrays.open(url, NAME) as array:
        got: list[np.ndarray] = []
        rate = mbps(expected.nbytes, lambda: got.append(array[:]))
    assert np.array_equal(got[0], expected)
    return rate


def read_load_each(url: str, nbytes: int) -> float:
    """The same chunks by ``Store.load_each`` alone (fetched and hash-checked, not placed): where a gap lies."""
    with neostore.open(url) as store:
        names = [encode_key(f"{NAME}/c/{i}") for i in range(nbytes // VALUE_BYTES)]
        found = store.oids_for(names)
        oids = [found[name] for name in names]
        return mbps(nbytes, lambda: store.load_each(oids, lambda oid, value, serial: None))


def read_raw(raw: S3Store, objects: list[tuple[str, int]]) -> float:
    def one(i: int) -> None:
        key, size = objects[i]
        assert len(obstore.get_range(raw, key, start=0, end=size)) == size

    return mbps(sum(s for _, s in objects), lambda: run_all(one, len(objects)))


def read_raw_into_array(raw: S3Store, objects: list[tuple[str, int]]) -> float:
    """The same ranged GETs, each body copied into its place in one new array: the result ``array[:]`` gives."""
    offsets = np.cumsum([0] + [size for _, size in objects])
    nbytes = int(offsets[-1])

    def read() -> None:
        out = np.empty(nbytes, dtype="u1")

        def one(i: int) -> None:
            key, size = objects[i]
            out[offsets[i] : offsets[i + 1]] = np.frombuffer(obstore.get_range(raw, key, start=0, end=size), "u1")

        run_all(one, len(objects))

    return mbps(nbytes, read)


def dedup(bench: Bench) -> dict:
    """Commit the values twice into one store: the second commit's requests and what it did to the objects."""
    url, bucket = bench.url()
    with neostore.open(url) as store:
        first = mbps(bench.nbytes, lambda: neostore_commit(store, bench.values))
        files = {p: p.stat().st_mtime_ns for p in bench.server.objects(bucket)}
        before = dict(store.tier.requests)
        again = mbps(bench.nbytes, lambda: neostore_commit(store, bench.values))
        after = dict(store.tier.requests)
    after_files = {p: p.stat().st_mtime_ns for p in bench.server.objects(bucket)}
    bench.drop(bucket)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
    assert delta.get("PUT", 0) == 0, delta
    assert after_files == files, "the re-commit left the bucket's objects untouched"
    return {"first_mb_per_s": first, "again_mb_per_s": again, "again_requests": delta, "objects": len(files)}


def test_blob_tier_against_raw_obstore(benchmark, bench_results):
    values = random_values(TOTAL_BYTES)
    rounds = 1 if benchmark.disabled else ROUNDS
    rates: dict[str, list[float]] = {}
    with s3_server() as server:
        bench = Bench(server, values)
        try:

            def run() -> None:
                rates.update(
                    alternate(
                        {
                            "commit_neostore": bench.commit_neostore,
                            "commit_raw_obstore_put": bench.commit_raw,
                            "commit_arrays_one_transaction": bench.commit_arrays,
                        },
                        rounds,
                    )
                )
                url, raw, objects = read_setup(bench)
                expected = np.frombuffer(b"".join(values), dtype="u1")
                # One unmeasured read each first: this VM's first touch of memory the process never had
                # costs several times a later allocation's, and would fall on whichever reader ran first.
                read_arrays(url, expected)
                read_raw_into_array(raw, objects)
                rates.update(
                    alternate(
                        {
                            "read_arrays": lambda: read_arrays(url, expected),
                            "read_raw_get_range": lambda: read_raw(raw, objects),
                            "read_raw_get_range_into_array": lambda: read_raw_into_array(raw, objects),
                            "read_neostore_load_each": lambda: read_load_each(url, expected.nbytes),
                        },
                        rounds,
                    )
                )
                rates["dedup"] = [dedup(bench)]  # type: ignore[list-item]

            benchmark.pedantic(run, rounds=1, iterations=1)
        finally:
            shutil.rmtree(bench.dir, ignore_errors=True)
    dedup_info = rates.pop("dedup")[0]
    median = {name: float(np.median(v)) for name, v in rates.items()}
    info = {
        "value_bytes": VALUE_BYTES,
        "values": len(values),
        "concurrency": CONCURRENCY,
        "values_per_transaction": VALUES_PER_TXN,
        "rounds": rounds,
        "tuned_malloc": TUNED_MALLOC,
        "mb_per_s": rates,
        "median_mb_per_s": median,
        "commit_neostore_over_raw": median["commit_neostore"] / median["commit_raw_obstore_put"],
        "commit_arrays_over_raw": median["commit_arrays_one_transaction"] / median["commit_raw_obstore_put"],
        "read_arrays_over_raw": median["read_arrays"] / median["read_raw_get_range"],
        "read_arrays_over_raw_into_array": median["read_arrays"] / median["read_raw_get_range_into_array"],
        "read_load_each_over_raw": median["read_neostore_load_each"] / median["read_raw_get_range"],
        "per_round_commit_neostore_over_raw": per_round(rates, "commit_neostore", "commit_raw_obstore_put"),
        "per_round_read_arrays_over_raw": per_round(rates, "read_arrays", "read_raw_get_range"),
        "per_round_read_arrays_over_raw_into_array": per_round(rates, "read_arrays", "read_raw_get_range_into_array"),
        "dedup": dedup_info,
        "goal": "commit and read >= 0.8 of raw obstore; re-commit: 0 PUTs",
    }
    publish(benchmark, bench_results, "blob_tier", info)
