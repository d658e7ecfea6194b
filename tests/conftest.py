"""Shared fixtures: a real private MariaDB server for the session, real SQLite files.

The MariaDB server is started with the same code as ``windvane db start``
(:mod:`windvane.ops.mariadb_server`), scaled down so the suite starts quickly
(:mod:`tests.mariadb`); each test that asks for a MariaDB store gets a
database of its own.

Every test that needs MariaDB (one of the fixtures in `MARIADB_FIXTURES`, or
a ``"mariadb"`` parameter such as ``store_url``'s) is marked ``mariadb``
here (tests needing only the connector, or starting servers of their own,
carry the mark themselves), so ``pytest -m "not mariadb"`` leaves them out;
without the connector they are skipped, saying so, and the rest runs.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile

import pytest

from tests import galera as test_clusters
from tests import mariadb as test_servers
from tests import replicas as test_replicas
from tests.layout import LIBRARY
from tests.s3 import S3Server
from windvane.ops.galera import GaleraCluster
from windvane.ops.mariadb_server import MariaDBServer
from windvane.ops.replica import wait_for_primary

#: Fixtures that start or use a Galera cluster; their tests run in one xdist group (tests.galera.GALERA_GROUP).
GALERA_FIXTURES = frozenset({"galera_cluster", "galera_url", "private_galera"})

#: Fixtures that start or use a MariaDB server.
MARIADB_FIXTURES = (
    frozenset({"mariadb_server", "mariadb_url", "private_server", "replicated_servers", "replicated_url"})
    | GALERA_FIXTURES
)

NO_CONNECTOR = "the mariadb connector is not installed: pip install 'windvane[mariadb]'"


def uses_mariadb(item: pytest.Item) -> bool:
    """Whether ``item`` asks for a MariaDB fixture or runs with a ``"mariadb"`` parameter."""
    if MARIADB_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "mariadb" in callspec.params.values()


def connector_installed() -> bool:
    """Whether the MariaDB connector (the ``mariadb`` package) imports."""
    try:
        import mariadb  # noqa: F401
    except ImportError:
        return False
    return True


# First, so that -m "not mariadb" sees the marks given here.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = None if connector_installed() else pytest.mark.skip(reason=NO_CONNECTOR)
    for item in items:
        if uses_mariadb(item):
            item.add_marker(pytest.mark.mariadb)
        if GALERA_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(test_clusters.GALERA_GROUP)
        if skip is not None and item.get_closest_marker("mariadb") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def mariadb_server(tmp_path_factory) -> MariaDBServer:
    """The session's MariaDB server (a real mariadbd on a private socket)."""
    server, _ = test_servers.start_test_server(tmp_path_factory.mktemp("mariadb"))
    yield server
    test_servers.stop_test_server(server, remove=True)


def fresh_database(server: MariaDBServer, name: str) -> str:
    """Create (replacing) database ``name`` on ``server``; return its store URL."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", name)[-60:]
    return test_servers.fresh_database(server.url(), name)


@pytest.fixture
def mariadb_url(mariadb_server, request) -> str:
    """A new, empty MariaDB database for this test."""
    return fresh_database(mariadb_server, "t_" + request.node.name)


@pytest.fixture(scope="session")
def replicated_servers() -> test_replicas.Replicated:
    """The session's primary with two read replicas (real mariadbd servers, asynchronous replication)."""
    servers = test_replicas.start_replicated(replicas=2)
    yield servers
    servers.stop()


@pytest.fixture
def replicated_url(replicated_servers, request) -> test_replicas.ReplicatedDatabase:
    """A new, empty database on the session's primary, once both replicas have it too.

    ``(url, replicas)``: the store URL ``mariadb://root@/DB?unix_socket=PRIMARY&replicas=R1,R2`` and the
    replicas' sockets; ``.primary_url`` is the URL of the primary alone.
    """
    url = fresh_database(replicated_servers.primary, "t_" + request.node.name)
    for replica in replicated_servers.replicas:
        wait_for_primary(replica, replicated_servers.primary)
    return test_replicas.with_replicas(url, [replica.socket for replica in replicated_servers.replicas])


