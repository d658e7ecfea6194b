"""neostore throughput benchmarks, each measured beside its baseline in the same run.

1. commit ``TOTAL_BYTES`` (1 GiB) as 2 MiB values, ``VALUES_PER_TXN`` values
   (64 MiB) per transaction: neostore vs raw ``executemany`` INSERTs of the
   same bytes into a bare table, on MariaDB (``mariadb`` connector, same
   server) and on SQLite (sqlite3, WAL, synchronous=FULL). Goal >= 0.8.
   MariaDB also gets a stronger baseline, one INSERT per value (the server
   takes 2 MiB statements faster than one 64 MiB bulk statement).
2. the same data through a NEO-like path: mysqlclient, escaped BLOBs,
   zlib level 6 (kept if smaller), SHA-1, NEO's data/obj tables. Reported:
   how many times faster neostore on MariaDB is.
3. re-committing identical values (all dedup hits) into a store that holds
   them: goal >= 5x the first commit's throughput (benchmark 1).
4. reading every value back with ``store.load`` vs a raw SELECT of the bytes
   by id. Goal >= 0.8.
5. pack of a 1 GiB database of which half the revisions are dead, in a
   separate process whose peak RSS must stay under 200 MB.
6. compression: committing through ZODB's storage API (``tpc_begin``,
   ``store`` per value, ``tpc_vote``, ``tpc_finish``) vs raw ``executemany``
   INSERTs of the same bytes, on MariaDB and on SQLite, for three kinds of
   values: the sensor data as int32 counts (compresses to about two thirds,
   stored compressed), as float32 (saves about a tenth, under the eighth
   neostore asks: stored raw), and random bytes, 32 values per transaction;
   and the counts and random bytes again one value per transaction (a
   commit waits for the compression of its one value; the random values
   show what the two-phase commit costs without compression), the baseline
   committing each INSERT too; the counts so once more with
   ``compression_threads=2`` (the lone value over two zstd threads).
   One test per engine runs every pair, alternating their order each round;
   ratios are of the pairs' medians and per round. Goal >= 0.8 for each.

Every round of a write benchmark starts from a fresh empty database/table
(pytest-benchmark ``pedantic`` with ``setup``/``teardown``); the setup waits
until InnoDB has flushed the previous round's pages, and the session's server
is warmed up once (1 GiB written and dropped) before any benchmark. Throughput is in MB/s
(10^6 bytes/s) of the values' raw bytes, from the median round; the ratios
are in ``benchmark.extra_info`` and printed by ``benchmarks/report.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import zlib

import MySQLdb
import numpy as np
import psutil
import pytest
import sensor_data
from s3_bench import alternate, per_round
from ZODB.Connection import TransactionMetaData

from windvane import neostore
from windvane.neostore import p64

#: Bytes moved by each benchmark (1 GiB); WINDVANE_BENCH_BYTES=64M for a quick run.
TOTAL_BYTES = sensor_data.TOTAL_BYTES
VALUE_BYTES = sensor_data.VALUE_BYTES
#: 32 values of 2 MiB = 64 MiB per transaction, for neostore and baselines alike.
VALUES_PER_TXN = 32
ROUNDS = int(os.environ.get("WINDVANE_BENCH_ROUNDS", "3"))
PACK_ROUNDS = int(os.environ.get("WINDVANE_BENCH_PACK_ROUNDS", "1"))
MB = 1e6

GOAL_VS_RAW = 0.8
GOAL_RECOMMIT = 5.0
PACK_RSS_LIMIT = 200 * MB

# Full-size rounds take minutes; the repository's 300 s default would cut them.
pytestmark = pytest.mark.timeout(3600)


def batches(n: int, size: int = VALUES_PER_TXN):
    for start in range(0, n, size):
        yield range(start, min(n, start + size))


# -- recording -------------------------------------------------------------------


def record(benchmark, results, name, nbytes, *, baseline=None, goal=None, ratio_name=None, **extra):
    """Put MB/s (and the ratio to ``baseline``, measured earlier this run) into extra_info."""
    benchmark.extra_info.update(extra)
    stats = getattr(benchmark, "stats", None)
    if stats is None:  # --benchmark-disable: the test only checked that the code runs
        return
    st = stats.stats
    mbps = nbytes / st.median / MB
    info = {
        "bytes": nbytes,
        "seconds_median": st.median,
        "seconds_min": st.min,
        "seconds_max": st.max,
        "mbps": mbps,
        "mbps_best": nbytes / st.min / MB,
        "mbps_worst": nbytes / st.max / MB,
    }
    benchmark.extra_info.update(info)
    if baseline is not None:
        benchmark.extra_info["baseline"] = baseline
        if baseline in results:
            ratio = mbps / results[baseline]["mbps"]
            key = ratio_name or "ratio_vs_baseline"
            benchmark.extra_info[key] = ratio
            if goal is not None:
                benchmark.extra_info["goal"] = goal
                benchmark.extra_info["goal_met"] = ratio >= goal
    results[name] = info


# -- raw baselines -----------------------------------------------------------------


def raw_mariadb_table(conn) -> None:
    cur = conn.cursor()
    cur.execute("CREATE TABLE bare (id BIGINT NOT NULL PRIMARY KEY, value MEDIUMBLOB NOT NULL) ENGINE=InnoDB")
    conn.commit()


def raw_mariadb_commit(conn, values, per_txn: int = VALUES_PER_TXN) -> None:
    cur = conn.cursor()
    for batch in batches(len(values), per_txn):
        cur.executemany("INSERT INTO bare (id, value) VALUES (?, ?)", [(i, values[i]) for i in batch])
        conn.commit()


def raw_sqlite_connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")  # neostore's durability
    return conn


def raw_sqlite_commit(conn, values, per_txn: int = VALUES_PER_TXN) -> None:
    for batch in batches(len(values), per_txn):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO bare (id, value) VALUES (?, ?)", [(i, values[i]) for i in batch])
        conn.execute("COMMIT")


# -- neostore ----------------------------------------------------------------------


def neostore_commit(store, values, oids=None) -> list[bytes]:
    """Commit ``values`` to new oids (or ``oids``), VALUES_PER_TXN per transaction."""
    if oids is None:
        oids = [p64(oid) for oid in store.new_oids(len(values))]
    for batch in batches(len(values)):
        txn = store.begin()
        for i in batch:
            txn.write(oids[i], None, values[i])
        txn.vote()
        txn.finish()
    return oids


def sqlite_url(path: str) -> str:
    return f"sqlite:///{path}"  # an absolute path: four slashes


# -- 1. commit: neostore vs raw inserts ------------------------------------------------


def _bench_raw_mariadb_commit(benchmark, databases, sensor_values, bench_results, name, commit) -> None:
    """Time ``commit(conn, values)`` into a fresh bare table, checking every byte arrived."""
    n = len(sensor_values)
    database = f"b_{name}"

    def setup():
        databases.fresh_mariadb(database)
        conn = databases.mariadb_connect(database)
        raw_mariadb_table(conn)
        return (conn, sensor_values), {}

    def teardown(conn, values):
        cur = conn.cursor()
        cur.execute("SELECT COUNT(*), SUM(LENGTH(value)) FROM bare")
        assert cur.fetchone() == (n, n * VALUE_BYTES)
        conn.close()
        databases.drop_mariadb(database)

    benchmark.pedantic(commit, setup=setup, teardown=teardown, rounds=ROUNDS, iterations=1)
    record(benchmark, bench_results, name, n * VALUE_BYTES)


@pytest.mark.benchmark(group="1-commit-mariadb")
def test_commit_mariadb_raw(benchmark, databases, sensor_values, bench_results):
    """Baseline: mariadb connector executemany INSERT into a bare (id, MEDIUMBLOB) table."""
    _bench_raw_mariadb_commit(
        benchmark, databases, sensor_values, bench_results, "commit_mariadb_raw", raw_mariadb_commit
    )


def raw_mariadb_commit_per_row(conn, values) -> None:
    cur = conn.cursor()
    for batch in batches(len(values)):
        for i in batch:
            cur.execute("INSERT INTO bare (id, value) VALUES (?, ?)", (i, values[i]))
        conn.commit()


@pytest.mark.benchmark(group="1-commit-mariadb")
def test_commit_mariadb_raw_per_row(benchmark, databases, sensor_values, bench_results):
    """A stronger baseline: one INSERT per value (MariaDB takes 2 MiB statements faster than 64 MiB ones)."""
    _bench_raw_mariadb_commit(
        benchmark, databases, sensor_values, bench_results, "commit_mariadb_raw_per_row", raw_mariadb_commit_per_row
    )


@pytest.mark.benchmark(group="1-commit-mariadb")
def test_commit_mariadb_neostore(benchmark, databases, sensor_values, bench_results):
    """neostore on MariaDB (InnoDB): blake3, zstd-1 if it saves an eighth, dedup, two-phase commit."""
    n = len(sensor_values)

    def setup():
        store = neostore.open(databases.fresh_mariadb("b_neo_commit"))
        return (store, sensor_values), {}

    def teardown(store, values):
        counts = store.counts()
        assert (counts["obj"], counts["data"], counts["trans"]) == (n, n, len(range(0, n, VALUES_PER_TXN)))
        assert store.load(p64(n))[0] == values[-1]  # oids start at 1
        benchmark.extra_info["stored_bytes"] = store.value_size()
        store.close()
        databases.drop_mariadb("b_neo_commit")

    benchmark.pedantic(neostore_commit, setup=setup, teardown=teardown, rounds=ROUNDS, iterations=1)
    record(
        benchmark,
        bench_results,
        "commit_mariadb_neostore",
        n * VALUE_BYTES,
        baseline="commit_mariadb_raw",
        goal=GOAL_VS_RAW,
    )
    if "commit_mariadb_raw_per_row" in bench_results and "mbps" in benchmark.extra_info:
        benchmark.extra_info["ratio_vs_raw_per_row"] = (
            benchmark.extra_info["mbps"] / bench_results["commit_mariadb_raw_per_row"]["mbps"]
        )


# -- 2. the NEO-like path ---------------------------------------------------------------

NEO_SCHEMA = [
    # NEO's MySQLDatabaseManager._setup (VERSION 4), one partition, dedup on.
    "CREATE TABLE data (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, hash BINARY(20) NOT NULL, "
    "compression TINYINT UNSIGNED NULL, value MEDIUMBLOB NOT NULL, UNIQUE (hash, compression)) ENGINE=InnoDB",
    "CREATE TABLE obj (`partition` SMALLINT UNSIGNED NOT NULL, oid BIGINT UNSIGNED NOT NULL, "
    "tid BIGINT UNSIGNED NOT NULL, data_id BIGINT UNSIGNED NULL, value_tid BIGINT UNSIGNED NULL, "
    "PRIMARY KEY (`partition`, oid, tid), KEY tid (`partition`, tid, oid), KEY (data_id)) ENGINE=InnoDB",
]


def neo_like_commit(conn, values) -> None:
    """What NEO does per object: zlib-6 (kept if smaller), SHA-1 of the stored
    bytes, an escaped INSERT into data (text protocol), then the obj rows and
    a commit per transaction."""
    cur = conn.cursor()
    data_id = 0
    tid = 0x03F0000000000000
    for batch in batches(len(values)):
        tid += 1
        obj_rows = []
        for i in batch:
            value = values[i]
            compressed = zlib.compress(value, 6)
            if len(compressed) < len(value):
                stored, compression = compressed, 1
            else:
                stored, compression = value, 0
            checksum = hashlib.sha1(stored).digest()
            cur.execute("INSERT INTO data VALUES (%s, %s, %s, %s)", (data_id, checksum, compression, stored))
            obj_rows.append((0, i + 1, tid, data_id, None))
            data_id += 1
        cur.executemany("INSERT INTO obj VALUES (%s, %s, %s, %s, %s)", obj_rows)
        conn.commit()


@pytest.mark.benchmark(group="1-commit-mariadb")
def test_commit_mariadb_neo_like(benchmark, databases, sensor_values, bench_results):
    """Benchmark 2: mysqlclient + escaped BLOBs + zlib-6 + SHA-1 into NEO's data/obj tables."""
    n = len(sensor_values)

    def setup():
        databases.fresh_mariadb("b_neo_like")
        conn = MySQLdb.connect(user="root", unix_socket=databases.server.socket, database="b_neo_like")
        cur = conn.cursor()
        cur.execute("SET SESSION sql_mode='TRADITIONAL,NO_ENGINE_SUBSTITUTION'")
        for statement in NEO_SCHEMA:
            cur.execute(statement)
        conn.commit()
        return (conn, sensor_values), {}

    def teardown(conn, values):
        cur = conn.cursor()
        cur.execute("SELECT COUNT(*), SUM(LENGTH(value)) FROM data")
        count, stored = cur.fetchone()
        assert count == n
        cur.execute("SELECT compression, value FROM data WHERE id = %s", (n - 1,))
        compression, stored_last = cur.fetchone()
        assert (zlib.decompress(stored_last) if compression else stored_last) == values[-1]
        benchmark.extra_info["stored_bytes"] = int(stored)
        conn.close()
        databases.drop_mariadb("b_neo_like")

    benchmark.pedantic(neo_like_commit, setup=setup, teardown=teardown, rounds=ROUNDS, iterations=1)
    record(benchmark, bench_results, "commit_mariadb_neo_like", n * VALUE_BYTES)
    if "commit_mariadb_neostore" in bench_results and "commit_mariadb_neo_like" in bench_results:
        benchmark.extra_info["neostore_faster_by"] = (
            bench_results["commit_mariadb_neostore"]["mbps"] / bench_results["commit_mariadb_neo_like"]["mbps"]
        )


