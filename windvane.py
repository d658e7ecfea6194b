"""windvane: the command line.

This module only wires the layers together (argument parsing, messages, exit
codes); the work is done in the neostore package.  Exit codes: 0 success,
1 failure (or "not running" for `db status`), 2 bad input or a missing
prerequisite.
"""

from __future__ import annotations

import asyncio
import logging
import time

import click

import arrays
import ingest
import neostore
from ingest.service import ServeConfig, Service, parse_address
from neostore import server as dbserver


class BadInput(click.ClickException):
    """A usage problem the user can fix (bad path, missing program): exit code 2."""

    exit_code = 2


def _server(datadir: str, port: int | None = None) -> dbserver.MariaDBServer:
    try:
        return dbserver.MariaDBServer(datadir, port=port)
    except dbserver.ServerConfigError as exc:
        raise BadInput(str(exc)) from exc


def _fail(exc: dbserver.ServerError) -> click.ClickException:
    """Map a server error to the CLI's exit codes."""
    if isinstance(exc, (dbserver.ServerConfigError, dbserver.ServerNotFoundError)):
        return BadInput(str(exc))
    return click.ClickException(str(exc))


DATADIR = click.option(
    "--datadir",
    required=True,
    envvar="WINDVANE_DATADIR",
    show_envvar=True,
    type=click.Path(file_okay=False, dir_okay=True, path_type=str),
    help="Data directory of the private MariaDB server (created on first start).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="windvane")
def cli() -> None:
    """windvane: big-data ingestion into a deduplicating, history-preserving object store.

    Data lands in neostore, an object store kept in MariaDB (or, for small
    setups, SQLite).  To use MariaDB, start a private server and use the
    store URL it prints:

    \b
        windvane db start --datadir ./db
        windvane db status --datadir ./db
        windvane db stop --datadir ./db

    Inspect or pack a store (SQLite or MariaDB):

    \b
        windvane store info sqlite:///windvane.db
        windvane store pack sqlite:///windvane.db --keep-days 30

    Receive fluentd Forward and HTTP data into streams (schemas/ says which tags go where):

    \b
        windvane serve --store sqlite:///windvane.db --schemas schemas/

    List the arrays a store holds, and an array's commits:

    \b
        windvane arrays ls sqlite:///windvane.db
        windvane arrays history sqlite:///windvane.db turbine1/vibration
    """


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
    help="Also listen on 127.0.0.1:PORT (root has no password: single-user machines only). "
    "Default: unix socket only.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=60,
    show_default=True,
    help="Seconds to wait for the server to accept connections.",
)
def start(datadir: str, port: int | None, timeout: float) -> None:
    """Start the server (initialising DATADIR on first use) and print the store URL.

    The URL is printed alone on the last line of standard output.  Starting a
    running server just prints its URL again.  After a crash or kill -9,
    start it again: crash recovery runs on its own.
    """
    server = _server(datadir, port)
    click.echo(f"starting MariaDB in {server.datadir} ...", err=True)
    try:
        url = server.start(timeout=timeout)
    except dbserver.ServerError as exc:
        raise _fail(exc) from exc
    status = server.status()
    click.echo(f"running (pid {status.pid}); error log: {server.error_log}", err=True)
    click.echo(url)


@db.command(short_help="Shut the server down cleanly.")
@DATADIR
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=60,
    show_default=True,
    help="Seconds to wait for a clean shutdown.",
)
def stop(datadir: str, timeout: float) -> None:
    """Shut the server down cleanly (does nothing if it is not running)."""
    server = _server(datadir)
    try:
        stopped = server.stop(timeout=timeout)
    except dbserver.ServerError as exc:
        raise _fail(exc) from exc
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


def _open_store(url: str, **options) -> neostore.Store:
    try:
        return neostore.open(url, **options)
    except neostore.InvalidURLError as exc:
        raise BadInput(str(exc)) from exc
    except neostore.NeoStoreError as exc:
        raise click.ClickException(str(exc)) from exc


def _tid_text(tid: bytes) -> str:
    if tid == neostore.ZERO:
        return "none"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(neostore.tids.tid_time(neostore.u64(tid))))
    return f"0x{tid.hex()} ({when})"


STORE_URL = click.argument("url", metavar="URL")


@cli.group()
def store() -> None:
    """Inspect and maintain a store.

    \b
    URL is one of:
        sqlite:///relative.db   sqlite:////abs/path.db
        mariadb://user:pw@host:port/db
        mariadb://user@/db?unix_socket=/path/sock[&engine=rocksdb]
    """


