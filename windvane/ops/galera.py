"""A local MariaDB Galera cluster: several private servers on one machine replicating to each other.

`GaleraCluster` runs N `MariaDBServer` nodes under one data directory, each
with its own socket and its own ports on 127.0.0.1, joined into one cluster
by the Galera provider (Debian: galera-4)::

    cluster = GaleraCluster("/srv/windvane/cluster", size=3)
    url = cluster.start()   # mariadb://root@/windvane?unix_socket=.../node1/mysqld.sock,.../node2/...
    cluster.node(2).kill()  # the others go on; node(2).start() rejoins it
    cluster.stop()

Layout of the data directory:

* ``cluster.json`` -- the marker of a cluster directory: the number of nodes
  and the ports they use (chosen free at the first start, reused after).
* ``node1``, ``node2``, ... -- each node's `MariaDBServer` data directory
  (``my.cnf``, ``error.log``, ``mysqld.sock``; Galera's ``grastate.dat``
  and ``galera.cache``).

Node ``i`` (from 1) uses the four ports ``base + 10*(i-1)`` and the three
after it: the MariaDB port (listened on only when a base port was given),
the group communication port, the incremental state transfer (IST) port and
the snapshot state transfer (SST, rsync) port.  Started as root, the nodes
run as the ``mysql`` user: the rsync state transfer refuses to run as root.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import socket as socketlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from .errors import ClusterError, ServerConfigError, ServerError, ServerNotFoundError, ServerTimeoutError
from .mariadb_logs import with_log
from .mariadb_processes import exclusive_lock
from .mariadb_programs import find_program
from .mariadb_server import DEFAULT_DATABASE, MariaDBServer, ServerStatus, check_connector, check_database_name

if TYPE_CHECKING:
    import mariadb

__all__ = [
    "MARKER",
    "NODE_OVERRIDES",
    "PROVIDER_OPTIONS",
    "ClusterStatus",
    "GaleraCluster",
    "GaleraNode",
    "NodeStatus",
    "Position",
    "is_cluster_directory",
]

#: The file that makes a directory a cluster's (and records its layout).
MARKER = "cluster.json"

#: Where distributions install the Galera 4 provider library.
PROVIDER_PATHS = (
    "/usr/lib/galera/libgalera_smm.so",
    "/usr/lib/galera-4/libgalera_smm.so",
    "/usr/lib64/galera-4/libgalera_smm.so",
    "/usr/lib64/galera/libgalera_smm.so",
)

#: Galera provider options of every node unless the caller gives others.  The suspect timeout is how long
#: a silent node stays a member: the floor of any failover.
PROVIDER_OPTIONS: dict[str, str] = {
    "gcache.size": "128M",
    "evs.suspect_timeout": "PT5S",
    "evs.inactive_timeout": "PT15S",
}

#: mariadb.cnf settings of every node unless the caller overrides them: the nodes of a local cluster share
#: one machine, so each takes a share of what the shipped configuration gives a server of its own.
NODE_OVERRIDES: dict[str, str | None] = {
    "innodb_buffer_pool_size": "256M",
    "innodb_log_file_size": "256M",
}

_CLUSTER_NAME = "windvane"
_MAX_NODES = 9
# Free ports are looked for below Linux's ephemeral range (32768-60999), where the kernel never hands one
# out to an outgoing connection in between two starts.
_PORT_RANGE = (20000, 32000)
_STATUS = (
    "wsrep_ready",
    "wsrep_local_state_comment",
    "wsrep_cluster_size",
    "wsrep_cluster_status",
    "wsrep_last_committed",
)
_NO_UUID = "00000000-0000-0000-0000-000000000000"
_RECOVERED = re.compile(r"WSREP: Recovered position: ([0-9a-f-]+):(-?\d+)")


def is_cluster_directory(datadir: str | os.PathLike[str]) -> bool:
    """Whether ``datadir`` holds a cluster started by `GaleraCluster` (its marker file)."""
    return (Path(datadir) / MARKER).is_file()


def installed_provider() -> str | None:
    """The path of the Galera provider library, or None when it is not installed."""
    return next((path for path in PROVIDER_PATHS if os.path.isfile(path)), None)


def find_provider() -> str:
    """The path of the Galera provider library; ServerNotFoundError (saying what to install) if there is none."""
    path = installed_provider()
    if path is not None:
        return path
    raise ServerNotFoundError(
        "the Galera provider (libgalera_smm.so) was not found in "
        + ", ".join(os.path.dirname(p) for p in PROVIDER_PATHS)
        + ". Install it: apt-get install galera-4 rsync"
    )


def _port_free(port: int) -> bool:
    with socketlib.socket(socketlib.AF_INET, socketlib.SOCK_STREAM) as s:
        # As the servers bind: a port in TIME_WAIT after a node stopped is free to them.
        s.setsockopt(socketlib.SOL_SOCKET, socketlib.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class NodeStatus:
    """What `GaleraNode.status` found: the process, and Galera's view when the node answers.

    ``state`` is ``wsrep_local_state_comment`` (Synced, Donor/Desynced,
    Joining, ...), ``cluster_status`` is ``wsrep_cluster_status`` (Primary
    when the node is in the component that has quorum); both None when the
    node is not running or does not answer.
    """

    name: str
    server: ServerStatus
    ready: bool = False
    state: str | None = None
    cluster_size: int | None = None
    cluster_status: str | None = None
    last_committed: int | None = None

    @property
    def running(self) -> bool:
        return self.server.running

    @property
    def synced(self) -> bool:
        """Running, serving clients, and holding the whole state of the primary component."""
        return self.ready and self.state == "Synced" and self.cluster_status == "Primary"

    def describe(self) -> str:
        """One line for people: the node, its process and its Galera state."""
        if not self.running:
            return f"{self.name}: not running"
        where = f"{self.name}: running (pid {self.server.pid})"
        if self.state is None:
            return f"{where}, not answering"
        return f"{where}, {self.state}, cluster size {self.cluster_size}, {self.cluster_status}"


@dataclass(frozen=True)
class ClusterStatus:
    """What `GaleraCluster.status` found: each node's status, in node order."""

    size: int
    nodes: list[NodeStatus]

    @property
    def up(self) -> bool:
        """Every node runs, synced, in one primary component of all of them."""
        return bool(self.nodes) and all(n.synced and n.cluster_size == self.size for n in self.nodes)