@pytest.mark.benchmark(group="1-commit-sqlite")
def test_commit_sqlite_raw(benchmark, databases, sensor_values, bench_results):
    """Baseline: sqlite3 executemany INSERT into a bare table, WAL, synchronous=FULL."""
    n = len(sensor_values)

    def setup():
        conn = raw_sqlite_connect(databases.fresh_sqlite("raw_commit"))
        conn.execute("CREATE TABLE bare (id INTEGER PRIMARY KEY, value BLOB NOT NULL)")
        return (conn, sensor_values), {}

    def teardown(conn, values):
        assert conn.execute("SELECT COUNT(*), SUM(LENGTH(value)) FROM bare").fetchone() == (n, n * VALUE_BYTES)
        conn.close()
        databases.drop_sqlite("raw_commit")

    benchmark.pedantic(raw_sqlite_commit, setup=setup, teardown=teardown, rounds=ROUNDS, iterations=1)
    record(benchmark, bench_results, "commit_sqlite_raw", n * VALUE_BYTES)


@pytest.mark.benchmark(group="1-commit-sqlite")
def test_commit_sqlite_neostore(benchmark, databases, sensor_values, bench_results):
    """neostore on SQLite (WAL, synchronous=FULL)."""
    n = len(sensor_values)

    def setup():
        store = neostore.open(sqlite_url(databases.fresh_sqlite("neo_commit")))
        return (store, sensor_values), {}

    def teardown(store, values):
        counts = store.counts()
        assert (counts["obj"], counts["data"]) == (n, n)
        assert store.load(p64(n))[0] == values[-1]
        benchmark.extra_info["stored_bytes"] = store.value_size()
        store.close()
        databases.drop_sqlite("neo_commit")

    benchmark.pedantic(neostore_commit, setup=setup, teardown=teardown, rounds=ROUNDS, iterations=1)
    record(
        benchmark,
        bench_results,
        "commit_sqlite_neostore",
        n * VALUE_BYTES,
        baseline="commit_sqlite_raw",
        goal=GOAL_VS_RAW,
    )


