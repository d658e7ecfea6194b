"""How long a read replica takes to apply a MyRocks store's ingestion, with its replication position kept in
InnoDB (``gtid_pos_auto_engines`` empty: MariaDB's default) or in the engine of each transaction
(``gtid_pos_auto_engines=innodb,rocksdb``: what ``windvane db start --replica-of`` sets where MyRocks is
installed).

One primary and two replicas of it, made by :mod:`windvane.ops.replica` (the code of ``windvane db start
--replica-of``), durability on everywhere: ``sync_binlog=1`` on the primary,
``innodb_flush_log_at_trx_commit=1`` and ``rocksdb_flush_log_at_trx_commit=1`` on all three, and the
replicas' position committed with each transaction they apply (``relay_log_recovery=ON``; with GTIDs the
position in ``mysql.gtid_slave_pos`` is what makes a replica crash-safe, not ``sync_master_info``). The
replicas differ in ``gtid_pos_auto_engines`` only.

A round: both replicas stop applying (``STOP SLAVE SQL_THREAD``, still fetching the binary log); the primary
commits transactions into ROCKSDB tables laid out like a store's, of one of two shapes (`SHAPES`): ``small``,
``COMMITS`` transactions of a transaction row, three object revisions and three values of 1-8 KiB (a neostore
commit of a few rows of a stream, as a trickle of small chunks makes), or ``large``, a quarter as many
transactions of 48 revisions and values each (a group commit of a busy ``windvane serve``; four times the
bytes, so that a round lasts long enough to time). Once both relay logs hold all of it, each replica in turn
(the order alternating from round to round) is timed from ``START SLAVE SQL_THREAD`` until
``MASTER_GTID_WAIT`` sees the primary's ``gtid_binlog_pos`` applied. Both apply the same binary log, one after
the other, so neither competes with the other for the disk.

Recorded in ``extra_info`` for each shape: the seconds of each round for each replica, their medians,
transactions applied a second, the ratio (InnoDB position / per-engine position) of the medians and the
median of the rounds' ratios, and the InnoDB fsyncs and RocksDB log syncs each replica made a transaction
applied. ``WINDVANE_BENCH_REPLICATION_COMMITS`` sets the size (default 2000), ``WINDVANE_BENCH_ROUNDS`` the
rounds (default 3).

Run:

    .venv/bin/python -m pytest benchmarks/test_replication_engines.py -p no:cacheprovider \\
        --benchmark-enable --benchmark-only --benchmark-json=/tmp/replication.json
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mariadb import stop_test_server
from windvane.ops.mariadb_server import MariaDBServer, rocksdb_installed
from windvane.ops.replica import make_primary, start_replica, wait_for_primary

COMMITS = int(os.environ.get("WINDVANE_BENCH_REPLICATION_COMMITS", "2000"))

#: Each shape of load: (transactions, revisions and values in each).
SHAPES = {"small": (COMMITS, 3), "large": (COMMITS // 4, 48)}
ROUNDS = int(os.environ.get("WINDVANE_BENCH_ROUNDS", "3"))

# The shipped configuration (durability included), with smaller memory and redo log: three servers share the
# machine, and the load is small.
OVERRIDES: dict[str, str | None] = {
    "innodb_buffer_pool_size": "256M",
    "innodb_log_file_size": "256M",
    "loose-rocksdb_flush_log_at_trx_commit": "1",
}

#: The replicas measured, by their gtid_pos_auto_engines.
VARIANTS = {"innodb_position": "", "per_engine_position": "innodb,rocksdb"}

SCHEMA = (
    "CREATE TABLE bench.trans (tid BIGINT PRIMARY KEY, user VARBINARY(255), description BLOB) ENGINE=ROCKSDB",
    "CREATE TABLE bench.obj (oid BIGINT, tid BIGINT, hash BINARY(32), PRIMARY KEY (oid, tid)) ENGINE=ROCKSDB",
    "CREATE TABLE bench.data (hash BINARY(32) PRIMARY KEY, value LONGBLOB) ENGINE=ROCKSDB",
)


class Replicated:
    """The primary and the two replicas, in a short temporary directory (unix socket paths are limited)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="wvb-rep-", dir="/tmp"))
        self.primary = MariaDBServer(self.root / "p")
        self.replicas: dict[str, MariaDBServer] = {}
        self.next_tid = 1

    def start(self) -> None:
        self.primary = make_primary(self.root / "p", overrides=OVERRIDES, timeout=300)
        for name, engines in VARIANTS.items():
            self.replicas[name] = start_replica(
                self.root / name,
                str(self.root / "p"),
                overrides=OVERRIDES,
                primary_overrides=OVERRIDES,
                gtid_pos_auto_engines=engines,
                timeout=300,
            )
        self.execute(self.primary, "CREATE DATABASE bench", *SCHEMA)

    def stop(self) -> None:
        for server in [*self.replicas.values(), self.primary]:
            stop_test_server(server)
        shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def execute(server: MariaDBServer, *statements: str) -> list[tuple]:
        conn = server.connect()
        try:
            conn.autocommit = True
            cur = conn.cursor()
            rows: list[tuple] = []
            for statement in statements:
                cur.execute(statement)
                rows = list(cur.fetchall()) if cur.description else []
            return rows
        finally:
            conn.close()

    def load(self, commits: int, objects: int) -> str:
        """Commit ``commits`` store-like transactions of ``objects`` values on the primary; return its GTID
        position after."""
        rng = random.Random(self.next_tid)
        conn = self.primary.connect("bench")
        try:
            cur = conn.cursor()
            for tid in range(self.next_tid, self.next_tid + commits):
                values = [rng.randbytes(rng.randrange(1024, 8192)) for _ in range(objects)]
                hashes = [rng.randbytes(32) for _ in values]
                cur.execute("INSERT INTO trans VALUES (?, ?, ?)", (tid, b"windvane serve", b"forward chunk"))
                cur.executemany("INSERT INTO obj VALUES (?, ?, ?)", [(oid, tid, h) for oid, h in enumerate(hashes)])
                cur.executemany("INSERT INTO data VALUES (?, ?)", list(zip(hashes, values, strict=True)))
                conn.commit()
            self.next_tid += commits
        finally:
            conn.close()
        ((position,),) = self.execute(self.primary, "SELECT @@gtid_binlog_pos")
        return str(position)

    def wait_fetched(self, replica: MariaDBServer, position: str, timeout: float = 300) -> None:
        """Wait until ``replica``'s relay log holds the primary's binary log up to ``position`` (untimed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            conn = replica.connect()
            try:
                cur = conn.cursor(dictionary=True)
                cur.execute("SHOW SLAVE STATUS")
                if cur.fetchone()["Gtid_IO_Pos"] == position:
                    return
            finally:
                conn.close()
            time.sleep(0.1)
        raise TimeoutError(f"{replica.datadir} did not fetch {position} in {timeout} s")

    def syncs(self, replica: MariaDBServer) -> dict[str, int]:
        """The replica's counts of InnoDB fsyncs and of RocksDB write-ahead log syncs so far."""
        rows = self.execute(
            replica, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_data_fsyncs', 'Rocksdb_wal_synced')"
        )
        return {str(name): int(value) for name, value in rows}

    def apply(self, name: str) -> tuple[float, dict[str, int]]:
        """Seconds ``name`` takes to apply what its relay log holds, and the syncs it made meanwhile."""
        replica = self.replicas[name]
        os.sync()
        before = self.syncs(replica)
        started = time.perf_counter()
        self.execute(replica, "START SLAVE SQL_THREAD")
        wait_for_primary(replica, self.primary, timeout=3600)
        spent = time.perf_counter() - started
        return spent, {key: value - before[key] for key, value in self.syncs(replica).items()}

    def round(self, order: list[str], commits: int, objects: int) -> dict[str, tuple[float, dict[str, int]]]:
        for replica in self.replicas.values():
            self.execute(replica, "STOP SLAVE SQL_THREAD")
        position = self.load(commits, objects)
        for replica in self.replicas.values():
            self.wait_fetched(replica, position)
        return {name: self.apply(name) for name in order}


