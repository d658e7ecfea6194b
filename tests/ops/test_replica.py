"""Read replicas (windvane.ops.replica and `windvane db start --replica-of`).

Real servers, no mocks: a primary and its replicas are private mariadbd
servers in temporary directories, replicating over 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mariadb import connect, stop_test_server
from tests.replicas import start_replicated
from windvane.ops import mariadb_server as dbserver
from windvane.ops.mariadb_server import MariaDBServer
from windvane.ops.replica import ReplicaRole, read_role, replica_status, wait_for_primary

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.mariadb


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """Run this checkout's CLI in a new process, as the console script does."""
    return subprocess.run(
        [sys.executable, "-c", "import windvane; windvane.main()", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _rows(server: MariaDBServer, sql: str, database: str | None = None) -> list[tuple]:
    conn = server.connect(database)
    try:
        cur = conn.cursor()
        cur.execute(sql)
        return list(cur.fetchall())
    finally:
        conn.close()


def _execute(server: MariaDBServer, *statements: str) -> None:
    conn = server.connect()
    try:
        conn.autocommit = True
        cur = conn.cursor()
        for statement in statements:
            cur.execute(statement)
    finally:
        conn.close()


@pytest.fixture(scope="module")
def cli_pair() -> Iterator[tuple[Path, Path]]:
    """A server started by `windvane db start` and a replica of it started by `--replica-of`."""
    root = Path(tempfile.mkdtemp(prefix="wv-cli-rep-"))  # short: unix socket paths are limited
    primary, replica = root / "p", root / "r"
    try:
        started = _run("db", "start", "--datadir", str(primary))
        assert started.returncode == 0, started.stderr
        _execute(MariaDBServer(primary), "CREATE TABLE windvane.before_replication (n INT PRIMARY KEY)")
        _execute(MariaDBServer(primary), "INSERT INTO windvane.before_replication VALUES (1), (2)")
        started = _run("db", "start", "--datadir", str(replica), "--replica-of", str(primary))
        assert started.returncode == 0, started.stderr
        assert "making" in started.stderr and "a replication primary" in started.stderr
        assert started.stdout.strip().splitlines()[-1] == MariaDBServer(replica).url()
        yield primary, replica
    finally:
        for datadir in (replica, primary):
            stop_test_server(MariaDBServer(datadir))
        shutil.rmtree(root, ignore_errors=True)


def test_cli_replica_of_copies_replicates_is_read_only_and_reports(cli_pair):
    primary_dir, replica_dir = cli_pair
    primary, replica = MariaDBServer(primary_dir), MariaDBServer(replica_dir)
    # Rows from before the primary had a binary log come with the copy.
    assert _rows(replica, "SELECT n FROM windvane.before_replication ORDER BY n") == [(1,), (2,)]

    _execute(
        primary,
        "CREATE DATABASE app",
        "CREATE TABLE app.t (id INT PRIMARY KEY, v BLOB)",
        "INSERT INTO app.t VALUES (1, 'one'), (2, 'two')",
        "CREATE USER app@localhost",
        "GRANT ALL ON app.* TO app@localhost",
    )
    wait_for_primary(replica, primary)
    assert _rows(replica, "SELECT id, v FROM app.t ORDER BY id") == [(1, b"one"), (2, b"two")]

    # A client that is not root cannot write on the replica.
    import mariadb

    conn = mariadb.connect(user="app", unix_socket=replica.socket, database="app")
    try:
        with pytest.raises(mariadb.Error, match="read-only"):
            conn.cursor().execute("INSERT INTO t VALUES (3, 'three')")
    finally:
        conn.close()
    assert _rows(replica, "SELECT @@read_only, @@gtid_strict_mode") == [(1, 1)]

    status = _run("db", "status", "--datadir", str(replica_dir))
    assert status.returncode == 0, status.stderr
    port = read_role(primary_dir).port
    for line in (
        "role:    read-only replica",
        f"replica of:            127.0.0.1:{port}",
        "Slave_IO_Running:      Yes",
        "Slave_SQL_Running:     Yes",
        "Seconds_Behind_Master: 0",
    ):
        assert line in status.stdout, status.stdout
    (position,) = _rows(primary, "SELECT @@gtid_binlog_pos")[0]
    assert f"gtid_slave_pos:        {position}" in status.stdout
    primary_status = _run("db", "status", "--datadir", str(primary_dir))
    assert (
        f"role:    replication primary (binary log on, replicas connect to 127.0.0.1:{port})" in primary_status.stdout
    )

    # Starting the replica again only starts it; other roles and ports are refused with exit code 2.
    again = _run("db", "start", "--datadir", str(replica_dir), "--replica-of", str(primary_dir))
    assert again.returncode == 0, again.stderr
    for args, message in (
        (("--datadir", str(primary_dir), "--replica-of", str(replica_dir)), "is a replication primary"),
        (("--datadir", str(primary_dir), "--port", str(port + 1)), f"start it without --port or with --port {port}"),
        (("--datadir", str(replica_dir.parent / "new"), "--replica-of", str(REPO)), "is neither the data directory"),
    ):
        refused = _run("db", "start", *args)
        assert refused.returncode == 2, refused.stderr
        assert message in refused.stderr and "Traceback" not in refused.stderr
    assert not (replica_dir.parent / "new").exists()


def test_replica_killed_and_restarted_catches_up_without_losing_or_repeating_a_row(cli_pair):
    primary_dir, replica_dir = cli_pair
    primary, replica = MariaDBServer(primary_dir), MariaDBServer(replica_dir)
    # No unique key on seq: a transaction applied twice would show as a repeated seq.
    _execute(primary, "CREATE DATABASE crash", "CREATE TABLE crash.t (id BIGINT AUTO_INCREMENT PRIMARY KEY, seq INT)")
    total = 600
    applied_some, wrote_first = threading.Event(), threading.Event()

    def write() -> None:
        conn = primary.connect("crash")
        try:
            conn.autocommit = True
            cur = conn.cursor()
            for seq in range(total):
                cur.execute("INSERT INTO t (seq) VALUES (?)", (seq,))
                wrote_first.set()
                if seq == total // 3:
                    applied_some.wait(60)
        finally:
            conn.close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        # The replica catches up to the primary's position once a row is committed there.
        assert wrote_first.wait(60)
        wait_for_primary(replica, primary, timeout=60)
        assert _rows(replica, "SELECT COUNT(*) FROM crash.t")[0][0] > 0
    finally:
        applied_some.set()
    replica.kill()  # while the primary goes on writing
    restarted = _run("db", "start", "--datadir", str(replica_dir))
    assert restarted.returncode == 0, restarted.stderr
    writer.join(120)
    assert not writer.is_alive()

    wait_for_primary(replica, primary)
    assert _rows(replica, "SELECT COUNT(*), COUNT(DISTINCT seq), MIN(seq), MAX(seq) FROM crash.t") == [
        (total, total, 0, total - 1)
    ]
    state = replica_status(replica)
    assert (state.io_running, state.sql_running, state.last_error) == ("Yes", "Yes", "")


@pytest.mark.skipif(not dbserver.rocksdb_installed(), reason="mariadb-plugin-rocksdb not installed")
def test_myrocks_replicas_with_and_without_per_engine_positions():
    servers = start_replicated(replicas=2, gtid_pos_auto_engines=[None, ""])
    try:
        primary, (per_engine, innodb_only) = servers.primary, servers.replicas
        assert read_role(per_engine.datadir) == ReplicaRole(
            server_id=read_role(per_engine.datadir).server_id,
            host="127.0.0.1",
            port=read_role(primary.datadir).port,
            gtid_pos_auto_engines="innodb,rocksdb",  # the default where MyRocks is installed
            seeded=True,
        )
        _execute(
            primary,
            "CREATE TABLE windvane.obj (oid BIGINT, tid BIGINT, value BLOB, PRIMARY KEY (oid, tid)) ENGINE=ROCKSDB",
        )
        conn = primary.connect("windvane")
        try:
            cur = conn.cursor()
            for tid in range(1, 201):  # many small commits of a few rows, as a store's ingestion makes
                cur.executemany(
                    "INSERT INTO obj VALUES (?, ?, ?)",
                    [(oid, tid, hashlib.sha256(b"%d-%d" % (oid, tid)).digest() * 8) for oid in range(3)],
                )
                conn.commit()
        finally:
            conn.close()
        engines_sql = (
            "SELECT table_name, engine FROM information_schema.tables "
            "WHERE table_schema = 'mysql' AND table_name LIKE 'gtid_slave_pos%' ORDER BY table_name"
        )
        content_sql = "SELECT oid, tid, SHA2(value, 256) FROM windvane.obj ORDER BY oid, tid"
        expected = _rows(primary, content_sql)
        assert len(expected) == 600
        for replica in (per_engine, innodb_only):
            wait_for_primary(replica, primary)
            assert _rows(replica, content_sql) == expected
        assert _rows(per_engine, "SELECT @@gtid_pos_auto_engines") == [("InnoDB,ROCKSDB",)]
        assert _rows(per_engine, engines_sql) == [("gtid_slave_pos", "InnoDB"), ("gtid_slave_pos_ROCKSDB", "ROCKSDB")]
        assert _rows(innodb_only, "SELECT @@gtid_pos_auto_engines") == [("",)]
        assert _rows(innodb_only, engines_sql) == [("gtid_slave_pos", "InnoDB")]
        # The position of the ROCKSDB transactions is kept in the ROCKSDB table on the one, in InnoDB on the other.
        assert _rows(per_engine, "SELECT COUNT(*) > 0 FROM mysql.gtid_slave_pos_ROCKSDB") == [(1,)]
    finally:
        servers.stop()


def test_replicated_url_names_the_primary_and_its_replicas(replicated_url, replicated_servers):
    url, replicas = replicated_url
    primary = replicated_servers.primary
    database = "t_test_replicated_url_names_the_primary_and_its_replicas"
    assert replicas == [replica.socket for replica in replicated_servers.replicas]
    assert replicated_url.primary_url == f"mariadb://root@/{database}?unix_socket={primary.socket}"
    assert url == f"{replicated_url.primary_url}&replicas={','.join(replicas)}"
    conn = connect(replicated_url.primary_url, database)
    try:
        conn.autocommit = True
        conn.cursor().execute("CREATE TABLE t (n INT PRIMARY KEY)")
        conn.cursor().execute("INSERT INTO t VALUES (7)")
    finally:
        conn.close()
    for replica in replicated_servers.replicas:
        wait_for_primary(replica, primary)
        assert _rows(replica, "SELECT n FROM t", database) == [(7,)]


def test_replica_of_a_url_over_tcp_or_the_primary_socket(cli_pair):
    primary_dir, _ = cli_pair
    primary = MariaDBServer(primary_dir)
    port = read_role(primary_dir).port
    root = Path(tempfile.mkdtemp(prefix="wv-url-rep-"))  # short: unix socket paths are limited
    by_tcp, by_socket = root / "tcp", root / "sock"
    try:
        # A primary given by URL is copied and followed as that URL's user; its socket's URL is its directory.
        for datadir, url in (
            (by_tcp, f"mariadb://root@127.0.0.1:{port}/windvane"),
            (by_socket, primary.url()),
        ):
            started = _run("db", "start", "--datadir", str(datadir), "--replica-of", url)
            assert started.returncode == 0, started.stderr
        assert read_role(by_tcp).primary == read_role(by_socket).primary == f"127.0.0.1:{port}"
        _execute(
            primary,
            "CREATE DATABASE by_url",
            "CREATE TABLE by_url.t (n INT PRIMARY KEY)",
            "INSERT INTO by_url.t VALUES (5)",
        )
        for datadir in (by_tcp, by_socket):
            replica = MariaDBServer(datadir)
            wait_for_primary(replica, primary)
            assert _rows(replica, "SELECT n FROM by_url.t") == [(5,)]
            assert replica_status(replica).sql_running == "Yes"

        # Not a URL replicas can reach: a socket outside any data directory.
        refused = _run(
            "db", "start", "--datadir", str(root / "no"), "--replica-of", "mariadb://root@/db?unix_socket=/run/x.sock"
        )
        assert refused.returncode == 2 and "replicas connect to their primary over TCP" in refused.stderr
    finally:
        for datadir in (by_tcp, by_socket):
            stop_test_server(MariaDBServer(datadir))
        shutil.rmtree(root, ignore_errors=True)


def test_a_replica_whose_copy_never_completed_is_not_started(tmp_path):
    datadir = tmp_path / "half"
    datadir.mkdir()
    (datadir / "replication.json").write_text(
        '{"type": "replica", "server_id": 9, "host": "127.0.0.1", "port": 3307, '
        '"gtid_pos_auto_engines": "", "seeded": false}'
    )
    refused = _run("db", "start", "--datadir", str(datadir))
    assert refused.returncode == 2, refused.stderr
    assert "whose copy of the primary never completed; remove the directory" in refused.stderr
    assert MariaDBServer(datadir).pid is None and not (datadir / "mysql").exists()
