"""Private MariaDB servers for the test suite.

The suite runs the same `windvane.ops.mariadb_server` code that `windvane db start`
uses, with the buffer pool and redo log scaled down so a server starts
quickly and takes a fraction of the shipped configuration's disk (each test
worker starts one).  Everything
else (O_DIRECT, flush at every commit, max_allowed_packet, MyRocks if
installed) is the shipped configuration, so tests exercise what users run.

Typical fixture::

    @pytest.fixture(scope="session")
    def mariadb_server(tmp_path_factory):
        server, url = start_test_server(tmp_path_factory.mktemp("mariadb"))
        yield server, url
        stop_test_server(server, remove=True)

    @pytest.fixture
    def mariadb_url(mariadb_server, request):
        return fresh_database(mariadb_server[1], "t_" + ...)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit, urlunsplit

from windvane.ops.mariadb_server import MariaDBServer, check_database_name

if TYPE_CHECKING:
    import mariadb

# Small enough to start fast and fit several servers on a CI machine; large
# enough that multi-MiB BLOB transactions do not stall on checkpoints.
TEST_OVERRIDES: dict[str, str | None] = {
    "innodb_buffer_pool_size": "256M",
    "innodb_log_file_size": "256M",
}

# Unix socket paths are limited to 107 bytes; leave room below that.
_MAX_DATADIR = 90


def start_test_server(tmp_root: str | os.PathLike[str], timeout: float = 120) -> tuple[MariaDBServer, str]:
    """Start a private test server under ``tmp_root``; return it and its windvane URL.

    The caller must stop it (`stop_test_server`).  When ``tmp_root`` is too
    deep for a unix socket path, the data directory goes to a short
    temporary directory instead.
    """
    datadir = Path(tmp_root) / "mariadb"
    if len(os.fsencode(os.path.abspath(datadir))) > _MAX_DATADIR:
        datadir = Path(tempfile.mkdtemp(prefix="wv-db-")) / "mariadb"
    server = MariaDBServer(datadir, overrides=TEST_OVERRIDES)
    try:
        url = server.start(timeout=timeout)
    except BaseException:
        stop_test_server(server)
        raise
    return server, url


def stop_test_server(server: MariaDBServer, *, remove: bool = False) -> None:
    """Stop ``server`` cleanly, or kill it if that fails; never leaves it running.

    With ``remove``, delete its data directory too (mostly the preallocated
    redo log, and pytest keeps three runs' worth of temporary directories).
    """
    try:
        server.stop(timeout=60)
    # Whatever the clean stop fails with, the server must not outlive the suite.
    except Exception:  # noqa: BLE001
        server.kill()
    if remove:
        shutil.rmtree(server.datadir, ignore_errors=True)


def socket_of(url: str) -> str:
    """Return the unix socket path named in a mariadb://...?unix_socket= URL."""
    sockets = parse_qs(urlsplit(url).query).get("unix_socket")
    if not sockets:
        raise ValueError(f"{url!r} names no unix_socket")
    return sockets[0]


def connect(url: str, database: str | None = None) -> mariadb.Connection:
    """Connect as root to the server of ``url`` (to ``database`` if given)."""
    import mariadb  # late: the suite collects and runs its SQLite tests without the connector

    kwargs = {"database": database} if database else {}
    return mariadb.connect(user="root", unix_socket=socket_of(url), **kwargs)


def fresh_database(url: str, name: str) -> str:
    """(Re)create the empty database ``name`` on the server of ``url``; return its URL.

    An existing database of that name is dropped first, so every test starts
    from nothing.  Query options of ``url`` (such as engine=rocksdb) are kept.
    """
    check_database_name(name)
    conn = connect(url)
    try:
        cur = conn.cursor()
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cur.execute(f"CREATE DATABASE `{name}`")
    finally:
        conn.close()
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))