@pytest.fixture(scope="module")
def replicated() -> Iterator[Replicated]:
    if not rocksdb_installed():
        pytest.skip("mariadb-plugin-rocksdb is not installed")
    servers = Replicated()
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


@pytest.mark.parametrize("shape", list(SHAPES))
def test_replica_apply_myrocks_position_in_innodb_vs_per_engine(benchmark, replicated: Replicated, shape: str) -> None:
    commits, objects = SHAPES[shape]
    rounds = 1 if benchmark.disabled else ROUNDS
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    syncs: dict[str, list[dict[str, int]]] = {name: [] for name in VARIANTS}

    def run() -> None:
        for r in range(rounds):
            order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
            for name, (spent, synced) in replicated.round(order, commits, objects).items():
                seconds[name].append(spent)
                syncs[name].append(synced)

    benchmark.pedantic(run, rounds=1, iterations=1)
    count = "SELECT (SELECT COUNT(*) FROM bench.trans), (SELECT COUNT(*) FROM bench.data)"
    for name, replica in replicated.replicas.items():  # untimed: both hold what the primary holds
        assert replicated.execute(replica, count) == replicated.execute(replicated.primary, count), name
    median = {name: statistics.median(values) for name, values in seconds.items()}
    benchmark.extra_info.update(
        commits=commits,
        objects_per_commit=objects,
        rounds=rounds,
        seconds=seconds,
        median_s=median,
        transactions_per_s={name: commits / value for name, value in median.items()},
        innodb_over_per_engine=median["innodb_position"] / median["per_engine_position"],
        median_round_innodb_over_per_engine=statistics.median(
            a / b for a, b in zip(seconds["innodb_position"], seconds["per_engine_position"], strict=True)
        ),
        per_round_innodb_over_per_engine=[
            a / b for a, b in zip(seconds["innodb_position"], seconds["per_engine_position"], strict=True)
        ],
        syncs_per_transaction={
            name: {key: sum(r[key] for r in rounds_synced) / (commits * rounds) for key in rounds_synced[0]}
            for name, rounds_synced in syncs.items()
        },
        overrides=OVERRIDES,
    )
