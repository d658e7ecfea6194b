"""`windvane db`: the private MariaDB server."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from windvane.cli.root import BadInput, cli, ops_failure

if TYPE_CHECKING:
    from windvane.ops import galera
    from windvane.ops import mariadb_server as dbserver


def _server(datadir: str, port: int | None = None) -> dbserver.MariaDBServer:
    """The server of ``datadir`` in its replication role, if it has one (a primary, a replica)."""
    from windvane.ops import mariadb_server as dbserver
    from windvane.ops import replica

    try:
        return replica.open_server(datadir, port=port)
    except dbserver.ServerConfigError as exc:
        raise BadInput(str(exc)) from exc


def _cluster(datadir: str, size: int | None = None, port: int | None = None) -> galera.GaleraCluster | None:
    """The Galera cluster of ``datadir`` when it holds one or ``size`` asks for one, else None."""
    from windvane.ops import galera
    from windvane.ops import mariadb_server as dbserver

    if size is None and not galera.is_cluster_directory(datadir):
        return None
    try:
        return galera.GaleraCluster(datadir, size, base_port=port)
    except dbserver.ServerConfigError as exc:
        raise BadInput(str(exc)) from exc


DATADIR = click.option(
    "--datadir",
    required=True,
    envvar="WINDVANE_DATADIR",
    show_envvar=True,
    type=click.Path(file_okay=False, dir_okay=True, path_type=str),
    help="Data directory of the private MariaDB server (created on first start).",
)


def _timeout(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The --timeout option of a command waiting for the server: seconds, 60 by default."""
    return click.option("--timeout", type=click.FloatRange(min=1), default=60, show_default=True, help=help_text)


@cli.group()
def db() -> None:
    """Run the private MariaDB server that holds the store.

    The server is the system's mariadbd (apt-get install mariadb-server),
    run on a data directory of your choice with windvane's tuned settings.
    It needs no system service and no password: clients connect as root
    over the unix socket inside the data directory.
    """


@db.command(short_help="Start the server and print the store URL.")
@DATADIR
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Also listen on 127.0.0.1:PORT (root has no password: single-user machines only). Default: unix socket only.",
)
@click.option(
    "--replica-of",
    "replica_of",
    metavar="PRIMARY",
    default=None,
    help="Make DATADIR a read-only replica of PRIMARY: the data directory of a server started by "
    "`windvane db start` (given its binary log and a 127.0.0.1 port if it has none: it restarts), "
    "or the mariadb://user:password@host:port/db URL of a server with its binary log on.",
)
@click.option(
    "--cluster",
    "cluster_size",
    type=click.IntRange(1, 9),
    metavar="N",
    default=None,
    help="Start a local Galera cluster of N servers in DATADIR/node1 ... nodeN instead of one server, "
    "and print the cluster URL. With --port, node i listens on PORT+10*(i-1) and Galera uses the three "
    "ports after it; without, Galera takes free ports and clients use the nodes' sockets.",
)
@_timeout("Seconds to wait for the server (with --cluster: every node) to accept connections.")
def start(datadir: str, port: int | None, replica_of: str | None, cluster_size: int | None, timeout: float) -> None:
    """Start the server (initialising DATADIR on first use) and print the store URL.

    The URL is printed alone on the last line of standard output.  Starting a
    running server just prints its URL again.  After a crash or kill -9,
    start it again: crash recovery runs on its own.

    Exit code 2 if MariaDB or its Python connector is missing (pip install
    'windvane[mariadb]') or DATADIR is unusable, 1 if the server fails or is
    not ready within --timeout; a server this command started is then
    stopped again, so a failed start leaves nothing running.

    With --replica-of, DATADIR (new) gets a copy of PRIMARY's databases and
    then applies PRIMARY's binary log from the copy's GTID position on,
    read-only; later starts of DATADIR start it as that replica again.
    Exit code 2 if DATADIR holds another server or PRIMARY is neither a data
    directory nor a URL, 1 if the copy fails (remove DATADIR and retry).

    With --cluster N (later starts of DATADIR need not repeat it), the nodes
    start one after another, the first from the node whose state went
    furthest, and the URL names every node's socket.  Started as root, the
    nodes run as the mysql user (Galera's rsync state transfer needs it).
    Exit code 2 also if the Galera provider or rsync is missing (apt-get
    install galera-4 rsync) or N differs from DATADIR's cluster.
    """
    from windvane.ops import mariadb_server as dbserver
    from windvane.ops import replica

    cluster = _cluster(datadir, cluster_size, port)
    if cluster is not None:
        if replica_of is not None:
            raise BadInput(
                f"--replica-of makes a single server a replica; {datadir} holds (or --cluster asks for) "
                "a Galera cluster, whose nodes replicate to each other"
            )
        _start_cluster(cluster, timeout)
        return

    server = _server(datadir, port)
    click.echo(f"starting MariaDB in {server.datadir} ...", err=True)
    try:
        if replica_of is None:
            server = replica.start_server(server.datadir, port=port, timeout=timeout)
        else:
            if not replica_of.startswith("mariadb://") and replica.read_role(replica_of) is None:
                click.echo(
                    f"making {replica_of} a replication primary: binary log on, a port on 127.0.0.1 "
                    "(a server running there restarts) ...",
                    err=True,
                )
            server = replica.start_replica(server.datadir, replica_of, port=port, timeout=timeout)
        url = server.url()
    except dbserver.ServerError as exc:
        raise ops_failure(exc) from exc
    status = server.status()
    click.echo(f"running (pid {status.pid}); error log: {server.error_log}", err=True)
    click.echo(url)


