"""`windvane db`: the private MariaDB server."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from windvane.cli.root import BadInput, cli, ops_failure

if TYPE_CHECKING:
    from windvane.ops import mariadb_server as dbserver


def _server(datadir: str, port: int | None = None) -> dbserver.MariaDBServer:
    from windvane.ops import mariadb_server as dbserver

    try:
        return dbserver.MariaDBServer(datadir, port=port)
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
@_timeout("Seconds to wait for the server to accept connections.")
def start(datadir: str, port: int | None, timeout: float) -> None:
    """Start the server (initialising DATADIR on first use) and print the store URL.

    The URL is printed alone on the last line of standard output.  Starting a
    running server just prints its URL again.  After a crash or kill -9,
    start it again: crash recovery runs on its own.

    Exit code 2 if MariaDB or its Python connector is missing (pip install
    'windvane[mariadb]') or DATADIR is unusable, 1 if the server fails or is
    not ready within --timeout; a server this command started is then
    stopped again, so a failed start leaves nothing running.
    """
    from windvane.ops import mariadb_server as dbserver

    server = _server(datadir, port)
    click.echo(f"starting MariaDB in {server.datadir} ...", err=True)
    try:
        url = server.start(timeout=timeout)
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
    """Tell whether the server is running; exit code 0 if it is, 1 if not."""
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
    click.get_current_context().exit(0 if st.running else 1)