# -- 3. re-commit of identical values (dedup hits) ---------------------------------------


def _recommit(benchmark, databases, sensor_values, bench_results, kind):
    n = len(sensor_values)
    state = {}

    def setup():
        if not state:  # once: a store that already holds every value
            if kind == "mariadb":
                url = databases.fresh_mariadb("b_neo_recommit")
            else:
                url = sqlite_url(databases.fresh_sqlite("neo_recommit"))
            state["store"] = store = neostore.open(url)
            neostore_commit(store, sensor_values)
            state["before"] = store.counts()
            if kind == "mariadb":
                databases.settle()
        else:
            os.sync()
        return (state["store"], sensor_values), {}

    try:
        benchmark.pedantic(neostore_commit, setup=setup, rounds=ROUNDS, iterations=1)
        counts = state["store"].counts()
        # Every round wrote n new revisions (new oids) and not one new data row.
        rounds = 1 if benchmark.disabled else ROUNDS  # --benchmark-disable runs it once
        assert counts["data"] == state["before"]["data"] == n
        assert counts["obj"] == n * (1 + rounds)
    finally:
        if "store" in state:
            state["store"].close()
    record(
        benchmark,
        bench_results,
        f"recommit_{kind}_neostore",
        n * VALUE_BYTES,
        baseline=f"commit_{kind}_neostore",
        goal=GOAL_RECOMMIT,
        ratio_name="times_first_commit",
    )