@store.command(short_help="Open (creating if needed) a store and describe it.")
@STORE_URL
def info(url: str) -> None:
    """Open the store at URL, creating it if it does not exist, and describe it."""
    with _open_store(url) as st:
        for name, value in st.backend.describe().items():
            click.echo(f"{name + ':':<17}{value}")
        counts = st.counts()
        click.echo(f"{'transactions:':<17}{counts['trans']}")
        click.echo(f"{'revisions:':<17}{counts['obj']}")
        click.echo(f"{'values:':<17}{counts['data']} (stored once each, {st.value_size():,} bytes)")
        click.echo(f"{'last commit:':<17}{_tid_text(st.last_transaction())}")
        click.echo(f"{'packed up to:':<17}{_tid_text(st.pack_tid())}")


@store.command(short_help="Drop old revisions and unreferenced values.")
@STORE_URL
@click.option(
    "--keep-days",
    type=click.FloatRange(min=0),
    default=0,
    show_default=True,
    help="Keep every revision visible during the last DAYS days (0: keep only the latest).",
)
@click.option(
    "--zodb-gc/--no-zodb-gc",
    default=False,
    help="Also delete objects unreachable from the root. Only for stores written through ZODB "
    "(values are pickles).",
)
def pack(url: str, keep_days: float, zodb_gc: bool) -> None:
    """Remove revisions no reader of the last --keep-days can see, and values nothing uses.

    Works in small batches: writers wait for at most one batch, readers never.
    """
    with _open_store(url) as st:
        last = st.last_transaction()
        if last == neostore.ZERO:
            click.echo("nothing to pack: the store has no transactions")
            return
        cutoff = neostore.p64(neostore.tids.tid_from_time(time.time() - keep_days * 86400))
        tid = min(cutoff, last)
        references = None
        if zodb_gc:
            from ZODB.serialize import referencesf

            references = referencesf
        counts = st.counts()
        with click.progressbar(
            length=counts["obj"] + counts["data"], label=f"packing up to {_tid_text(tid)}", file=None
        ) as bar:
            stats = st.pack(tid, references=references, progress=lambda phase, n: bar.update(n))
        click.echo(
            f"removed {stats.revisions_deleted} revisions ({stats.objects_collected} unreachable objects) "
            f"and {stats.data_deleted} values in {stats.batches} batches, {stats.seconds:.1f} s"
        )


@cli.group(name="arrays")
def arrays_group() -> None:
    """Look at the chunked arrays a store holds (read-only)."""


@arrays_group.command(name="ls", short_help="List the arrays, with shape, type and chunks.")
@STORE_URL
@click.argument("prefix", default="")
def list_arrays(url: str, prefix: str) -> None:
    """List the arrays whose names start with PREFIX (all by default)."""
    with _open_store(url, read_only=True) as st:
        names = arrays.array_names(st, prefix)
        if not names:
            click.echo(f"no arrays{' under ' + repr(prefix) if prefix else ''}")
        for name in names:
            with arrays.open(st, name) as a:
                shape = "x".join(map(str, a.shape))
                chunks = "x".join(map(str, a.chunks))
                codec = "+".join(c["name"] for c in a.codec)
                click.echo(f"{name}  {shape} {a.dtype}  chunks {chunks}  {codec}  {a.nbytes:,} bytes")


@arrays_group.command(short_help="List the commits that changed an array.")
@STORE_URL
@click.argument("name")
def history(url: str, name: str) -> None:
    """List the commits that changed array NAME, oldest first: tid, time, message."""
    with _open_store(url, read_only=True) as st:
        try:
            commits = arrays.history(st, name)
        except arrays.ArrayNotFoundError as exc:
            raise BadInput(str(exc)) from exc
        for c in commits:
            meta = f"  {c.metadata}" if c.metadata else ""
            click.echo(f"0x{c.tid.hex()}  {c.time:%Y-%m-%d %H:%M:%S.%f} UTC  {c.message}{meta}")


@cli.command(short_help="Receive fluentd Forward and HTTP data into streams.")
@click.option("--store", "store_url", required=True, envvar="WINDVANE_STORE", show_envvar=True,
              help="Store URL: sqlite:///file.db, mariadb://user@/db?unix_socket=/path/sock, ...")
@click.option("--schemas", required=True, type=click.Path(exists=True, file_okay=False, path_type=str),
              help="Directory of stream schemas (*.toml): which tags go to which stream, with which fields.")
