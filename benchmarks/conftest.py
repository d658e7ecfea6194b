"""Fixtures of the neostore benchmarks.

- ``mariadb_server``: one private mariadbd for the session, started by
  :class:`windvane.ops.mariadb_server.MariaDBServer` with the SHIPPED configuration
  (windvane/ops/mariadb.cnf, no test overrides: 1G buffer pool, 1G redo log,
  O_DIRECT, flush at every commit), in a short temporary directory under /tmp.
- ``databases``: makes fresh MariaDB databases and SQLite files, and removes
  them (and their disk space) at the end of the test, or earlier on request.
- ``sensor_values``: the benchmark data, generated once per session
  (:mod:`sensor_data`, ``TOTAL_BYTES`` of 2 MiB float32 values).
- ``bench_results``: median throughputs of the tests run so far, so that a
  test can put its ratio to a baseline measured earlier in the same run into
  ``benchmark.extra_info``.

Run (the repository's pytest config adds --benchmark-disable; override it):

    .venv/bin/python -m pytest benchmarks -p no:cacheprovider \\
        --benchmark-enable --benchmark-only --benchmark-json=/tmp/bench.json
    .venv/bin/python benchmarks/report.py /tmp/bench.json

``WINDVANE_BENCH_BYTES=64M`` makes a quick run; ``WINDVANE_BENCH_ROUNDS``
sets the rounds of every benchmark (default 3; the pack benchmark uses 1).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar

import mariadb
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import sensor_data  # noqa: E402

from windvane.ops.mariadb_server import MariaDBServer, database_url  # noqa: E402


@pytest.fixture(scope="session")
def mariadb_server():
    """The session's MariaDB server, with neostore's shipped mariadb.cnf unchanged."""
    # A short path: unix socket paths are limited to 107 bytes.
    root = tempfile.mkdtemp(prefix="wvb-", dir="/tmp")
    server = MariaDBServer(os.path.join(root, "db"))  # no overrides: the shipped configuration
    server.start(timeout=300)
    try:
        warm_up(server)
        yield server
    finally:
        try:
            server.stop(timeout=120)
        except Exception:  # noqa: BLE001 - whatever stopped a clean shutdown, the server must not outlive the run
            server.kill()
        shutil.rmtree(root, ignore_errors=True)


def warm_up(server: MariaDBServer, nbytes: int = 1 << 30) -> None:
    """Write and drop ``nbytes`` of BLOBs once (untimed), so that no benchmark
    pays for the fresh server's first touch of its 1G buffer pool and redo log:
    measured here, the first 1 GiB insert into a new server runs at ~330 MB/s,
    later ones at ~470 MB/s."""
    blob = os.urandom(sensor_data.VALUE_BYTES)
    conn = server.connect()
    try:
        cur = conn.cursor()
        cur.execute("CREATE DATABASE IF NOT EXISTS bench_warmup")
        cur.execute("CREATE TABLE bench_warmup.t (id BIGINT PRIMARY KEY, value MEDIUMBLOB NOT NULL)")
        conn.autocommit = False
        count = nbytes // len(blob)
        for start in range(0, count, 16):
            cur.executemany(
                "INSERT INTO bench_warmup.t VALUES (?, ?)", [(i, blob) for i in range(start, min(count, start + 16))]
            )
            conn.commit()
        conn.autocommit = True
        cur.execute("DROP DATABASE bench_warmup")
    finally:
        conn.close()
    settle_mariadb(server)


@pytest.fixture(scope="session")
def sqlite_root():
    """A short temporary directory for the SQLite files of the session."""
    root = tempfile.mkdtemp(prefix="wvb-sqlite-", dir="/tmp")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def settle_mariadb(server: MariaDBServer, timeout: float = 180.0) -> float:
    """Flush InnoDB's dirty pages before a round (untimed); return the seconds it took.

    With the shipped settings (innodb_max_dirty_pages_pct_lwm=0) an idle
    server keeps dirty pages in the buffer pool indefinitely, so one round's
    1 GiB would be flushed during the next round and bill it. Every round of
    every benchmark therefore starts from a clean buffer pool: for the wait
    only, innodb_max_dirty_pages_pct is set to 0 (flush everything), then put
    back to its previous value before the round is timed.
    """
    started = time.monotonic()
    conn = server.connect()
    try:
        cur = conn.cursor()
        cur.execute("SELECT @@GLOBAL.innodb_max_dirty_pages_pct")
        (previous,) = cur.fetchone()
        cur.execute("SET GLOBAL innodb_max_dirty_pages_pct = 0")
        try:
            while time.monotonic() - started < timeout:
                cur.execute(
                    "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
                    "WHERE VARIABLE_NAME = 'INNODB_BUFFER_POOL_PAGES_DIRTY'"
                )
                if int(cur.fetchone()[0]) < 16:
                    break
                time.sleep(0.1)
        finally:
            cur.execute(f"SET GLOBAL innodb_max_dirty_pages_pct = {float(previous)}")
    finally:
        conn.close()
    return time.monotonic() - started


class Startable(Protocol):
    """Servers a benchmark starts before its rounds and stops after them."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=Startable)


@contextmanager
def running(servers: S) -> Iterator[S]:
    """``servers`` started for the block, stopped after it however it ends (a failed start too)."""
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


def settle_servers(servers: Iterable[MariaDBServer]) -> None:
    """Flush the file system and every one of ``servers``' dirty pages (untimed), so that no round pays
    for the one before."""
    os.sync()
    for server in servers:
        settle_mariadb(server)


