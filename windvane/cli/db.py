"""`windvane db`: the private MariaDB server."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from windvane.cli.root import BadInput, cli, ops_failure

if TYPE_CHECKING:
    from windvane.ops import mariadb_server as dbserver


def _server(datadir: str, port: int | None = None) -> dbserver.MariaDBServer:
    """The server of ``datadir`` in its replication role, if it has one (a primary, a replica)."""
    from windvane.ops import mariadb_server as dbserver
    from windvane.ops import replica

    try:
        return replica.open_server(datadir, port=port)
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
@_timeout("Seconds to wait for the server to accept connections.")
def start(datadir: str, port: int | None, replica_of: str | None, timeout: float) -> None:
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
    """
    from windvane.ops import mariadb_server as dbserver
    from windvane.ops import replica

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


@db.command(short_help="Shut the server down cleanly.")
@DATADIR
@_timeout("Seconds to wait for a clean shutdown.")
def stop(datadir: str, timeout: float) -> None:
    """Shut the server down cleanly (does nothing if it is not running)."""
    from windvane.ops import mariadb_server as dbserver

    server = _server(datadir)
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
    """
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
    from windvane.ops import replica

    role = replica.read_role(server.datadir)
    if isinstance(role, replica.PrimaryRole):
        click.echo(f"role:    replication primary (binary log on, replicas connect to 127.0.0.1:{role.port})")
    elif isinstance(role, replica.ReplicaRole):
        click.echo("role:    read-only replica")
        try:
            lines = replica.replica_status(server).lines()
        except replica.ReplicationError as exc:
            lines = [("replication", f"cannot be asked ({exc})")]
        width = max(len(label) for label, _ in lines) + 1
        for label, value in lines:
            click.echo(f"{label + ':':<{width}} {value}")