@click.option("--forward", default="127.0.0.1:24224", show_default=True, metavar="HOST:PORT",
              help="Where to accept the fluentd Forward protocol (TCP, and UDP heartbeats); 'off' to disable.")
@click.option("--http", "http_address", default="127.0.0.1:9880", show_default=True, metavar="HOST:PORT",
              help="Where to accept HTTP posts (fluentd in_http and fluent-plugin-wendelin); 'off' to disable.")
@click.option("--shared-key", envvar="WINDVANE_SHARED_KEY", show_envvar=True,
              help="Forward protocol shared key: clients must complete the HELO/PING/PONG handshake.")
@click.option("--users", type=click.Path(exists=True, dir_okay=False, path_type=str),
              help="TOML file of users (password, bearer tokens): required for HTTP, and for Forward with --shared-key.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False, path_type=str),
              help="PEM certificate chain: serve Forward and HTTP over TLS (with --tls-key).")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False, path_type=str), help="PEM private key.")
@click.option("--commit-interval", default=0.0, show_default=True, metavar="MS", type=click.FloatRange(0, 10_000),
              help="Milliseconds to wait after a group's first arrival for more before committing. Groups form "
                   "anyway from what arrives while the previous commit runs; a wait saves commits at some latency.")
@click.option("--decode-workers", type=click.IntRange(0, 64), default=None, metavar="N",
              help="Processes that decode and validate Forward and HTTP payloads, so that more than one core "
                   "works; 0 decodes in the serving process. Default: one per core (at most 4), 0 on one core.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
def serve(store_url: str, schemas: str, forward: str, http_address: str, shared_key: str | None, users: str | None,
          tls_cert: str | None, tls_key: str | None, commit_interval: float, decode_workers: int | None,
          log_level: str) -> None:
    """Receive data and commit it durably: acknowledge only what is committed.

    Forward clients (fluentd, Fluent Bit, the fluent-logger libraries) get
    their ack once the chunk is committed; HTTP clients get their 2xx then.
    Records that do not fit their schema are kept, with the reason, in the
    tag's quarantine stream. When ready it prints the bound addresses and
    "ready"; SIGTERM or Ctrl-C stops it after committing what it received.
    """
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    off = ("", "off", "none")
    config = ServeConfig(
        store=store_url, schemas=schemas,
        forward=None if forward.lower() in off else forward,
        http=None if http_address.lower() in off else http_address,
        shared_key=shared_key, users=users, tls_cert=tls_cert, tls_key=tls_key,
        commit_interval=commit_interval / 1000, decode_workers=decode_workers,
    )
    if not (config.forward or config.http):
        raise BadInput("both --forward and --http are off: nothing to serve")
    try:
        for address, port in ((config.forward, 24224), (config.http, 9880)):
            if address:
                parse_address(address, port)  # refuse a bad address before opening anything
        service = Service(config)
    except (ingest.IngestError, neostore.NeoStoreError, ValueError) as exc:
        raise BadInput(str(exc)) from exc
    try:
        asyncio.run(_serve(service))
    except OSError as exc:  # typically the address is in use
        raise BadInput(f"cannot listen: {exc}") from exc


async def _serve(service: Service) -> None:
    # The one place that imports connectors: the layers meet here.
    from connectors.forward.server import ForwardServer
    from connectors.http.app import HttpServer, make_app

    config = service.config
    endpoints = []
    lines: list[tuple[str, object, str]] = []
    if config.forward:
        host, port = parse_address(config.forward, 24224)
        forward = ForwardServer(service.committer, host, port, shared_key=config.shared_key, users=service.users,
                                ssl=service.ssl, chunk_size_limit=config.chunk_size_limit,
                                decompressed_size_limit=config.decompressed_size_limit)
        endpoints.append(forward)
        lines.append(("forward", forward, host))
    if config.http:
        host, port = parse_address(config.http, 9880)
        app = make_app(service.committer, users=service.users, body_size_limit=config.body_size_limit,
                       decompressed_size_limit=config.decompressed_size_limit, health=service.health,
                       metrics=service.metric_samples, streams=service.streams)
        http = HttpServer(app, host, port, ssl=service.ssl)
        endpoints.append(http)
        lines.append(("http", http, host))

    def ready() -> None:
        for name, endpoint, host in lines:
            click.echo(f"{name}: {host}:{endpoint.port}")
        click.echo("ready")

    await service.run(endpoints, ready)


def main() -> None:
    """Entry point of the `windvane` console script."""
    cli(prog_name="windvane")


if __name__ == "__main__":
    main()