@dataclass(frozen=True)
class Position:
    """How far a stopped node's state goes: the cluster's uuid and seqno (-1: unknown), whether Galera
    marked it safe to start the cluster from, and whether InnoDB's recovery told (after a crash)."""

    uuid: str
    seqno: int
    safe_to_bootstrap: bool
    recovered: bool = False


class GaleraNode:
    """One node of a `GaleraCluster`: a `MariaDBServer` with the Galera settings of its place in the cluster."""

    def __init__(self, cluster: GaleraCluster, index: int, server: MariaDBServer, ports: tuple[int, ...]) -> None:
        self.cluster = cluster
        self.index = index
        self.server = server
        self.ports = ports
        # What `mariadbd --wsrep-recover` found, until the node runs again.
        self._recovered: tuple[str, int] | None = None

    @property
    def name(self) -> str:
        return f"node{self.index}"

    @property
    def socket(self) -> str:
        """Path of the node's unix socket."""
        return self.server.socket

    @property
    def port(self) -> int | None:
        """The node's MariaDB port on 127.0.0.1, or None when it listens on its socket only."""
        return self.server.port

    @property
    def error_log(self) -> Path:
        return self.server.error_log

    def url(self, database: str = DEFAULT_DATABASE) -> str:
        """The store URL of ``database`` on this node alone."""
        return self.server.url(database)

    def __repr__(self) -> str:
        return f"GaleraNode({self.name}, {str(self.server.datadir)!r})"

    # -- state -------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.server.pid

    def status(self) -> NodeStatus:
        """The node's process and, when it answers, its Galera state."""
        server = self.server.status()
        values = self._wsrep_status() if server.running else None
        if values is None:
            return NodeStatus(self.name, server)
        return NodeStatus(
            self.name,
            server,
            ready=values.get("wsrep_ready") == "ON",
            state=values.get("wsrep_local_state_comment"),
            cluster_size=int(values.get("wsrep_cluster_size") or 0),
            cluster_status=values.get("wsrep_cluster_status"),
            last_committed=int(values.get("wsrep_last_committed") or -1),
        )

    def connect(self, database: str | None = None) -> mariadb.Connection:
        """A new connection as root to this node (to ``database`` if given)."""
        return self.server.connect(database)

    def _wsrep_status(self) -> dict[str, str] | None:
        import mariadb

        try:
            conn = mariadb.connect(user="root", unix_socket=self.socket, connect_timeout=5, read_timeout=10)
        except mariadb.Error:
            return None
        try:
            cur = conn.cursor()
            names = ",".join(f"'{name}'" for name in _STATUS)
            cur.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})")
            return {str(name).lower(): str(value) for name, value in cur.fetchall()}
        except mariadb.Error:
            return None
        finally:
            conn.close()

    def position(self) -> Position:
        """How far this stopped node's state goes (read from grastate.dat, else recovered by mariadbd)."""
        grastate = self._grastate()
        safe = grastate.get("safe_to_bootstrap") == "1"
        uuid, seqno = grastate.get("uuid", _NO_UUID), int(grastate.get("seqno", "-1"))
        if seqno != -1 or not self.server.is_initialised() or self.pid is not None:
            return Position(uuid, seqno, safe)
        if self._recovered is None:
            # Killed: grastate.dat does not say; InnoDB's recovery does.
            found = _RECOVERED.findall(self.server.run_once("--wsrep-recover"))
            self._recovered = (found[-1][0], int(found[-1][1])) if found else (uuid, -1)
        uuid, seqno = self._recovered
        return Position(uuid, seqno, safe, recovered=seqno != -1)

    @property
    def _grastate_file(self) -> Path:
        return self.server.datadir / "grastate.dat"

    def _grastate(self) -> dict[str, str]:
        try:
            text = self._grastate_file.read_text(encoding="utf-8")
        except OSError:
            return {}
        fields = (line.partition(":") for line in text.splitlines() if not line.startswith("#"))
        return {key.strip(): value.strip() for key, sep, value in fields if sep}

    def allow_bootstrap(self) -> None:
        """Mark this node's state as the one to start the cluster from (Galera refuses others)."""
        path = self._grastate_file
        with contextlib.suppress(FileNotFoundError):
            text = path.read_text(encoding="utf-8")
            # Written in place: the file keeps its owner, the user the server runs as.
            with open(path, "r+", encoding="utf-8") as f:
                f.write(re.sub(r"(?m)^safe_to_bootstrap:.*$", "safe_to_bootstrap: 1", text))
                f.truncate()

    # -- start and stop ------------------------------------------------------

    def start(self, timeout: float = 120, *, bootstrap: bool = False) -> None:
        """Start the node and wait until it is synced with the cluster.

        A node joins the running nodes, receiving what it missed (IST, or a
        whole copy by rsync: SST).  ``bootstrap`` starts a new primary
        component from this node's state instead, for the first node of a
        cluster none of whose nodes runs (`GaleraCluster.start` chooses it).
        A node this call spawned is stopped again if it does not sync in
        ``timeout`` seconds.
        """
        if self.pid is not None:
            self.wait_synced(timeout)
            return
        if not bootstrap and not any(node.pid is not None for node in self.cluster.nodes if node is not self):
            raise ClusterError(
                f"no other node of the cluster in {self.cluster.datadir} is running, so {self.name} has "
                "nobody to join: start the whole cluster (windvane db start), which starts it from the "
                "node that went furthest"
            )
        self.cluster.check_ports(self)
        deadline = time.monotonic() + timeout
        args = ["--wsrep-new-cluster"] if bootstrap else []
        position = self.position()
        if position.recovered:
            # As the system service's galera_recovery does: without it a killed node starts from no state,
            # so it joins by a whole copy (SST), or bootstraps a new cluster history.
            args.append(f"--wsrep-start-position={position.uuid}:{position.seqno}")
        self._recovered = None
        self.server.start(timeout, args=args, create_database=False)
        try:
            self.wait_synced(deadline - time.monotonic())
        except BaseException:  # Ctrl-C too: a node this start spawned must not stay running
            self.stop_or_kill()
            raise

    def wait_synced(self, timeout: float) -> NodeStatus:
        """Wait until the node serves clients with the whole state of the primary component."""
        deadline = time.monotonic() + max(timeout, 0)
        while True:
            status = self.status()
            if status.synced:
                return status
            if not status.running:
                raise ClusterError(with_log(f"{self.name} exited while joining the cluster", self.error_log))
            if time.monotonic() >= deadline:
                raise ServerTimeoutError(
                    with_log(
                        f"{self.name} is not synced with the cluster in time ({status.describe()})", self.error_log
                    )
                )
            time.sleep(0.2)

    def stop(self, timeout: float = 60) -> bool:
        """Shut the node down cleanly; the cluster goes on without it.  True if it was running."""
        return self.server.stop(timeout)

    def kill(self, timeout: float = 30) -> bool:
        """Kill the node with SIGKILL, as a crash would.  True if it was running."""
        return self.server.kill(timeout)

    def stop_or_kill(self) -> None:
        """Stop the node, killing it if it does not stop: it must not stay running."""
        try:
            self.server.stop(timeout=60)
        except ServerError:
            self.server.kill()