class Databases:
    """Fresh MariaDB databases and SQLite files for one test; dropped afterwards."""

    def __init__(self, request, server_getter, sqlite_root: str):
        self._request = request
        self._server_getter = server_getter
        self._sqlite_root = sqlite_root
        self._mariadb: set[str] = set()
        self._sqlite: set[str] = set()

    @property
    def server(self) -> MariaDBServer:
        return self._server_getter()

    # -- MariaDB ---------------------------------------------------------------

    @staticmethod
    def _clean(name: str) -> str:
        return re.sub(r"[^A-Za-z0-9_]", "_", name)[-60:]

    def fresh_mariadb(self, name: str) -> str:
        """Drop and create database ``name``; return its neostore URL."""
        name = self._clean(name)
        server = self.server
        self._run(f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}`")
        self._mariadb.add(name)
        os.sync()
        settle_mariadb(server)
        return database_url(server.socket, name)

    def settle(self) -> float:
        """Sync the page cache and wait until InnoDB has no dirty pages left (untimed)."""
        os.sync()
        return settle_mariadb(self.server)

    def drop_mariadb(self, name: str) -> None:
        name = self._clean(name)
        self._run(f"DROP DATABASE IF EXISTS `{name}`")
        self._mariadb.discard(name)

    def mariadb_connect(self, name: str) -> mariadb.Connection:
        """A plain ``mariadb`` connector connection to database ``name`` (autocommit off)."""
        conn = mariadb.connect(user="root", unix_socket=self.server.socket, database=self._clean(name))
        conn.autocommit = False
        return conn

    def _run(self, *statements: str) -> None:
        conn = mariadb.connect(user="root", unix_socket=self.server.socket)
        try:
            cur = conn.cursor()
            for statement in statements:
                cur.execute(statement)
        finally:
            conn.close()

    # -- SQLite ----------------------------------------------------------------

    def sqlite_path(self, name: str) -> str:
        return os.path.join(self._sqlite_root, self._clean(name) + ".db")

    def fresh_sqlite(self, name: str) -> str:
        """Remove the SQLite file ``name`` (and its WAL, shm and lock files); return its path."""
        path = self.sqlite_path(name)
        self.drop_sqlite(name)
        self._sqlite.add(path)
        os.sync()
        return path

    def drop_sqlite(self, name: str) -> None:
        path = self.sqlite_path(name)
        for suffix in ("", "-wal", "-shm", "-journal", ".lock", ".queue"):
            try:
                os.unlink(path + suffix)
            except FileNotFoundError:
                pass
        self._sqlite.discard(path)

    def cleanup(self) -> None:
        for name in list(self._mariadb):
            try:
                self.drop_mariadb(name)
            except Exception:  # noqa: BLE001 - cleanup after a run: one database that will not drop must not keep the others
                pass
        for path in list(self._sqlite):
            self.drop_sqlite(os.path.basename(path)[:-3])


@pytest.fixture
def databases(request, sqlite_root):
    """Fresh databases for this test (the MariaDB server starts on first use)."""
    dbs = Databases(request, lambda: request.getfixturevalue("mariadb_server"), sqlite_root)
    yield dbs
    dbs.cleanup()


@pytest.fixture(scope="session")
def sensor_values() -> list[bytes]:
    """The benchmark data: ``TOTAL_BYTES`` of sensor-like float32 data as 2 MiB values."""
    return sensor_data.dataset(sensor_data.TOTAL_BYTES)


@pytest.fixture(scope="session")
def bench_results() -> dict[str, dict]:
    """name -> {"mbps": median MB/s, ...} of the benchmarks run so far in this session."""
    return {}


def pytest_configure(config):
    # A SIGTERM (timeout, kill of the run) becomes a KeyboardInterrupt, so the
    # session fixtures still stop the private mariadbd and remove its files.
    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def _run(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=os.path.dirname(HERE)).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def code_version() -> tuple[str, str | None]:
    """(HEAD commit, sha1 of the uncommitted diff of neostore/ or None)."""
    diff = _run("git", "diff", "HEAD", "--", "neostore")
    return _run("git", "rev-parse", "--short", "HEAD"), (hashlib.sha1(diff.encode()).hexdigest()[:12] if diff else None)


#: The code the benchmarks import (and so measure): the code at the session's start.
CODE_VERSION = pytest.StashKey[tuple[str, str | None]]()


def pytest_sessionstart(session):
    session.config.stash[CODE_VERSION] = code_version()


def pytest_benchmark_update_machine_info(config, machine_info):
    """Record what was measured: the code (commit + uncommitted diff), engines and machine."""
    import sqlite3

    from windvane.neostore import values as neostore_values

    commit, diff = config.stash.get(CODE_VERSION, None) or code_version()
    machine_info["windvane"] = {
        "commit": commit,
        "neostore_uncommitted_diff_sha1": diff,
        "neostore_changed_during_run": code_version() != (commit, diff),
        "neostore_default_zstd_level": inspect.signature(neostore_values.ValueCodec).parameters["level"].default,
        "mariadbd": _run("mariadbd", "--version"),
        "sqlite": sqlite3.sqlite_version,
        "nproc": os.cpu_count(),
        "cpu_model": next(
            (line.split(":", 1)[1].strip() for line in _run("lscpu").splitlines() if line.startswith("Model name")), "?"
        ),
        "mem_total_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "disk": " ; ".join(_run("lsblk", "-dno", "NAME,SIZE,ROTA,MODEL").split("\n")),
        "tmp_fs": _run("findmnt", "-no", "SOURCE,FSTYPE,OPTIONS", "--target", "/tmp"),
        "total_bytes": sensor_data.TOTAL_BYTES,
    }


def pytest_report_header(config):
    return (
        f"windvane benchmarks: TOTAL_BYTES={sensor_data.TOTAL_BYTES} "
        f"({sensor_data.count_for(sensor_data.TOTAL_BYTES)} values of {sensor_data.VALUE_BYTES} bytes)"
    )