@pytest.mark.benchmark(group="3-recommit")
def test_recommit_mariadb_neostore(benchmark, databases, sensor_values, bench_results):
    """Re-commit every value (to new oids) into a MariaDB store that holds them all."""
    _recommit(benchmark, databases, sensor_values, bench_results, "mariadb")


@pytest.mark.benchmark(group="3-recommit")
def test_recommit_sqlite_neostore(benchmark, databases, sensor_values, bench_results):
    """Re-commit every value (to new oids) into a SQLite store that holds them all."""
    _recommit(benchmark, databases, sensor_values, bench_results, "sqlite")


# -- 4. reading back ----------------------------------------------------------------------


def raw_mariadb_read(conn, n) -> int:
    cur = conn.cursor()
    total = 0
    for i in range(n):
        cur.execute("SELECT value FROM bare WHERE id = ?", (i,))
        total += len(cur.fetchone()[0])
    return total


def raw_sqlite_read(conn, n) -> int:
    total = 0
    for i in range(n):
        total += len(conn.execute("SELECT value FROM bare WHERE id = ?", (i,)).fetchone()[0])
    return total


def neostore_read(store, oids) -> int:
    total = 0
    for oid in oids:
        value, _serial = store.load(oid)
        total += len(value)
    return total


def _sample_check(read_one, values) -> None:
    for i in range(0, len(values), 17):
        assert read_one(i) == values[i], f"value {i} reads back wrong"


