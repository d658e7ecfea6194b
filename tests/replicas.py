"""A private primary with read replicas for the test suite.

The same code as ``windvane db start --replica-of`` (:mod:`windvane.ops.replica`),
on servers scaled down further than the session's single server
(:data:`tests.mariadb.TEST_OVERRIDES`): a replicated test writes little, and
three servers run at once.

Typical fixture::

    @pytest.fixture(scope="session")
    def replicated_servers(tmp_path_factory):
        servers = start_replicated(tmp_path_factory.mktemp("replicated"))
        yield servers
        servers.stop()
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote

from tests.mariadb import stop_test_server
from windvane.ops.mariadb_server import MariaDBServer
from windvane.ops.replica import make_primary, start_replica

# Small: a replicated test writes kilobytes, not the session server's multi-MiB BLOB transactions.
REPLICA_OVERRIDES: dict[str, str | None] = {
    "innodb_buffer_pool_size": "64M",
    "innodb_log_file_size": "48M",
    "innodb_log_buffer_size": "16M",
    "loose-rocksdb_block_cache_size": "32M",
}


@dataclass
class Replicated:
    """A running primary and its replicas, each in a directory of its own under ``root``."""

    root: Path
    primary: MariaDBServer
    replicas: list[MariaDBServer] = field(default_factory=list)

    def stop(self) -> None:
        """Stop every server (replicas first), killing one that does not stop; remove their directories."""
        for server in [*self.replicas, self.primary]:
            stop_test_server(server)
        shutil.rmtree(self.root, ignore_errors=True)


def start_replicated(
    tmp_root: str | os.PathLike[str] | None = None,
    replicas: int = 2,
    *,
    gtid_pos_auto_engines: list[str | None] | None = None,
    timeout: float = 120,
) -> Replicated:
    """Start a primary and ``replicas`` replicas of it; the caller stops them (`Replicated.stop`).

    ``gtid_pos_auto_engines`` gives each replica's setting (None: the default,
    which covers MyRocks when it is installed).  The directories go to a short
    temporary directory (unix socket paths are limited), ``tmp_root`` if short.
    """
    root = Path(tmp_root) if tmp_root is not None else Path(tempfile.mkdtemp(prefix="wv-rep-"))
    if len(os.fsencode(os.path.abspath(root))) > 70:
        root = Path(tempfile.mkdtemp(prefix="wv-rep-"))
    engines = gtid_pos_auto_engines or [None] * replicas
    servers = Replicated(root, MariaDBServer(root / "primary"))
    try:
        servers.primary = make_primary(root / "primary", overrides=REPLICA_OVERRIDES, timeout=timeout)
        for n in range(replicas):
            servers.replicas.append(
                start_replica(
                    root / f"r{n + 1}",
                    str(root / "primary"),
                    overrides=REPLICA_OVERRIDES,
                    primary_overrides=REPLICA_OVERRIDES,
                    gtid_pos_auto_engines=engines[n],
                    timeout=timeout,
                )
            )
    except BaseException:
        servers.stop()
        raise
    return servers


class ReplicatedDatabase(NamedTuple):
    """A fresh database on a primary with replicas: the store URL naming them, and the replicas' sockets."""

    #: ``mariadb://root@/DB?unix_socket=PRIMARY&replicas=R1,R2``
    url: str
    replicas: list[str]

    @property
    def primary_url(self) -> str:
        """The URL of the database on the primary alone."""
        return self.url.partition("&replicas=")[0]


def with_replicas(primary_url: str, replicas: list[str]) -> ReplicatedDatabase:
    """``primary_url`` with ``&replicas=`` naming ``replicas`` (socket paths or host:port)."""
    return ReplicatedDatabase(f"{primary_url}&replicas={','.join(quote(r, safe='/:') for r in replicas)}", replicas)