@pytest.fixture(scope="session")
def galera_cluster() -> GaleraCluster:
    """The session's 3-node Galera cluster (real mariadbd servers on private sockets and ports).

    Shared: tests must not stop or kill its nodes (`private_galera` is for those).
    """
    cluster = test_clusters.start_test_cluster()
    yield cluster
    test_clusters.stop_test_cluster(cluster)


@pytest.fixture
def galera_url(galera_cluster, request) -> str:
    """A new, empty database on the session's cluster: its cluster URL (every node's socket), once every
    node has it."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", "t_" + request.node.name)[-60:]
    return test_clusters.fresh_cluster_database(galera_cluster, name)


@pytest.fixture(scope="module")
def galera_module_cluster() -> GaleraCluster:
    """A 3-node cluster of the module's own, for tests that stop, kill and restart nodes."""
    cluster = test_clusters.start_test_cluster()
    yield cluster
    test_clusters.stop_test_cluster(cluster)


@pytest.fixture
def private_galera(galera_module_cluster) -> GaleraCluster:
    """The module's own cluster, every node started and synced again for this test (tests kill nodes)."""
    galera_module_cluster.start(timeout=240)
    return galera_module_cluster


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    """A new SQLite file for this test (absolute path: four slashes)."""
    return f"sqlite:///{tmp_path}/store.db"


@pytest.fixture(params=["sqlite", "mariadb"])
def store_url(request) -> str:
    """A fresh store URL, once per backend."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> S3Server:
    """The session's S3 server (a real versitygw on a private port and directory)."""
    server = S3Server(tmp_path_factory.mktemp("s3") / "data")
    server.start()
    yield server
    server.remove()


@pytest.fixture
def s3_env(s3_server, monkeypatch) -> S3Server:
    """The session's S3 server, with the AWS variables its clients need set for this test (and its children)."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return s3_server


@pytest.fixture
def blobs_option(s3_env) -> str:
    """``blobs=...&endpoint=...`` for a fresh bucket of the session's S3 server: add it to a store URL."""
    return f"blobs=s3://{s3_env.new_bucket()}/store&endpoint={s3_env.endpoint}"


def with_blobs(url: str, option: str) -> str:
    """``url`` with a blob tier option added."""
    return url + ("&" if "?" in url else "?") + option


@pytest.fixture
def tiered_url(store_url, blobs_option) -> str:
    """A fresh store URL, once per backend, keeping its big values in a fresh bucket of the S3 server."""
    return with_blobs(store_url, blobs_option)


# Scaled down like the session server's; private because the test kills it.
KILLED_SERVER_SETTINGS = {"innodb_buffer_pool_size": "128M", "innodb_log_file_size": "64M"}


@pytest.fixture
def private_server() -> MariaDBServer:
    """A MariaDB server of this test's own (tests kill it), always stopped or killed and removed after."""
    root = tempfile.mkdtemp(prefix="wv-kill-")  # short: unix socket paths are limited
    server = MariaDBServer(os.path.join(root, "data"), overrides=KILLED_SERVER_SETTINGS)
    try:
        server.start(timeout=120)
        yield server
    finally:
        try:
            server.stop(timeout=60)
        # Whatever the clean stop fails with, the server must not outlive the test.
        except Exception:  # noqa: BLE001
            server.kill()
        shutil.rmtree(root, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session) -> None:
    # A root folder's module under its bare name is a second copy of it (its own classes, its own state),
    # loaded by an import that skipped the windvane namespace.
    loaded = sorted(name for name in sys.modules if name.split(".")[0] in LIBRARY)
    if loaded:
        session.config.get_terminal_writer().line(
            f"error: modules imported by their bare names instead of windvane.*: {', '.join(loaded)}", red=True
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