@pytest.mark.benchmark(group="4-read-mariadb")
def test_read_mariadb_raw(benchmark, databases, sensor_values, bench_results):
    """Baseline: SELECT value FROM bare WHERE id=? for each value (mariadb connector)."""
    n = len(sensor_values)
    databases.fresh_mariadb("b_raw_read")
    loader = databases.mariadb_connect("b_raw_read")
    raw_mariadb_table(loader)
    raw_mariadb_commit(loader, sensor_values)
    loader.close()
    databases.settle()

    def setup():
        conn = databases.mariadb_connect("b_raw_read")
        conn.autocommit = True
        return (conn, n), {}

    result = benchmark.pedantic(
        raw_mariadb_read, setup=setup, teardown=lambda conn, n: conn.close(), rounds=ROUNDS, iterations=1
    )
    assert result == n * VALUE_BYTES
    conn = databases.mariadb_connect("b_raw_read")
    cur = conn.cursor()

    def read_one(i):
        cur.execute("SELECT value FROM bare WHERE id = ?", (i,))
        return cur.fetchone()[0]

    _sample_check(read_one, sensor_values)
    conn.close()
    databases.drop_mariadb("b_raw_read")
    record(benchmark, bench_results, "read_mariadb_raw", n * VALUE_BYTES)


@pytest.mark.benchmark(group="4-read-mariadb")
def test_read_mariadb_neostore(benchmark, databases, sensor_values, bench_results):
    """store.load of every value (SELECT with join, zstd decompression, blake3 check)."""
    n = len(sensor_values)
    url = databases.fresh_mariadb("b_neo_read")
    with neostore.open(url) as store:
        oids = neostore_commit(store, sensor_values)
    databases.settle()

    result = benchmark.pedantic(
        neostore_read,
        setup=lambda: ((neostore.open(url), oids), {}),
        teardown=lambda store, oids: store.close(),
        rounds=ROUNDS,
        iterations=1,
    )
    assert result == n * VALUE_BYTES
    with neostore.open(url) as store:
        _sample_check(lambda i: store.load(oids[i])[0], sensor_values)
    databases.drop_mariadb("b_neo_read")
    record(
        benchmark,
        bench_results,
        "read_mariadb_neostore",
        n * VALUE_BYTES,
        baseline="read_mariadb_raw",
        goal=GOAL_VS_RAW,
    )


@pytest.mark.benchmark(group="4-read-sqlite")
def test_read_sqlite_raw(benchmark, databases, sensor_values, bench_results):
    """Baseline: SELECT value FROM bare WHERE id=? for each value (sqlite3, default settings)."""
    _bench_raw_sqlite_read(benchmark, databases, sensor_values, bench_results, "read_sqlite_raw", mmap=False)


@pytest.mark.benchmark(group="4-read-sqlite")
def test_read_sqlite_raw_mmap(benchmark, databases, sensor_values, bench_results):
    """A stronger baseline: the same SELECTs on a memory-mapped connection, as neostore's readers use."""
    _bench_raw_sqlite_read(benchmark, databases, sensor_values, bench_results, "read_sqlite_raw_mmap", mmap=True)


def _bench_raw_sqlite_read(benchmark, databases, sensor_values, bench_results, name, *, mmap: bool) -> None:
    n = len(sensor_values)
    path = databases.fresh_sqlite(name)
    loader = raw_sqlite_connect(path)
    loader.execute("CREATE TABLE bare (id INTEGER PRIMARY KEY, value BLOB NOT NULL)")
    raw_sqlite_commit(loader, sensor_values)
    loader.close()
    os.sync()

    def connect():
        conn = raw_sqlite_connect(path)
        if mmap:
            conn.execute(f"PRAGMA mmap_size={1 << 36}")
        return (conn, n), {}

    result = benchmark.pedantic(
        raw_sqlite_read, setup=connect, teardown=lambda conn, n: conn.close(), rounds=ROUNDS, iterations=1
    )
    assert result == n * VALUE_BYTES
    conn = raw_sqlite_connect(path)
    _sample_check(lambda i: conn.execute("SELECT value FROM bare WHERE id = ?", (i,)).fetchone()[0], sensor_values)
    conn.close()
    databases.drop_sqlite(name)
    record(benchmark, bench_results, name, n * VALUE_BYTES)


@pytest.mark.benchmark(group="4-read-sqlite")
def test_read_sqlite_neostore(benchmark, databases, sensor_values, bench_results):
    """store.load of every value from a SQLite store."""
    n = len(sensor_values)
    url = sqlite_url(databases.fresh_sqlite("neo_read"))
    with neostore.open(url) as store:
        oids = neostore_commit(store, sensor_values)
    os.sync()

    result = benchmark.pedantic(
        neostore_read,
        setup=lambda: ((neostore.open(url), oids), {}),
        teardown=lambda store, oids: store.close(),
        rounds=ROUNDS,
        iterations=1,
    )
    assert result == n * VALUE_BYTES
    with neostore.open(url) as store:
        _sample_check(lambda i: store.load(oids[i])[0], sensor_values)
    databases.drop_sqlite("neo_read")
    record(
        benchmark, bench_results, "read_sqlite_neostore", n * VALUE_BYTES, baseline="read_sqlite_raw", goal=GOAL_VS_RAW
    )


