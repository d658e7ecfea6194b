"""The private MariaDB server (windvane.ops.mariadb_server) and the `windvane db` CLI.

Real servers, no mocks: each test starts mariadbd in its own temporary
directory with the suite's small settings (tests.mariadb).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import click.testing
import psutil
import pytest

import windvane.ops.mariadb_programs
from tests.mariadb import TEST_OVERRIDES, connect, fresh_database, start_test_server, stop_test_server
from windvane.cli import cli as windvane_cli
from windvane.ops import mariadb_server as dbserver
from windvane.ops.mariadb_server import MariaDBServer, ServerConfigError, ServerStartError, render_config

ROCKSDB_INSTALLED = dbserver.rocksdb_installed()

BLOB = os.urandom(2 * 1024 * 1024 + 7)  # a 2 MiB BLOB, the store's typical upload


@pytest.fixture
def server(tmp_path):
    """A running test server; stopped (or killed) afterwards whatever the test did."""
    srv, url = start_test_server(tmp_path)
    yield srv, url
    stop_test_server(srv, remove=True)


def _scalar(conn, sql, *args):
    cur = conn.cursor()
    cur.execute(sql, args)
    return cur.fetchone()


# -- lifecycle ---------------------------------------------------------------


@pytest.mark.mariadb
def test_start_status_settings_and_idempotent_start(server):
    srv, url = server
    assert url == srv.url() == f"mariadb://root@/windvane?unix_socket={srv.datadir}/mysqld.sock"
    status = srv.status()
    assert status.running and status.pid == srv.pid and status.pid > 0
    assert status.socket == srv.socket and status.url == url and status.port is None

    conn = connect(url, "windvane")  # start() created the windvane database
    try:
        packet, flush_commit, flush_method, pool, networking = _scalar(
            conn,
            "SELECT @@max_allowed_packet, @@innodb_flush_log_at_trx_commit, "
            "@@innodb_flush_method, @@innodb_buffer_pool_size, @@skip_networking",
        )
        engines = {row[0].upper(): row[1] for row in _rows(conn, "SHOW ENGINES")}
    finally:
        conn.close()
    # Shipped settings are in force, and the test override too.
    assert packet == 1024**3
    assert flush_commit == 1
    assert flush_method == "O_DIRECT"
    assert pool == 256 * 1024**2
    assert networking == 1
    if ROCKSDB_INSTALLED:
        assert engines.get("ROCKSDB") in ("YES", "DEFAULT")

    # Starting a running server only returns its URL.
    pid = srv.pid
    assert srv.start() == url
    assert srv.pid == pid
    # ...also from another object on the same directory, as the CLI does.
    assert MariaDBServer(srv.datadir).start() == url


def _rows(conn, sql):
    cur = conn.cursor()
    cur.execute(sql)
    return cur.fetchall()


@pytest.mark.crash
@pytest.mark.mariadb
@pytest.mark.parametrize(
    "engine",
    [
        "InnoDB",
        pytest.param(
            "ROCKSDB",
            marks=pytest.mark.skipif(not ROCKSDB_INSTALLED, reason="mariadb-plugin-rocksdb not installed"),
        ),
    ],
)
def test_kill_9_keeps_committed_data(tmp_path, engine):
    import mariadb

    srv, url = start_test_server(tmp_path)
    try:
        conn = connect(url, "windvane")
        conn.autocommit = False
        cur = conn.cursor()
        cur.execute(f"CREATE TABLE blobs (id INT PRIMARY KEY, sha CHAR(64), v LONGBLOB) ENGINE={engine}")
        cur.execute("INSERT INTO blobs VALUES (?, ?, ?)", (1, hashlib.sha256(BLOB).hexdigest(), BLOB))
        conn.commit()  # acknowledged: must survive the kill
        cur.execute("INSERT INTO blobs VALUES (?, ?, ?)", (2, "", b"not committed"))
        # (no commit: must be rolled back by crash recovery)

        old_pid = srv.pid
        assert srv.kill() is True
        with contextlib.suppress(mariadb.Error):
            conn.close()  # the server is gone; just release the handle
        status = srv.status()
        assert not status.running and status.pid is None and status.url is None
        # kill -9 leaves a stale pid file behind; it must not get in the way.
        assert srv.pid_file.exists()

        assert srv.start() == url
        assert srv.pid != old_pid
        conn = connect(url, "windvane")
        try:
            rows = _rows(conn, "SELECT id, sha, v FROM blobs ORDER BY id")
        finally:
            conn.close()
        assert [r[0] for r in rows] == [1]
        assert rows[0][1] == hashlib.sha256(bytes(rows[0][2])).hexdigest()
        assert bytes(rows[0][2]) == BLOB

        assert srv.stop() is True
        status = srv.status()
        assert not status.running and status.pid is None
        assert srv.stop() is False  # stopping a stopped server is a no-op
        assert srv.kill() is False
    finally:
        stop_test_server(srv, remove=True)


@pytest.mark.mariadb
def test_servers_initialised_at_the_same_moment_all_start_and_keep_their_temporary_files(tmp_path):
    # At start a server removes the temporary table files it finds in its tmpdir: in a shared /tmp those
    # of another server being initialised beside it, whose bootstrap then aborts.
    servers = [
        MariaDBServer(Path(tempfile.mkdtemp(prefix="wv-tmp-")) / "db", overrides=TEST_OVERRIDES) for _ in range(4)
    ]
    failures: list[str] = []

    def start(server: MariaDBServer) -> None:
        try:
            server.start(timeout=120)
        except ServerStartError as exc:
            failures.append(str(exc))

    threads = [threading.Thread(target=start, args=(server,)) for server in servers]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, "\n".join(failures)
        for server in servers:
            conn = connect(server.url())
            try:
                cur = conn.cursor()
                cur.execute("SELECT @@tmpdir")
                assert cur.fetchone()[0].rstrip("/") == str(server.datadir)
            finally:
                conn.close()
    finally:
        for server in servers:
            stop_test_server(server)
            shutil.rmtree(server.datadir.parent, ignore_errors=True)


@pytest.mark.mariadb
def test_stale_pid_file_of_another_process(tmp_path):
    srv, url = start_test_server(tmp_path)
    try:
        srv.stop()
        # A pid file naming a live process that is not mariadbd (this one),
        # as after a reboot that reused the pid.
        srv.pid_file.write_text(f"{os.getpid()}\n")
        assert not srv.status().running
        assert srv.start() == url
        assert srv.pid != os.getpid()
    finally:
        stop_test_server(srv, remove=True)


@pytest.mark.mariadb
def test_fresh_database(server):
    srv, url = server
    url1 = fresh_database(url, "wv_fresh")
    assert url1 == f"mariadb://root@/wv_fresh?unix_socket={srv.socket}"
    conn = connect(url1, "wv_fresh")
    try:
        conn.cursor().execute("CREATE TABLE t (i INT)")
    finally:
        conn.close()
    assert fresh_database(url1, "wv_fresh") == url1
    conn = connect(url1, "wv_fresh")
    try:
        assert _rows(conn, "SHOW TABLES") == []
    finally:
        conn.close()
    # Options such as the engine are carried over.
    assert fresh_database(url + "&engine=rocksdb", "wv_other").endswith("&engine=rocksdb")
    with pytest.raises(ServerConfigError):
        fresh_database(url, "bad name; DROP")


# -- errors --------------------------------------------------------------------


@pytest.mark.mariadb
def test_datadir_that_is_a_file(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(ServerConfigError, match="not a directory"):
        MariaDBServer(path).start()


@pytest.mark.mariadb
def test_datadir_with_foreign_files_is_not_initialised(tmp_path):
    (tmp_path / "precious.txt").write_text("mine")
    with pytest.raises(ServerConfigError, match="not empty"):
        MariaDBServer(tmp_path).start()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.txt"]  # nothing written


@pytest.mark.mariadb
def test_failed_start_quotes_error_log(tmp_path):
    srv = MariaDBServer(tmp_path / "db", overrides={**TEST_OVERRIDES, "no_such_option": "1"})
    try:
        with pytest.raises(ServerStartError, match=r"(?s)exited during startup.*unknown variable 'no_such_option=1'"):
            srv.start(timeout=60)
        assert not srv.status().running
    finally:
        stop_test_server(srv, remove=True)


def test_bad_overrides_rejected(tmp_path):
    with pytest.raises(ServerConfigError):
        MariaDBServer(tmp_path, overrides={"innodb_buffer_pool_size": "1G\nskip-grant-tables"})
    with pytest.raises(ServerConfigError):
        MariaDBServer(tmp_path, overrides={"bad name": "1"})
    with pytest.raises(ServerConfigError):
        MariaDBServer(tmp_path, port=70000)


def test_render_config_overrides():
    shipped = "[mariadbd]\n# why\ninnodb_buffer_pool_size = 1G\nmax_allowed_packet = 1G\nskip-name-resolve\n"
    text = render_config(
        shipped,
        [("datadir", "/d"), ("skip-networking", None)],
        {"innodb-buffer-pool-size": "256M", "max_allowed_packet": None, "innodb_io_capacity": "100"},
    )
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines == [
        "[mariadbd]",
        "innodb-buffer-pool-size = 256M",
        "skip-name-resolve",
        "[mariadbd]",
        "innodb_io_capacity = 100",
        "datadir = /d",
        "skip-networking",
    ]
    assert "# why" in text  # the explanation stays next to the setting


# -- CLI -----------------------------------------------------------------------


REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run this checkout's CLI in a new process, as the console script does."""
    return subprocess.run(
        [sys.executable, "-c", "import windvane; windvane.main()", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.mariadb
def test_cli_start_status_stop(tmp_path):
    datadir = tmp_path / "db"
    try:
        started = _run("db", "start", "--datadir", str(datadir))
        assert started.returncode == 0, started.stderr
        url = started.stdout.strip().splitlines()[-1]
        assert url == f"mariadb://root@/windvane?unix_socket={datadir}/mysqld.sock"

        status = _run("db", "status", "--datadir", str(datadir))
        assert status.returncode == 0, status.stderr
        assert "running: yes" in status.stdout
        assert f"url:     {url}" in status.stdout
        pid = MariaDBServer(datadir).pid
        assert f"pid:     {pid}" in status.stdout

        conn = connect(url, "windvane")
        conn.close()

        again = _run("db", "start", "--datadir", str(datadir))
        assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == url

        stopped = _run("db", "stop", "--datadir", str(datadir))
        assert stopped.returncode == 0, stopped.stderr
        status = _run("db", "status", "--datadir", str(datadir))
        assert status.returncode == 1
        assert "running: no" in status.stdout
        assert MariaDBServer(datadir).pid is None
    finally:
        stop_test_server(MariaDBServer(datadir), remove=True)


@pytest.mark.mariadb
def test_cli_bad_datadir_exits_2(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    for command in ("start", "stop", "status"):
        result = _run("db", command, "--datadir", str(path))
        assert result.returncode == 2, (command, result)
        assert "is a file" in result.stderr
        assert result.stdout == ""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x")
    result = _run("db", "start", "--datadir", str(tmp_path / "notes"))
    assert result.returncode == 2
    assert "is not empty and is not a MariaDB data directory" in result.stderr


@pytest.mark.mariadb
def test_cli_mariadbd_missing_exits_2(tmp_path, monkeypatch):
    # No mariadbd anywhere: an empty PATH and no fallback directories.
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(windvane.ops.mariadb_programs, "SEARCH_DIRS", ())
    result = click.testing.CliRunner().invoke(windvane_cli, ["db", "start", "--datadir", str(tmp_path / "db")])
    assert result.exit_code == 2
    assert "apt-get install mariadb-server" in result.output


def _mariadbd_processes(datadir: Path) -> list[int]:
    """Pids of live mariadbd processes started on ``datadir``'s configuration (the process list)."""
    wanted = f"--defaults-file={datadir}/my.cnf"
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if wanted in (proc.info["cmdline"] or []) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc.pid)
    return found


def _assert_no_server_left(datadir: Path) -> None:
    assert MariaDBServer(datadir).pid is None
    assert not (datadir / "mysqld.pid").exists()
    assert _mariadbd_processes(datadir) == []


def test_cli_start_without_connector_exits_2_and_starts_nothing(tmp_path):
    # The connector made unimportable the way a missing install makes it:
    # a `mariadb` package first on the path that fails to import.
    shadow = tmp_path / "no-connector" / "mariadb"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'mariadb'\", name='mariadb')\n")
    datadir = tmp_path / "db"
    env = {**os.environ, "PYTHONPATH": str(shadow.parent)}
    try:
        result = _run("db", "start", "--datadir", str(datadir), env=env)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert "Error: the MariaDB connector (Python package mariadb) cannot be imported" in result.stderr
        assert "pip install 'windvane[mariadb]'" in result.stderr
        assert result.stdout == ""
        assert not datadir.exists()  # checked before anything was made or started
        _assert_no_server_left(datadir)
    finally:
        stop_test_server(MariaDBServer(datadir), remove=True)


@pytest.fixture(scope="module")
def password_datadir(tmp_path_factory):
    """An initialised data directory whose root has a password: windvane can start it, not use it."""
    srv, url = start_test_server(tmp_path_factory.mktemp("password"))
    try:
        conn = connect(url)
        conn.cursor().execute("ALTER USER root@localhost IDENTIFIED BY 'not-windvane'")
        conn.close()
    finally:
        stop_test_server(srv)
    yield srv.datadir
    stop_test_server(MariaDBServer(srv.datadir), remove=True)


@pytest.mark.mariadb
def test_cli_start_failing_after_spawn_stops_the_server(password_datadir):
    # mariadbd comes up and accepts connections, but refuses windvane's root.
    result = _run("db", "start", "--datadir", str(password_datadir))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert f"Error: the server at {password_datadir}/mysqld.sock refused root without a password" in result.stderr
    assert result.stdout == ""
    _assert_no_server_left(password_datadir)


@pytest.mark.mariadb
def test_cli_start_on_a_port_in_use_leaves_nothing_running(password_datadir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run("db", "start", "--datadir", str(password_datadir), "--port", str(port))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "exited during startup" in result.stderr
    assert f"Do you already have another server running on port: {port}" in result.stderr
    _assert_no_server_left(password_datadir)


@pytest.mark.mariadb
def test_cli_start_not_ready_in_time_stops_the_server(password_datadir):
    # An error log nobody reads (a FIFO) holds mariadbd at its first write,
    # before it opens its socket: a server that never gets ready.
    log = password_datadir / "error.log"
    log.unlink()
    os.mkfifo(log)
    try:
        result = _run("db", "start", "--datadir", str(password_datadir), "--timeout", "2")
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        assert f"did not accept connections on {password_datadir}/mysqld.sock in time" in result.stderr
        assert "A server this start spawned is stopped again" in result.stderr
        _assert_no_server_left(password_datadir)
    finally:
        MariaDBServer(password_datadir).kill()
        log.unlink()


def test_cli_help():
    result = _run("--help")
    assert result.returncode == 0
    assert "db" in result.stdout
    result = _run("db", "--help")
    assert result.returncode == 0
    for command in ("start", "stop", "status"):
        assert command in result.stdout
