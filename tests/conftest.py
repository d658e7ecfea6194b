"""Shared fixtures: a real private MariaDB server for the session, real SQLite files.

The MariaDB server is started with the same code as ``windvane db start``
(:mod:`neostore.server`), scaled down so the suite starts quickly; each test
that asks for a MariaDB store gets a database of its own.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile

import mariadb
import pytest

from neostore.server import MariaDBServer, database_url

# Small enough to start in seconds and keep the suite's disk use low, large
# enough that the 200 MiB big-value test does not thrash.
TEST_SERVER_SETTINGS = {
    "innodb_buffer_pool_size": "512M",
    "innodb_log_file_size": "256M",
}

HERE = os.path.dirname(__file__)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture(scope="session")
def mariadb_server():
    """The session's MariaDB server (a real mariadbd on a private socket)."""
    # A short path: unix socket paths are limited to 107 bytes.
    datadir = tempfile.mkdtemp(prefix="wv-mariadb-")
    server = MariaDBServer(os.path.join(datadir, "data"), overrides=TEST_SERVER_SETTINGS)
    server.start(timeout=120)
    yield server
    server.stop()


def fresh_database(server: MariaDBServer, name: str) -> str:
    """Create (replacing) database ``name`` on ``server``; return its store URL."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", name)[-60:]
    conn = mariadb.connect(user="root", unix_socket=server.socket)
    try:
        cur = conn.cursor()
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cur.execute(f"CREATE DATABASE `{name}`")
    finally:
        conn.close()
    return database_url(server.socket, name)


@pytest.fixture
def mariadb_url(mariadb_server, request) -> str:
    """A new, empty MariaDB database for this test."""
    return fresh_database(mariadb_server, "t_" + request.node.name)


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    """A new SQLite file for this test (absolute path: four slashes)."""
    return f"sqlite:///{tmp_path}/store.db"


@pytest.fixture(params=["sqlite", "mariadb"])
def store_url(request) -> str:
    """A fresh store URL, once per backend."""
    return request.getfixturevalue(f"{request.param}_url")