# -- 4b. bulk reads through Store.load_many, where the store has it ----------------------------


def neostore_read_many(store, oids) -> int:
    return sum(len(value) for value, _serial in store.load_many(oids))


def _read_many(benchmark, databases, sensor_values, bench_results, kind):
    if not hasattr(neostore.Store, "load_many"):
        pytest.skip("this neostore has no Store.load_many")
    n = len(sensor_values)
    if kind == "mariadb":
        url = databases.fresh_mariadb("b_neo_read_many")
    else:
        url = sqlite_url(databases.fresh_sqlite("neo_read_many"))
    with neostore.open(url) as store:
        oids = neostore_commit(store, sensor_values)
    databases.settle() if kind == "mariadb" else os.sync()
    result = benchmark.pedantic(
        neostore_read_many,
        setup=lambda: ((neostore.open(url), oids), {}),
        teardown=lambda store, oids: store.close(),
        rounds=ROUNDS,
        iterations=1,
    )
    assert result == n * VALUE_BYTES
    with neostore.open(url) as store:
        got = list(store.load_many(oids[::17]))
        assert [value for value, _ in got] == sensor_values[::17]
    if kind == "mariadb":
        databases.drop_mariadb("b_neo_read_many")
    else:
        databases.drop_sqlite("neo_read_many")
    record(
        benchmark,
        bench_results,
        f"read_{kind}_neostore_load_many",
        n * VALUE_BYTES,
        baseline=f"read_{kind}_raw",
        goal=GOAL_VS_RAW,
    )


@pytest.mark.benchmark(group="4-read-mariadb")
def test_read_mariadb_neostore_load_many(benchmark, databases, sensor_values, bench_results):
    """store.load_many of every value (batched SELECTs, checks in worker threads)."""
    _read_many(benchmark, databases, sensor_values, bench_results, "mariadb")


@pytest.mark.benchmark(group="4-read-sqlite")
def test_read_sqlite_neostore_load_many(benchmark, databases, sensor_values, bench_results):
    """store.load_many of every value from a SQLite store."""
    _read_many(benchmark, databases, sensor_values, bench_results, "sqlite")


# -- 5. pack ------------------------------------------------------------------------------

# Runs in a fresh interpreter: its peak RSS is the packing process's alone,
# not the benchmark's (which holds the 1 GiB of generated data).
PACK_CHILD = r"""
import json, resource, sys, time
from windvane import neostore

def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

url, tid = sys.argv[1], bytes.fromhex(sys.argv[2])
store = neostore.open(url)
before = store.counts()
rss_before = status("VmRSS")
started = time.perf_counter()
stats = store.pack(tid)
seconds = time.perf_counter() - started
after = store.counts()
store.close()
print(json.dumps({
    "pack_seconds": seconds,
    # VmHWM: the peak RSS of this process's own memory. (ru_maxrss is no good
    # here: Linux folds the RSS of the forking parent into it at exec.)
    "peak_rss": status("VmHWM"),
    "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "rss_before_pack": rss_before,
    "revisions_deleted": stats.revisions_deleted,
    "data_deleted": stats.data_deleted,
    "batches": stats.batches,
    "disk_before": stats.disk_before,
    "disk_after": stats.disk_after,
    "counts_before": before,
    "counts_after": after,
}))
"""


def run_pack_child(url: str, tid: bytes) -> dict:
    """Pack in a fresh interpreter; psutil also samples its RSS every 5 ms as a cross-check."""
    proc = psutil.Popen(
        [sys.executable, "-c", PACK_CHILD, url, tid.hex()], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    sampled = 0
    stop = threading.Event()

    def sample():
        nonlocal sampled
        while not stop.is_set():
            try:
                sampled = max(sampled, proc.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=3000)
    finally:
        stop.set()
        sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"the pack process failed ({proc.returncode}):\n{err}")
    report = json.loads(out.strip().splitlines()[-1])
    report["sampled_peak_rss"] = sampled
    return report


def fill_half_dead(store, values) -> bytes:
    """Commit the first half of ``values`` to oids, then overwrite each oid once with
    the second half: ``len(values)`` revisions, half of them dead. Returns the last tid."""
    half = len(values) // 2
    oids = [p64(oid) for oid in store.new_oids(half)]
    serials = {}
    for batch in batches(half):
        txn = store.begin()
        for i in batch:
            txn.write(oids[i], None, values[i])
        txn.vote()
        tid = txn.finish()
        serials.update((oids[i], tid) for i in batch)
    for batch in batches(half):
        txn = store.begin()
        for i in batch:
            txn.write(oids[i], serials[oids[i]], values[half + i])
        txn.vote()
        tid = txn.finish()
    return tid