class GaleraCluster:
    """A local Galera cluster of ``size`` private MariaDB servers under ``datadir``.

    ``size`` defaults to what the directory records, else 3.  ``base_port``
    fixes the ports (node i uses ``base_port + 10*(i-1)`` and the three
    after it) and makes each node listen on its MariaDB port too (root has
    no password: single-user machines only); without it the nodes take
    free ports for Galera and serve clients on their sockets only.
    ``overrides`` replace settings of the shipped mariadb.cnf as for
    `MariaDBServer` (over `NODE_OVERRIDES`); ``provider_options`` replace
    `PROVIDER_OPTIONS`.

    All state lives in the data directory: any process may create a
    GaleraCluster on it and ask its status, stop or kill it.
    """

    def __init__(
        self,
        datadir: str | os.PathLike[str],
        size: int | None = None,
        *,
        base_port: int | None = None,
        overrides: Mapping[str, str | None] | None = None,
        provider_options: Mapping[str, str] | None = None,
    ) -> None:
        self.datadir = Path(os.path.abspath(os.fspath(datadir)))
        recorded = self._read_marker()
        if size is not None and not 1 <= size <= _MAX_NODES:
            raise ServerConfigError(f"invalid cluster size {size}: use 1-{_MAX_NODES} nodes (3 is usual)")
        if base_port is not None and not 1024 <= base_port <= 65535 - 10 * (size or 3):
            raise ServerConfigError(f"invalid base port {base_port}: use 1024-{65535 - 10 * (size or 3)}")
        if recorded is not None:
            for key, asked in (("size", size), ("base_port", base_port)):
                if asked is not None and asked != recorded[key]:
                    raise ServerConfigError(
                        f"the cluster in {self.datadir} has {key.replace('_', ' ')} {recorded[key]}, not {asked}: "
                        f"leave it out, or use a new directory for another cluster"
                    )
        self.size: int = recorded["size"] if recorded else size or 3
        self._base_port: int | None = recorded["base_port"] if recorded else base_port
        self._tcp: bool = bool(recorded["tcp"]) if recorded else base_port is not None
        self.overrides = {**NODE_OVERRIDES, **(overrides or {})}
        self.provider_options = {**PROVIDER_OPTIONS, **(provider_options or {})}
        self._user = "mysql" if os.geteuid() == 0 else None
        self.nodes: list[GaleraNode] = []
        if self._base_port is not None:
            self.nodes = [self._make_node(i) for i in range(1, self.size + 1)]

    # -- layout ------------------------------------------------------------

    @property
    def marker(self) -> Path:
        return self.datadir / MARKER

    def _read_marker(self) -> dict[str, int] | None:
        try:
            data = json.loads(self.marker.read_text(encoding="utf-8"))
            return {"size": int(data["size"]), "base_port": int(data["base_port"]), "tcp": int(bool(data["tcp"]))}
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ServerConfigError(
                f"{self.marker} is not a cluster description windvane wrote ({exc}); restore it or use a new directory"
            ) from exc

    def _ports(self, index: int) -> tuple[int, ...]:
        assert self._base_port is not None
        first = self._base_port + 10 * (index - 1)
        return (first, first + 1, first + 2, first + 3)

    def _make_node(self, index: int) -> GaleraNode:
        port, gcomm, ist, sst = ports = self._ports(index)
        everyone = ",".join(f"127.0.0.1:{self._ports(i)[1]}" for i in range(1, self.size + 1))
        options = {
            **self.provider_options,
            "gmcast.listen_addr": f"tcp://127.0.0.1:{gcomm}",
            "ist.recv_addr": f"127.0.0.1:{ist}",
        }
        settings: list[tuple[str, str | None]] = [
            # What Galera requires of every node: row-based replication, and auto-increment locking that
            # does not depend on statement order.
            ("binlog_format", "ROW"),
            ("innodb_autoinc_lock_mode", "2"),
            ("wsrep_on", "ON"),
            ("wsrep_provider", self._provider_path()),
            ("wsrep_cluster_name", _CLUSTER_NAME),
            ("wsrep_node_name", f"node{index}"),
            ("wsrep_node_address", f"127.0.0.1:{gcomm}"),
            ("wsrep_cluster_address", f"gcomm://{everyone}"),
            ("wsrep_provider_options", ";".join(f"{k}={v}" for k, v in options.items())),
            ("wsrep_sst_method", "rsync"),
            ("wsrep_sst_receive_address", f"127.0.0.1:{sst}"),
        ]
        server = MariaDBServer(
            self.datadir / f"node{index}",
            port=port if self._tcp else None,
            overrides=self.overrides,
            settings=settings,
            user=self._user,
        )
        return GaleraNode(self, index, server, ports)

    @staticmethod
    def _provider_path() -> str:
        # Written into the configuration only at a start, which checks first that the provider exists.
        return installed_provider() or PROVIDER_PATHS[0]

    def _create_layout(self) -> None:
        """Create the directory and its marker, choosing free ports, unless it is a cluster already."""
        if self.marker.is_file():
            return
        if self.datadir.exists():
            if not self.datadir.is_dir():
                raise ServerConfigError(f"data directory {self.datadir} exists and is not a directory")
            stray = sorted(p.name for p in self.datadir.iterdir() if p.name != ".cluster.lock")
            if stray:
                what = "a single server's data directory" if "mysql" in stray else "not a cluster directory"
                raise ServerConfigError(
                    f"{self.datadir} is {what} (it contains {', '.join(stray[:5])}); "
                    "use a new or empty directory for a cluster"
                )
        try:
            # Others may pass through (the nodes' user) but not list it; each node's directory is its own.
            self.datadir.mkdir(mode=0o711, parents=True, exist_ok=True)
            self.datadir.chmod(0o711)
        except OSError as exc:
            raise ServerConfigError(f"cannot create data directory {self.datadir}: {exc}") from exc
        if self._base_port is None:
            self._base_port = self._free_base_port()
        self.nodes = [self._make_node(i) for i in range(1, self.size + 1)]
        data = {"size": self.size, "base_port": self._base_port, "tcp": self._tcp}
        tmp = self.marker.with_name(MARKER + ".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.marker)

    def _free_base_port(self) -> int:
        span = 10 * self.size
        for _ in range(200):
            base = random.randrange(_PORT_RANGE[0], _PORT_RANGE[1] - span, 10)
            if all(_port_free(base + 10 * i + k) for i in range(self.size) for k in range(4)):
                return base
        raise ServerConfigError(
            f"no {self.size} blocks of free ports found in {_PORT_RANGE[0]}-{_PORT_RANGE[1]}; "
            "choose a base port (--port) whose ports are free"
        )

    def check_ports(self, node: GaleraNode) -> None:
        """Raise ServerConfigError if another program holds a port ``node`` (not running) must listen on."""
        names = ("MariaDB", "group communication", "IST", "SST")
        for name, port in zip(names, node.ports, strict=True):
            if (name != "MariaDB" or self._tcp) and not _port_free(port):
                raise ServerConfigError(
                    f"127.0.0.1:{port}, the {name} port of {node.name} of the cluster in {self.datadir}, "
                    "is taken by another program; stop it, or use a new directory (new ports)"
                )

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        # Serialises starts across processes, as MariaDBServer does for one server.
        with exclusive_lock(self.datadir / ".cluster.lock"):
            yield

    # -- nodes and URLs ----------------------------------------------------

    def node(self, index: int) -> GaleraNode:
        """Node ``index``, counted from 1 as the directories are (``node(1)`` lives in DATADIR/node1)."""
        if not self.nodes:
            raise ServerConfigError(f"{self.datadir} holds no cluster yet: start it first")
        if not 1 <= index <= len(self.nodes):
            raise ServerConfigError(f"no node {index}: the cluster has nodes 1-{len(self.nodes)}")
        return self.nodes[index - 1]

    def url(self, database: str = DEFAULT_DATABASE) -> str:
        """The cluster store URL of ``database``: every node's socket, in node order."""
        check_database_name(database)
        if not self.nodes:
            raise ServerConfigError(f"{self.datadir} holds no cluster yet: start it first")
        sockets = ",".join(quote(node.socket, safe="/") for node in self.nodes)
        return f"mariadb://root@/{database}?unix_socket={sockets}"

    def __repr__(self) -> str:
        return f"GaleraCluster({str(self.datadir)!r}, size={self.size})"

    # -- state -------------------------------------------------------------

    def status(self) -> ClusterStatus:
        """Each node's process and Galera state (no node before the first start)."""
        return ClusterStatus(self.size, [node.status() for node in self.nodes])

    def wait_synced(self, timeout: float = 120) -> ClusterStatus:
        """Wait until every node runs, synced, in one primary component of all of them."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            if status.up:
                return status
            statuses = status.nodes
            stopped = [s.name for s in statuses if not s.running]
            if stopped:
                raise ClusterError(
                    f"{', '.join(stopped)} of the cluster in {self.datadir} not running; start "
                    "the cluster (or the node) again"
                )
            if time.monotonic() >= deadline:
                states = "; ".join(s.describe() for s in statuses)
                logs = ", ".join(str(node.error_log) for node in self.nodes)
                raise ServerTimeoutError(f"the cluster is not synced in time ({states}); read {logs}")
            time.sleep(0.2)

    # -- start and stop ------------------------------------------------------

    def start(self, timeout: float = 180) -> str:
        """Start every node that is not running and return the cluster URL of the 'windvane' database.

        With no node running, the cluster starts from the node whose state
        goes furthest (the one Galera marks safe to bootstrap after a clean
        stop; after a crash, the highest position ``mariadbd
        --wsrep-recover`` finds), then the others join it.  Idempotent.
        Nodes this call spawned are stopped again on any failure, so a
        failed start leaves nothing running; ``timeout`` bounds the whole
        start.
        """
        check_connector()
        find_provider()
        if find_program("rsync") is None:
            raise ServerNotFoundError(
                "rsync (Galera's state transfer) was not found; install it: apt-get install rsync"
            )
        deadline = time.monotonic() + timeout
        self._create_layout()
        started: list[GaleraNode] = []
        with self._lock():
            try:
                if all(node.pid is None for node in self.nodes):
                    first = self._first_node()
                    started.append(first)
                    first.start(deadline - time.monotonic(), bootstrap=True)
                else:
                    self._restore_primary()
                for node in self.nodes:
                    if node.pid is None:
                        started.append(node)
                        node.start(deadline - time.monotonic())
                self.wait_synced(deadline - time.monotonic())
                self._create_database(DEFAULT_DATABASE)
            except BaseException:  # Ctrl-C too: nodes this start spawned must not stay running
                for node in reversed(started):
                    node.stop_or_kill()
                raise
        return self.url()

    def _restore_primary(self) -> None:
        """Make the running nodes a primary component again if they lost quorum (the others died)."""
        running = [(node, node.status()) for node in self.nodes if node.pid is not None]
        if any(status.cluster_status == "Primary" for _, status in running):
            return
        answering = [(node, status) for node, status in running if status.last_committed is not None]
        if not answering:
            return  # still starting, or hung: joining nodes find out, and say so
        # The running nodes hold everything committed: a commit reaches every member of the primary
        # component before it returns, and a component without quorum commits nothing.
        node, _ = max(answering, key=lambda pair: pair[1].last_committed or -1)
        conn = node.connect()
        try:
            conn.cursor().execute("SET GLOBAL wsrep_provider_options = 'pc.bootstrap=YES'")
        finally:
            conn.close()
        node.wait_synced(60)

    def _first_node(self) -> GaleraNode:
        """The node to start the cluster from: Galera's safe one, else the one that went furthest."""
        known = [node for node in self.nodes if node.server.is_initialised()]
        if not known:
            return self.nodes[0]
        positions = {node.index: node.position() for node in known}
        safe = [node for node in known if positions[node.index].safe_to_bootstrap]
        if safe:
            return safe[0]
        # max() keeps the first of equals: the lowest-numbered of the nodes that went furthest.
        first = max(known, key=lambda node: positions[node.index].seqno)
        first.allow_bootstrap()
        return first

    def _create_database(self, name: str) -> None:
        conn = self.nodes[0].connect()
        try:
            conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
        finally:
            conn.close()

    def stop(self, timeout: float = 60) -> bool:
        """Shut every node down cleanly, the last node first; True if any was running.

        The node stopped last (node1) holds the cluster's last state and is
        marked safe to start the cluster from.
        """
        stopped = False
        for node in reversed(self.nodes):
            stopped = node.stop(timeout) or stopped
        return stopped

    def kill(self, timeout: float = 30) -> bool:
        """Kill every node with SIGKILL, as a power cut would; True if any was running."""
        killed = False
        for node in self.nodes:
            killed = node.kill(timeout) or killed
        return killed