def _start_cluster(cluster: galera.GaleraCluster, timeout: float) -> None:
    from windvane.ops import mariadb_server as dbserver

    click.echo(f"starting a {cluster.size}-node Galera cluster in {cluster.datadir} ...", err=True)
    try:
        url = cluster.start(timeout=timeout)
    except dbserver.ServerError as exc:
        raise ops_failure(exc) from exc
    for node in cluster.status().nodes:
        click.echo(node.describe(), err=True)
    click.echo(f"error logs: {cluster.datadir}/node*/error.log", err=True)
    click.echo(url)


@db.command(short_help="Shut the server down cleanly.")
@DATADIR
@_timeout("Seconds to wait for a clean shutdown.")
def stop(datadir: str, timeout: float) -> None:
    """Shut the server (every node of a cluster) down cleanly (does nothing if it is not running)."""
    from windvane.ops import mariadb_server as dbserver

    server = _cluster(datadir) or _server(datadir)
    try:
        stopped = server.stop(timeout=timeout)
    except dbserver.ServerError as exc:
        raise ops_failure(exc) from exc
    click.echo("stopped" if stopped else f"not running ({server.datadir})")


@db.command(short_help="Show whether the server is running (exit 0 if so, 1 if not).")
@DATADIR
def status(datadir: str) -> None:
    """Tell whether the server is running; exit code 0 if it is, 1 if not.

    A running replica also shows its replication (Slave_IO_Running,
    Slave_SQL_Running, Seconds_Behind_Master, gtid_slave_pos, the last error),
    a primary its role.

    A cluster shows each node's Galera state (wsrep_local_state_comment,
    wsrep_cluster_size, wsrep_cluster_status); exit code 0 only when every
    node runs, synced, in the primary component of all of them.
    """
    cluster = _cluster(datadir)
    if cluster is not None:
        _cluster_status(cluster)
    server = _server(datadir)
    st = server.status()
    click.echo(f"running: {'yes' if st.running else 'no'}")
    click.echo(f"datadir: {st.datadir}")
    if st.running:
        click.echo(f"pid:     {st.pid}")
    click.echo(f"socket:  {st.socket}")
    if st.port is not None:
        click.echo(f"port:    {st.port}")
    if st.url:
        click.echo(f"url:     {st.url}")
    if st.running:
        _replication_status(server)
    click.get_current_context().exit(0 if st.running else 1)


def _replication_status(server: dbserver.MariaDBServer) -> None:
    from windvane.ops import mariadb_server as dbserver
    from windvane.ops import replica

    role = replica.read_role(server.datadir)
    if isinstance(role, replica.PrimaryRole):
        click.echo(f"role:    replication primary (binary log on, replicas connect to 127.0.0.1:{role.port})")
    elif isinstance(role, replica.ReplicaRole):
        click.echo("role:    read-only replica")
        try:
            lines = replica.replica_status(server).lines()
        except dbserver.ServerError as exc:
            lines = [("replication", f"cannot be asked ({exc})")]
        width = max(len(label) for label, _ in lines) + 1
        for label, value in lines:
            click.echo(f"{label + ':':<{width}} {value}")


def _cluster_status(cluster: galera.GaleraCluster) -> None:
    status = cluster.status()
    click.echo(f"cluster: {cluster.size} nodes in {cluster.datadir}")
    for node in status.nodes:
        click.echo(node.describe())
        click.echo(f"  socket: {node.server.socket}")
        if node.server.port is not None:
            click.echo(f"  port:   {node.server.port}")
    if status.up:
        click.echo(f"url:     {cluster.url()}")
    click.get_current_context().exit(0 if status.up else 1)