def _pack(benchmark, databases, sensor_values, bench_results, kind):
    n = len(sensor_values)
    half = n // 2

    def setup():
        if kind == "mariadb":
            url = databases.fresh_mariadb("b_neo_pack")
        else:
            url = sqlite_url(databases.fresh_sqlite("neo_pack"))
        with neostore.open(url) as store:
            tid = fill_half_dead(store, sensor_values)
        if kind == "mariadb":
            databases.settle()
        else:
            os.sync()
        return (url, tid), {}

    reports = []

    def target(url, tid):
        reports.append(run_pack_child(url, tid))

    def teardown(url, tid):
        with neostore.open(url) as store:
            counts = store.counts()
            assert (counts["obj"], counts["data"]) == (half, half)
            _sample_check(lambda i: store.load(p64(1 + i))[0], sensor_values[half:])
        if kind == "mariadb":
            databases.drop_mariadb("b_neo_pack")
        else:
            databases.drop_sqlite("neo_pack")

    benchmark.pedantic(target, setup=setup, teardown=teardown, rounds=PACK_ROUNDS, iterations=1)
    last = reports[-1]
    assert last["counts_before"]["obj"] == n and last["counts_after"]["obj"] == half
    assert last["revisions_deleted"] == n - half and last["data_deleted"] == n - half
    peak = max(max(r["peak_rss"], r["sampled_peak_rss"]) for r in reports)
    record(
        benchmark,
        bench_results,
        f"pack_{kind}_neostore",
        n * VALUE_BYTES,
        pack_seconds=min(r["pack_seconds"] for r in reports),
        peak_rss=peak,
        peak_rss_mb=peak / MB,
        sampled_peak_rss_mb=max(r["sampled_peak_rss"] for r in reports) / MB,
        rss_before_pack_mb=last["rss_before_pack"] / MB,
        rss_limit_mb=PACK_RSS_LIMIT / MB,
        rss_goal_met=peak < PACK_RSS_LIMIT,
        revisions_deleted=last["revisions_deleted"],
        data_deleted=last["data_deleted"],
        batches=last["batches"],
        counts_before=last["counts_before"],
        counts_after=last["counts_after"],
        disk_before_mb=last["disk_before"] / MB,
        disk_after_mb=last["disk_after"] / MB,
    )
    assert peak < PACK_RSS_LIMIT, f"pack peaked at {peak / MB:.0f} MB RSS"


@pytest.mark.benchmark(group="5-pack")
def test_pack_mariadb_neostore(benchmark, databases, sensor_values, bench_results):
    """Pack a 1 GiB MariaDB store with half of its revisions dead, in a separate process."""
    _pack(benchmark, databases, sensor_values, bench_results, "mariadb")


@pytest.mark.benchmark(group="5-pack")
def test_pack_sqlite_neostore(benchmark, databases, sensor_values, bench_results):
    """Pack a 1 GiB SQLite store with half of its revisions dead, in a separate process."""
    _pack(benchmark, databases, sensor_values, bench_results, "sqlite")


# -- 6. compression through ZODB's storage API ------------------------------------------------


@pytest.fixture(scope="module")
def value_kinds(sensor_values) -> dict[str, tuple[list[bytes], int, dict]]:
    """The cases of the compression benchmark: ``(values, values per transaction, store options)`` by name,
    ``TOTAL_BYTES`` each."""
    rng = np.random.default_rng(sensor_data.SEED)
    counts = sensor_data.counts_dataset(TOTAL_BYTES)
    noise = [rng.bytes(VALUE_BYTES) for _ in sensor_values]
    return {
        "sensor_counts": (counts, VALUES_PER_TXN, {}),
        "sensor_float32": (sensor_values, VALUES_PER_TXN, {}),
        "random": (noise, VALUES_PER_TXN, {}),
        "sensor_counts_one_per_txn": (counts, 1, {}),
        "sensor_counts_one_per_txn_2_threads": (counts, 1, {"compression_threads": 2}),
        "random_one_per_txn": (noise, 1, {}),
    }


def zodb_commit(storage, values, per_txn: int = VALUES_PER_TXN) -> None:
    """Store ``values`` to new oids through ZODB's storage API, ``per_txn`` per transaction."""
    for batch in batches(len(values), per_txn):
        txn = TransactionMetaData()
        storage.tpc_begin(txn)
        for i in batch:
            storage.store(storage.new_oid(), p64(0), values[i], "", txn)
        storage.tpc_vote(txn)
        storage.tpc_finish(txn)


def _timed(fn, *args) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


class CompressionPairs:
    """One fresh database per measurement (made and dropped untimed): raw INSERTs, or a NeoStorage."""

    def __init__(self, databases, engine: str):
        self.databases = databases
        self.engine = engine

    def raw(self, values, per_txn: int) -> float:
        """Seconds to INSERT ``values`` raw into a bare table, every byte checked afterwards."""
        n, dbs = len(values), self.databases
        if self.engine == "mariadb":
            dbs.fresh_mariadb("b_compress_raw")
            conn = dbs.mariadb_connect("b_compress_raw")
            raw_mariadb_table(conn)
            seconds = _timed(raw_mariadb_commit, conn, values, per_txn)
            cur = conn.cursor()
            cur.execute("SELECT COUNT(*), SUM(LENGTH(value)) FROM bare")
            assert cur.fetchone() == (n, n * VALUE_BYTES)
            conn.close()
            dbs.drop_mariadb("b_compress_raw")
        else:
            conn = raw_sqlite_connect(dbs.fresh_sqlite("compress_raw"))
            conn.execute("CREATE TABLE bare (id INTEGER PRIMARY KEY, value BLOB NOT NULL)")
            seconds = _timed(raw_sqlite_commit, conn, values, per_txn)
            assert conn.execute("SELECT COUNT(*), SUM(LENGTH(value)) FROM bare").fetchone() == (n, n * VALUE_BYTES)
            conn.close()
            dbs.drop_sqlite("compress_raw")
        return seconds

    def zodb(self, values, per_txn: int, options: dict, stored: dict[str, float], kind: str) -> float:
        """Seconds to commit ``values`` through a NeoStorage; the stored fraction goes in ``stored[kind]``."""
        dbs = self.databases
        if self.engine == "mariadb":
            url = dbs.fresh_mariadb("b_compress_zodb")
        else:
            url = sqlite_url(dbs.fresh_sqlite("compress_zodb"))
        storage = neostore.ZODBStorage(url, **options)
        try:
            seconds = _timed(zodb_commit, storage, values, per_txn)
            store = storage.backing_store
            assert store.counts()["data"] == len(values)
            assert storage.load(p64(len(values)))[0] == values[-1]  # oids start at 1
            stored[kind] = store.value_size() / (len(values) * VALUE_BYTES)
        finally:
            storage.close()
        if self.engine == "mariadb":
            dbs.drop_mariadb("b_compress_zodb")
        else:
            dbs.drop_sqlite("compress_zodb")
        return seconds


@pytest.mark.benchmark(group="6-compression-zodb")
@pytest.mark.parametrize("engine", ["mariadb", "sqlite"])
def test_compression_zodb_vs_raw(benchmark, databases, value_kinds, bench_results, engine):
    """ZODB's storage API vs raw INSERTs of the same bytes, for compressible and incompressible values."""
    rounds = 1 if benchmark.disabled else ROUNDS
    pairs, stored = CompressionPairs(databases, engine), {}
    nbytes = {kind: len(values) * VALUE_BYTES for kind, (values, _, _) in value_kinds.items()}
    targets = {}
    for kind, (values, per_txn, options) in value_kinds.items():
        targets[f"{kind}_raw"] = lambda values=values, per_txn=per_txn: nbytes_rate(
            len(values), pairs.raw(values, per_txn)
        )
        targets[f"{kind}_zodb"] = lambda values=values, per_txn=per_txn, options=options, kind=kind: nbytes_rate(
            len(values), pairs.zodb(values, per_txn, options, stored, kind)
        )
    rates: dict[str, list[float]] = {}
    benchmark.pedantic(lambda: rates.update(alternate(targets, rounds)), rounds=1, iterations=1)
    median = {name: float(np.median(r)) for name, r in rates.items()}
    info: dict = {"engine": engine, "rounds": rounds, "bytes_per_kind": nbytes, "mb_per_s": rates, "stored": stored}
    for kind in value_kinds:
        ratio = median[f"{kind}_zodb"] / median[f"{kind}_raw"]
        info[f"{kind}_zodb_over_raw"] = ratio
        info[f"{kind}_per_round"] = per_round(rates, f"{kind}_zodb", f"{kind}_raw")
        info[f"{kind}_goal_met"] = ratio >= GOAL_VS_RAW
    info["median_mb_per_s"] = median
    benchmark.extra_info.update(info)
    bench_results[f"compression_zodb_{engine}"] = info
    print(json.dumps(info, indent=1))


def nbytes_rate(count: int, seconds: float) -> float:
    """MB/s of ``count`` values moved in ``seconds``."""
    return count * VALUE_BYTES / seconds / MB
