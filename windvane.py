"""windvane: the command line.

This module only wires the layers together (argument parsing, messages, exit
codes); the work is done in the neostore package.  Exit codes: 0 success,
1 failure (or "not running" for `db status`), 2 bad input or a missing
prerequisite (among them a store that does not exist: commands that only
read, and `store pack`, never create one), 3 `import` quarantined rows
(without --allow-rejects).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

import ingest
from connectors.forward.config import ForwardConfig
from connectors.http.config import HttpConfig
from connectors.limits import Limits
from connectors.mqtt.config import MqttConfig
from ingest.config import MAX_DECODE_WORKERS, CommitterConfig, ServiceConfig

if TYPE_CHECKING:
    from ssl import SSLContext

    import neostore
    from ingest.service import Service
    from neostore import server as dbserver


class BadInput(click.ClickException):
    """A usage problem the user can fix (bad path, missing program): exit code 2."""

    exit_code = 2


class RowsRejected(click.ClickException):
    """`windvane import` quarantined rows and was not told to allow it: exit code 3."""

    exit_code = 3


def _server(datadir: str, port: int | None = None) -> dbserver.MariaDBServer:
    from neostore import server as dbserver

    try:
        return dbserver.MariaDBServer(datadir, port=port)
    except dbserver.ServerConfigError as exc:
        raise BadInput(str(exc)) from exc


def _fail(exc: dbserver.ServerError) -> click.ClickException:
    """Map a server error to the CLI's exit codes."""
    from neostore import server as dbserver

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

    Or subscribe to an MQTT broker (--mqtt mqtt://host:1883), import files,
    follow a log file, and describe what a store holds:

    \b
        windvane import data/*.csv rec.wav --store sqlite:///windvane.db --tag plant1
        windvane tail /var/log/syslog --format syslog --store sqlite:///windvane.db --tag host.syslog
        windvane info --store sqlite:///windvane.db

    See it all work on sample data (a fresh SQLite store under ./var/):

    \b
        windvane demo

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

    Exit code 2 if MariaDB or its Python connector is missing (pip install
    'windvane[mariadb]') or DATADIR is unusable, 1 if the server fails or is
    not ready within --timeout; a server this command started is then
    stopped again, so a failed start leaves nothing running.
    """
    from neostore import server as dbserver

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
    from neostore import server as dbserver

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
    """The store at ``url`` (``read_only=True``/``create=False``: one that exists, else exit code 2)."""
    import neostore

    try:
        return neostore.open(url, **options)
    except neostore.StoreNotFoundError as exc:
        raise BadInput(f"{exc} (only writing commands such as import, serve and tail create a store)") from exc
    except neostore.InvalidURLError as exc:
        raise BadInput(str(exc)) from exc
    except neostore.NeoStoreError as exc:
        raise click.ClickException(str(exc)) from exc


def _tid_text(tid: bytes) -> str:
    import neostore

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


@store.command(short_help="Describe a store: engine, row counts, bytes, last commit and pack.")
@STORE_URL
def info(url: str) -> None:
    """Describe the store at URL (read-only: exit code 2 if there is no store there, none is created).

    `windvane info --store URL` adds what its streams hold.
    """
    from ingest import info as contents

    with _open_store(url, read_only=True) as st:
        for line in contents.report_lines(contents.describe(st, streams=False)):
            click.echo(line)


@store.command(short_help="Drop old revisions and unreferenced values, and give the disk back.")
@STORE_URL
@click.option(
    "--keep-days",
    type=click.FloatRange(min=0),
    default=None,
    metavar="DAYS",
    help="Keep every state of the last DAYS days readable (0: keep only the latest). This or --before is required.",
)
@click.option(
    "--before",
    "before",
    default=None,
    metavar="TIME",
    help="Remove the states before TIME (ISO 8601, no zone means UTC, or epoch seconds); those from TIME on "
    "stay readable.",
)
@click.option(
    "--zodb-gc/--no-zodb-gc",
    default=False,
    help="Also delete objects unreachable from the root. Only for stores written through ZODB "
    "(values are pickles).",
)
@click.option(
    "--reclaim/--no-reclaim",
    default=True,
    show_default=True,
    help="Give the space freed back to the file system (SQLite: moves pages off the end of the file and "
    "cuts it; MariaDB: rebuilds online each table that lost at least an eighth of its rows). With "
    "--no-reclaim it stays inside the store for new data.",
)
@click.option(
    "--vacuum",
    is_flag=True,
    help="Also rewrite what cannot give space back in place: a SQLite file made before stores had "
    "incremental vacuum is rewritten once (needs free disk of twice its data; writers wait until it is "
    "done); on MariaDB every table pack deletes from is rebuilt, however little it lost.",
)
@click.option("--schemas", "schemas_dir", type=click.Path(exists=True, file_okay=False, path_type=str),
              help="Directory of stream schemas: first trim each stream whose schema has a retention "
                   "(retention = \"90d\") of its rows older than that, one commit per stream, and say what was trimmed.")
def pack(url: str, keep_days: float | None, before: str | None, zodb_gc: bool, reclaim: bool,
         vacuum: bool, schemas_dir: str | None) -> None:
    """Remove the history older than --keep-days (or --before), and values nothing uses,
    then give the disk they took back to the file system.

    Pack removes history for good: say how much to keep, with --keep-days DAYS
    or --before TIME (one of them, exit code 2 without). The states from that
    point on stay readable; older commits can no longer be opened (`arrays
    history` marks them). Works in small batches: writers wait for at most one
    batch, readers never (on MariaDB, statements on a table being rebuilt may
    wait as the rebuild starts and ends, 10 s at most).
    """
    import neostore

    if vacuum and not reclaim:
        raise BadInput("--vacuum gives space back to the file system: drop --no-reclaim to use it")
    before_time = _pack_before(keep_days, before)  # bad flags are refused before anything is done
    with _open_store(url, create=False) as st:
        if schemas_dir is not None:
            _apply_retention(st, schemas_dir)
        # --keep-days counts back from now, after the retention's trims: a pack keeping 0 days drops them too.
        since = before_time if before_time is not None else time.time() - keep_days * 86400
        last = st.last_transaction()
        if last == neostore.ZERO:
            click.echo("nothing to pack: the store has no transactions")
            return
        # Tids count from 1970 and no commit is later than now: the clamp keeps the time in their range.
        cutoff = neostore.p64(neostore.tids.tid_from_time(min(max(since, 0.0), time.time())))
        tid = min(cutoff, last)
        references = None
        if zodb_gc:
            from ZODB.serialize import referencesf

            references = referencesf
        counts = st.counts()
        with click.progressbar(
            length=counts["obj"] + counts["data"], label=f"packing up to {_tid_text(tid)}", file=None
        ) as bar:
            from arrays.row_log import pack_keep  # streams' row logs keep the revisions readers still need

            def progress(phase: str, n: int) -> None:
                if phase == "reclaim":
                    bar.label = "giving the space back to the file system"
                    bar.render_progress()
                else:
                    bar.update(n)

            stats = st.pack(tid, references=references, keep=pack_keep(st, tid), reclaim=reclaim, vacuum=vacuum,
                            progress=progress)
        click.echo(
            f"removed {stats.revisions_deleted} revisions ({stats.objects_collected} unreachable objects) "
            f"and {stats.data_deleted} values in {stats.batches} batches, {stats.seconds:.1f} s"
        )
        if reclaim:
            click.echo(f"gave back {stats.bytes_freed / 1e6:.1f} MB of disk: the store takes "
                       f"{stats.disk_after / 1e6:.1f} MB (it took {stats.disk_before / 1e6:.1f} MB)")
        else:
            click.echo(f"the store takes {stats.disk_after / 1e6:.1f} MB; the space pack freed stays in it "
                       "for new data")
        for note in stats.notes:
            click.echo(note)


def _apply_retention(st: neostore.Store, schemas_dir: str) -> None:
    """``store pack --schemas``: trim the streams whose schema has a retention, saying what was trimmed."""
    from ingest import retention
    from ingest.schema import load_schemas

    try:
        done = retention.apply_retention(st, load_schemas(schemas_dir))
    except ingest.IngestError as exc:
        raise BadInput(str(exc)) from exc
    for line in retention.report_lines(done):
        click.echo(line)


def _pack_before(keep_days: float | None, before: str | None) -> float | None:
    """--before as a Unix time (None with --keep-days): `store pack` takes exactly one of the two."""
    if (keep_days is None) == (before is None):
        raise BadInput("say how much history to keep, with one of --keep-days DAYS (every state of the last DAYS "
                       "days stays readable; 0 keeps only the latest) or --before TIME (the states before TIME "
                       "are removed): pack removes history for good")
    if before is None:
        return None
    from ingest.export.times import BadTime, parse_time

    try:
        return parse_time(before, "--before") / 1e9
    except BadTime as exc:
        raise BadInput(str(exc)) from exc


@cli.group(name="arrays")
def arrays_group() -> None:
    """Look at the chunked arrays a store holds (read-only: exit code 2 if there is no store at URL)."""


@arrays_group.command(name="ls", short_help="List the arrays, with shape, type and chunks.")
@STORE_URL
@click.argument("prefix", default="")
def list_arrays(url: str, prefix: str) -> None:
    """List the arrays whose names start with PREFIX (all by default)."""
    import arrays

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
    """List the commits that changed array NAME, oldest first: tid, time, message.

    A commit older than the store's last pack ends with "(packed: cannot be
    opened)": pack removed the state it left.
    """
    import arrays

    with _open_store(url, read_only=True) as st:
        try:
            commits = arrays.history(st, name)
        except arrays.ArrayNotFoundError as exc:
            raise BadInput(str(exc)) from exc
        for c in commits:
            meta = f"  {c.metadata}" if c.metadata else ""
            packed = "" if c.openable else "  (packed: cannot be opened)"
            click.echo(f"0x{c.tid.hex()}  {c.time:%Y-%m-%d %H:%M:%S.%f} UTC  {c.message}{meta}{packed}")


def _seconds(flag: str, default: float, help_text: str) -> Callable:
    """A ``serve`` option of a positive number of seconds."""
    return click.option(flag, default=default, show_default=True, metavar="SECONDS",
                        type=click.FloatRange(0, min_open=True), help=help_text)


@dataclass(frozen=True)
class ServeConfig:
    """Everything ``windvane serve`` is told: one configuration per component (None: that listener is off)."""

    service: ServiceConfig
    forward: ForwardConfig | None = field(default_factory=ForwardConfig)
    http: HttpConfig | None = field(default_factory=HttpConfig)
    mqtt: MqttConfig | None = None
    limits: Limits = field(default_factory=Limits)


@cli.command(short_help="Receive fluentd Forward and HTTP data into streams.")
@click.option("--store", "store_url", required=True, envvar="WINDVANE_STORE", show_envvar=True,
              help="Store URL: sqlite:///file.db, mariadb://user@/db?unix_socket=/path/sock, ...")
@click.option("--schemas", required=True, type=click.Path(exists=True, file_okay=False, path_type=str),
              help="Directory of stream schemas (*.toml): which tags go to which stream, with which fields.")
@click.option("--forward", default=ForwardConfig().address, show_default=True, metavar="HOST:PORT",
              help="Where to accept the fluentd Forward protocol (TCP, and UDP heartbeats); 'off' to disable.")
@click.option("--http", "http_address", default=HttpConfig().address, show_default=True, metavar="HOST:PORT",
              help="Where to accept HTTP posts (fluentd in_http and fluent-plugin-wendelin); 'off' to disable.")
@click.option("--shared-key", envvar="WINDVANE_SHARED_KEY", show_envvar=True,
              help="Forward protocol shared key: clients must complete the HELO/PING/PONG handshake. It protects "
                   "Forward only: with HTTP on, give --users too (or --http-auth none, or --http off).")
@click.option("--users", type=click.Path(exists=True, dir_okay=False, path_type=str),
              help="TOML file of users ([users.NAME] with password = \"...\" and/or tokens = [\"...\"]): HTTP asks "
                   "for Basic or Bearer credentials; Forward checks user passwords in its handshake, which needs "
                   "--shared-key (or --forward off).")
@click.option("--http-auth", type=click.Choice(["users", "none"]), default=None,
              help="How HTTP authenticates: 'users' (--users, the default when given) or 'none' (open: needed to "
                   "serve HTTP unauthenticated beside a Forward protected by --shared-key).")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False, path_type=str),
              help="PEM certificate chain: serve Forward and HTTP over TLS (with --tls-key).")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False, path_type=str), help="PEM private key.")
@click.option("--commit-interval", default=CommitterConfig.interval * 1000, show_default=True, metavar="MS",
              type=click.FloatRange(0, 10_000),
              help="Milliseconds to wait after a group's first arrival for more before committing. Groups form "
                   "anyway from what arrives while the previous commit runs; a wait saves commits at some latency.")
@click.option("--decode-workers", type=click.IntRange(0, 64), default=None, metavar="N",
              help="Processes that decode and validate Forward and HTTP payloads, so that more than one core "
                   f"works; 0 decodes in the serving process. Default: one per core (at most {MAX_DECODE_WORKERS}), "
                   "0 on one core.")
@click.option("--mqtt", "mqtt_url", default=None, metavar="URL",
              help="MQTT broker to subscribe to: mqtt://[user:password@]host[:port] or mqtts://...[?ca=ca.pem]. "
                   "QoS 1 messages are acknowledged once committed; topic a/b/c is tag a.b.c.")
@click.option("--mqtt-topic", "mqtt_topics", multiple=True, metavar="PATTERN",
              help=f"MQTT topic filter to subscribe to (repeatable). Default: {' '.join(MqttConfig.topics)!r}, "
                   "every topic.")
@click.option("--mqtt-client-id", default=None, metavar="ID",
              help="Client id of the persistent MQTT session (what the broker keeps for windvane while it is "
                   "down). Default: derived from the store URL, so a restart resumes the same session.")
@click.option("--memory-budget", default=Limits.memory_budget >> 20, show_default=True, metavar="MIB",
              type=click.IntRange(1, 1 << 20),
              help="Mebibytes of client data held in memory and not yet committed, for all Forward and HTTP "
                   "connections together (frames being read, decompressed payloads, requests waiting for their "
                   "commit). Past it Forward connections are not read and HTTP requests get 503 until commits "
                   "catch up.")
@click.option("--max-connections", default=Limits.max_connections, show_default=True, metavar="N",
              type=click.IntRange(1), help="Connections open at once on each of Forward and HTTP; more are "
                                           "closed as soon as they are accepted.")
@_seconds("--handshake-timeout", Limits.handshake_timeout,
          "Seconds a client has to complete the TLS handshake and, with --shared-key, the Forward HELO/PING/PONG.")
@_seconds("--idle-timeout", Limits.idle_timeout,
          "Seconds a Forward or HTTP connection may stay open sending nothing while nothing is owed to it. Keep it "
          "above the clients' flush interval (fluentd: 60 s) so they can reuse connections.")
@_seconds("--header-timeout", Limits.header_timeout,
          "Seconds an HTTP request's headers may take from their first byte; then the connection is closed.")
@_seconds("--body-timeout", Limits.body_timeout,
          "Seconds an HTTP request's body may take once its headers are in; then it is answered 408.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
def serve(store_url: str, schemas: str, forward: str, http_address: str, shared_key: str | None, users: str | None,
          http_auth: str | None, tls_cert: str | None, tls_key: str | None, commit_interval: float, decode_workers: int | None,
          mqtt_url: str | None, mqtt_topics: tuple[str, ...], mqtt_client_id: str | None, memory_budget: int,
          max_connections: int, handshake_timeout: float, idle_timeout: float, header_timeout: float,
          body_timeout: float, log_level: str) -> None:
    """Receive data and commit it durably: acknowledge only what is committed.

    Forward clients (fluentd, Fluent Bit, the fluent-logger libraries) get
    their ack once the chunk is committed; HTTP clients get their 2xx then.
    Records that do not fit their schema are kept, with the reason, in the
    tag's quarantine stream. When ready it prints the bound addresses and
    "ready"; SIGTERM or Ctrl-C stops it after committing what it received.
    Each listener's line says how it authenticates ("auth: ..."); it refuses
    to start with Forward protected and HTTP open unless told so.
    """
    import asyncio
    import neostore
    from ingest.service import Service, listener_auth, tune_interpreter

    from connectors.mqtt import MqttError, check_topic_filter, parse_broker_url
    from connectors.tls import TlsConfig

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    off = ("", "off", "none")
    limits = Limits(memory_budget=memory_budget << 20, max_connections=max_connections,
                    handshake_timeout=handshake_timeout, idle_timeout=idle_timeout, header_timeout=header_timeout,
                    body_timeout=body_timeout)
    # One budget: ingest holds no more waiting for commits than the connectors may hold in all.
    committer = CommitterConfig(interval=commit_interval / 1000, max_pending_bytes=limits.memory_budget,
                                decode_workers=decode_workers)
    service_config = ServiceConfig(store=store_url, schemas=schemas, users=users, http_auth=http_auth,
                                   committer=committer)
    if forward.lower() in off and http_address.lower() in off and not mqtt_url:
        raise BadInput("--forward and --http are off and no --mqtt broker is given: nothing to serve")
    if bool(tls_cert) != bool(tls_key):
        raise BadInput("TLS needs both --tls-cert and --tls-key")
    tls = TlsConfig(tls_cert, tls_key) if tls_cert and tls_key else None
    try:
        # Refuse a bad address, broker URL, topic or authentication before opening anything.
        config = ServeConfig(
            service=service_config, limits=limits,
            forward=None if forward.lower() in off else ForwardConfig.at(forward, shared_key=shared_key, tls=tls),
            http=None if http_address.lower() in off else HttpConfig.at(http_address, tls=tls),
            mqtt=MqttConfig(mqtt_url, mqtt_topics or MqttConfig.topics, mqtt_client_id) if mqtt_url else None,
        )
        if config.mqtt:
            parse_broker_url(config.mqtt.url)
            for topic in config.mqtt.topics:
                check_topic_filter(topic)
        auth = listener_auth(service_config, forward=config.forward is not None,
                             shared_key=bool(config.forward and config.forward.shared_key),
                             http=config.http.address if config.http else None)
        ssl = tls.server_context() if tls else None  # one context for Forward and HTTP
        service = Service(service_config)
    except (ingest.IngestError, neostore.NeoStoreError, MqttError, ValueError) as exc:
        raise BadInput(str(exc)) from exc
    tune_interpreter()
    try:
        asyncio.run(_serve(service, config, auth, ssl))
    except OSError as exc:  # typically the address is in use
        raise BadInput(f"cannot listen: {exc}") from exc


async def _serve(service: Service, config: ServeConfig, auth: dict[str, str], ssl: SSLContext | None) -> None:
    # The one place that imports connectors: the layers meet here.
    from connectors.budget import MemoryBudget
    from connectors.forward.server import ForwardServer
    from connectors.http.app import HttpServer, make_app
    from connectors.mqtt import MqttError, MqttSubscriber, default_client_id, parse_broker_url

    limits = config.limits
    budget = MemoryBudget(limits.memory_budget)  # one for the whole process: Forward and HTTP draw on it together
    endpoints = []
    lines: list[tuple[str, object, str]] = []
    auth = {**auth, "mqtt": "the broker's (user and password in --mqtt's URL)"}
    if config.forward:
        f = config.forward
        forward = ForwardServer(service.committer, f.host, f.port, shared_key=f.shared_key, users=service.users,
                                ssl=ssl, chunk_size_limit=f.chunk_size_limit,
                                decompressed_size_limit=f.decompressed_size_limit, limits=limits, budget=budget)
        endpoints.append(forward)
        lines.append(("forward", forward, f.host))
    if config.http:
        h = config.http
        app = make_app(service.committer, users=service.http_users, body_size_limit=h.body_size_limit,
                       decompressed_size_limit=h.decompressed_size_limit, health=service.health,
                       metrics=service.metric_samples, streams=service.streams, limits=limits, budget=budget)
        http = HttpServer(app, h.host, h.port, ssl=ssl)
        endpoints.append(http)
        lines.append(("http", http, h.host))
    if config.mqtt:
        m = config.mqtt
        broker = parse_broker_url(m.url)
        mqtt = MqttSubscriber(service.committer, broker, m.topics,
                              client_id=m.client_id or default_client_id(config.service.store), **m.session())
        endpoints.append(mqtt)
        lines.append(("mqtt", mqtt, broker.host))

    def ready() -> None:
        for name, endpoint, host in lines:
            click.echo(f"{name}: {host}:{endpoint.port}  auth: {auth[name]}")
        click.echo("ready")

    try:
        await service.run(endpoints, ready)
    except MqttError as exc:  # the broker cannot be reached, or refused windvane, at start
        raise BadInput(str(exc)) from exc


@cli.command(name="import", short_help="Import files (CSV, Parquet, Arrow, WAV, logs) into a stream; resumable.")
@click.argument("paths", nargs=-1, required=True, metavar="PATH...",
                type=click.Path(exists=True, dir_okay=False, path_type=str))
@click.option("--store", "store_url", required=True, envvar="WINDVANE_STORE", show_envvar=True,
              help="Store URL: sqlite:///file.db, mariadb://user@/db?unix_socket=/path/sock, ...")
@click.option("--tag", required=True, help="The stream to import into (created on first use).")
@click.option("--schema", "schema_path", type=click.Path(exists=True, dir_okay=False, path_type=str),
              help="Schema file (TOML, see schemas/README.md). Default: the existing stream's columns, "
                   "else the types of the first file.")
@click.option("--format", "format_name", default=None,
              help="File format; default: by extension, or name (syslog, messages, access.log), seen through a "
                   "compression suffix and logrotate's number (x.csv.gz, syslog.1.gz).")
@click.option("--time-column", default=None, metavar="NAME",
              help="Column holding each row's time. Default: time, timestamp, ts, datetime or date.")
@click.option("--time-unit", type=click.Choice(["s", "ms", "us", "ns"]), default=None,
              help="Unit of epoch-number times. Default: chosen by magnitude.")
@click.option("--start", "start_time", default=None, metavar="TIME",
              help="ISO 8601 time of a recording's first sample (WAV); several WAV files are placed end to end "
                   "in the order given, each starting where the one before ended. Default: each file's BWF "
                   "origination time, else its modification time minus its duration.")
@click.option("--timezone", default=None, metavar="ZONE",
              help="IANA zone of times written without one (ISO 8601 text, naive timestamps, RFC 3164 syslog). "
                   "Default: UTC, and this machine's zone for RFC 3164 syslog.")
@click.option("--restart", is_flag=True,
              help="Import a file that changed since it was partly imported from its beginning.")
@click.option("--again", is_flag=True,
              help="Import the files from their beginning even if they, or files of the same content, "
                   "were imported into TAG before.")
@click.option("--commit-mb", type=click.IntRange(1, 4096), default=32, show_default=True,
              help="MB of file per commit.")
@click.option("--allow-rejects", is_flag=True,
              help="Exit 0 even if rows were quarantined (they are still counted and reported).")
@click.option("--rename", "renames", multiple=True, metavar="OLD=NEW",
              help="Name a file's column OLD as NEW in the stream (repeatable); the file must have OLD. "
                   "A blank or repeated header cell names its column column_<n> (n: its position).")
def import_files(paths: tuple[str, ...], store_url: str, tag: str, schema_path: str | None,
                 format_name: str | None, time_column: str | None, time_unit: str | None,
                 start_time: str | None, timezone: str | None, restart: bool, again: bool, commit_mb: int,
                 allow_rejects: bool, renames: tuple[str, ...]) -> None:
    """Import PATH... into stream TAG, committing as it reads: run again after an interruption to resume.

    Each commit stores rows and the position reached in the file together,
    so a run interrupted (Ctrl-C, kill -9) and started again neither
    duplicates nor skips rows; a finished file run again imports nothing,
    nor does a file of the same content under another name (a blake3 hash
    of the whole file) unless --again. Rows that do not fit go, verbatim
    with the reason, to the tag's quarantine stream. Compressed files
    (gzip, zstd, bzip2, xz: told by their first bytes) of CSV and the log
    formats are read decompressed as they go. A new stream's columns are
    typed from the whole first file; the schema inferred is printed, to pin
    with --schema. Column names are kept as written; one a store key cannot
    hold ("flow [l/s]") is stored under an escaped key (see the README).
    RFC 3164 syslog lines carry no year: they are taken in the year of the
    file's modification time (the year before for dates after it), and the
    summary says which.

    \b
    Exit codes: 0 every row read was stored; 2 bad input; 3 rows were
    quarantined (the others are stored; stderr says how many, in which
    quarantine stream and how to read it; --allow-rejects exits 0
    instead); 130 interrupted (run again to resume).
    """
    import os
    import sys

    from connectors.files import FileFormatError, ReaderOptions
    from connectors.files.compression import compression_of
    from connectors.files.formats import format_for
    from ingest import imports
    from ingest.times import check_zone, time_ns
    from ingest.schema import load_schema
    from ingest.streams import StreamWriters

    try:
        rename = _renames(renames)
        schema = load_schema(schema_path) if schema_path else None
        formats = [format_for(path, format_name) for path in paths]
        start_ns = None
        if timezone is not None:
            check_zone(timezone)
        if start_time is not None:
            start_ns = time_ns(start_time)
            if start_ns is None:
                raise BadInput(f"--start {start_time!r} is not an ISO 8601 time or an epoch number")
    except (ingest.IngestError, FileFormatError) as exc:
        raise BadInput(str(exc)) from exc
    total = sum(os.path.getsize(p) for p in paths)
    rejected = 0
    with _open_store(store_url) as st:
        writers = StreamWriters(st)
        try:
            schema = imports.resolve_schema(st, tag, schema)
            with click.progressbar(length=total, label=f"importing into {tag}", file=sys.stderr) as bar:
                for path, fmt in zip(paths, formats):
                    types = imports.arrow_types(schema) if schema is not None and schema.kind != "vibration" else {}
                    reader = fmt.make(path, ReaderOptions(time_column, time_unit, start_ns, types,
                                                          block_bytes=min(16 << 20, commit_mb << 19),
                                                          rename=rename, timezone=timezone))
                    for note in getattr(reader, "notes", ()):
                        click.echo(f"note: {note}", err=True)
                    if start_ns is not None and fmt.vibration:
                        start_ns = reader.end_ns  # one --start for several recordings: end to end
                    identity = imports.fingerprint(path)
                    compressed = compression_of(path) is not None  # its parts count the bytes it holds
                    result = imports.import_source(
                        st, tag, reader, source_id=imports.source_id_for(path), identity=identity, schema=schema,
                        progress=None if compressed else bar.update,
                        same_source=lambda stored, p=path: imports.same_file(stored, p),
                        restart=restart, commit_bytes=commit_mb << 20, writers=writers,
                        content=imports.content_hash(path), name=os.path.abspath(path), again=again)
                    schema = result.schema or schema
                    size = os.path.getsize(path)
                    bar.update(size if compressed else max(0, size - result.nbytes))
                    if result.inferred and schema.kind != "vibration":
                        click.echo(_inferred_schema(tag, path, schema), err=True)
                    click.echo(_import_summary(path, result))
                    rejected += result.rejected
                    if fmt.name == "syslog":
                        click.echo(_syslog_years(path))
        except (ingest.IngestError, FileFormatError) as exc:
            raise BadInput(str(exc)) from exc
        except KeyboardInterrupt:
            click.echo("interrupted: what was committed stays; run the same command again to resume", err=True)
            sys.exit(130)
    if rejected:
        message = _rejects_message(rejected, tag, store_url)
        if not allow_rejects:
            raise RowsRejected(f"{message}; --allow-rejects makes this exit 0")
        click.echo(message, err=True)


def _rejects_message(rejected: int, tag: str, store_url: str) -> str:
    """How many rows an import quarantined, the quarantine stream they are in, and how to read them."""
    import shlex

    from arrays.stream import stream_path

    return (f"{rejected:,} rows rejected into the quarantine stream {stream_path(tag, quarantine=True)!r}; "
            f"read them with `windvane export {shlex.quote(tag)} --quarantine --store {shlex.quote(store_url)} "
            "--to rejects.csv --format csv`")


def _renames(renames: tuple[str, ...]) -> dict[str, str]:
    """``--rename OLD=NEW`` options as old -> new names (the first ``=`` divides them)."""
    out: dict[str, str] = {}
    for item in renames:
        old, sep, new = item.partition("=")
        if not sep or not old or not new.strip():
            raise BadInput(f"--rename {item!r}: write it as OLD=NEW, both names not empty")
        if old in out:
            raise BadInput(f"--rename names column {old!r} twice")
        out[old] = new
    return out


def _inferred_schema(tag: str, path: str, schema) -> str:
    """The schema a new stream got from ``path``, as a schema file, and how to pin it."""
    from ingest.schema import schema_toml

    return (f"stream {tag!r} is new: its columns are typed from {path} (integer and bool columns store a missing "
            f"value as their 'fill'). To pin them, save this as {tag}.toml and pass --schema {tag}.toml:\n"
            + schema_toml(schema).rstrip("\n"))


def _syslog_years(path: str) -> str:
    """What year an RFC 3164 file's lines were given: its modification time's."""
    import datetime
    import os

    written = datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.timezone.utc)
    return (f"{path}: RFC 3164 times carry no year: taken in {written.year}, the year of the file's modification "
            f"time ({written:%Y-%m-%d}); lines dated after that, in {written.year - 1}")


def _import_summary(path: str, result) -> str:
    """One line per imported file: rows, rejects, MB, MB/s, where it resumed."""
    if result.duplicate_of is not None and not result.commits:
        return (f"{path}: already imported: the same content as {result.duplicate_of}; nothing imported "
                "(--again imports it again)")
    if result.resumed_from is not None and not (result.rows or result.rejected):
        return f"{path}: already imported, nothing new after position {result.resumed_from}"
    line = (f"{path}: {result.rows:,} rows, {result.rejected:,} rejected, {result.nbytes / 1e6:.1f} MB "
            f"in {result.seconds:.1f} s ({result.mbps:.1f} MB/s)")
    if result.resumed_from is not None:
        line += f", resumed from position {result.resumed_from}"
        if result.duplicate_of is not None:
            line += f" where the import of the same content as {result.duplicate_of} stopped"
    if result.reasons:
        line += f"; first reason: {result.reasons[0]}"
    return line


@cli.command(name="info", short_help="What a store's streams hold: rows, shapes, bytes raw and stored, dedup.")
@click.option("--store", "store_url", required=True, envvar="WINDVANE_STORE", show_envvar=True,
              help="Store URL: sqlite:///file.db, mariadb://user@/db?unix_socket=/path/sock, ...")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines instead of text.")
def store_contents(store_url: str, as_json: bool) -> None:
    """Describe the store at --store and every stream in it, quarantine streams included.

    Per stream: rows, first and last time, each column's dtype, shape and
    codec, bytes raw (uncompressed) and stored (compressed, after dedup),
    and with history (the revisions a pack would drop). For the store: the
    dedup ratio and the last commit. Reads only: exit code 2 if there is no
    store at --store (none is created).
    """
    import neostore

    import json

    from ingest import info as contents

    with _open_store(store_url, read_only=True) as st:
        try:
            found = contents.describe(st)
        except neostore.NeoStoreError as exc:
            raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(contents.to_json(found), indent=2))
        return
    for line in contents.report_lines(found):
        click.echo(line)


@cli.command(short_help="Serve a fresh SQLite store, send it sample data with real clients, show what it stored.")
@click.option("--dir", "directory", default="var", show_default=True,
              type=click.Path(file_okay=False, path_type=str),
              help="Where the demo's store (demo.db) and the service's log (demo-serve.log) go.")
@click.option("--keep", is_flag=True, help="Add to the store an earlier demo left in --dir instead of starting afresh.")
def demo(directory: str, keep: bool) -> None:
    """Start `windvane serve` on DIR/demo.db (SQLite, made afresh) and send it the shipped samples.

    A week of real wind-turbine SCADA data (ENGIE's La Haute Borne) and a
    synthetic drive-train vibration recording go over the Forward protocol
    with fluent-logger, a synthetic nginx access log over HTTP as NDJSON
    (sources: ingest/samples/README.md). Once the service
    has committed them and stopped, this prints what the store holds (streams,
    rows, shapes, bytes raw and stored, dedup ratio), the throughput of each
    stage, and how to open the data in a notebook.
    """
    import neostore

    from ingest import demo as walkthrough
    from ingest import info as contents

    err = click.get_text_stream("stderr")
    try:
        result = walkthrough.run(
            directory, keep=keep, say=lambda line: click.echo(line, err=True),
            progress=lambda label, length: click.progressbar(length=length, label=label, file=err),
        )
    except walkthrough.DemoDirectoryError as exc:
        raise BadInput(str(exc)) from exc
    except (walkthrough.DemoError, neostore.NeoStoreError) as exc:
        raise click.ClickException(str(exc)) from exc
    for line in (*contents.report_lines(result.info), "", *walkthrough.throughput_lines(result), "",
                 *walkthrough.notebook_lines(result)):
        click.echo(line)


@cli.command(short_help="Follow a growing log file into a stream; survives rotation, resumes exactly.")
@click.argument("path", type=click.Path(dir_okay=False, path_type=str))
@click.option("--store", "store_url", required=True, envvar="WINDVANE_STORE", show_envvar=True,
              help="Store URL: sqlite:///file.db, mariadb://user@/db?unix_socket=/path/sock, ...")
@click.option("--tag", required=True, help="The stream to append to (created on first use).")
@click.option("--format", "format_name", default="jsonl", show_default=True,
              help="Log format: jsonl, syslog (RFC 3164), syslog5424 or combined (nginx/Apache access logs).")
@click.option("--schema", "schema_path", type=click.Path(exists=True, dir_okay=False, path_type=str),
              help="Schema file (TOML, see schemas/README.md). Default: the existing stream's columns, "
                   "else the types of the first lines.")
@click.option("--timezone", default=None, metavar="ZONE",
              help="IANA zone of times written without one. Default: this machine's for syslog, UTC for JSON.")
@click.option("--commit-lines", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Commit after this many lines ...")
@click.option("--commit-ms", type=click.FloatRange(min=1), default=1000, show_default=True,
              help="... or this many ms after the first line of a batch was read, whichever comes first.")
@click.option("--poll-ms", type=click.FloatRange(10, 10_000), default=200, show_default=True,
              help="How often to look for new lines when there are none.")
@click.option("--rotate-wait", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="Seconds a renamed (rotated) file must be quiet before the new file at PATH is followed.")
def tail(path: str, store_url: str, tag: str, format_name: str, schema_path: str | None, timezone: str | None,
         commit_lines: int, commit_ms: float, poll_ms: float, rotate_wait: float) -> None:
    """Follow the log file PATH as it grows and commit its lines into stream TAG.

    Rows and the position reached (file identity, byte offset) are committed
    together, so a restart (after Ctrl-C or kill -9) resumes after the last
    committed line: no line twice, none skipped. Rotation by rename (the old
    file is read to its end first) and by copytruncate (the copy beside PATH
    is finished first) is followed. Lines that are not the format go,
    verbatim with the reason, to the tag's quarantine stream. SIGTERM or
    Ctrl-C commits what was read and exits 0.
    """
    import dataclasses
    import signal

    from connectors.files.logs import LogFormatError
    from connectors.tail.follow import FilePosition, Follower
    from connectors.tail.run import StopFlag, Tailer, TailSettings
    from ingest import imports
    from ingest.schema import load_schema
    from ingest.streams import StreamWriters

    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        schema = load_schema(schema_path) if schema_path else None
        settings = TailSettings(format_name, timezone, commit_lines, commit_ms, poll_ms)
    except (ingest.IngestError, LogFormatError) as exc:
        raise BadInput(str(exc)) from exc
    with _open_store(store_url) as st:
        try:
            schema = imports.resolve_schema(st, tag, schema)
        except ingest.IngestError as exc:
            raise BadInput(str(exc)) from exc
        source_id = "tail-" + imports.source_id_for(path)
        stored = imports.read_position(st, tag, source_id)
        committed = FilePosition.from_dict(stored.value) if stored else None
        follower = Follower(path, stored.value if stored else None, rotate_wait=rotate_wait)
        settings = dataclasses.replace(settings, types=imports.arrow_types(schema) if schema else {})
        stop = StopFlag()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        where = f"line {committed.line}, offset {committed.offset}" if committed else "its beginning"
        click.echo(f"following {path} into {tag} ({format_name}) from {where}")
        try:
            Tailer(follower, settings, _tail_commit(StreamWriters(st), tag, schema, source_id, path),
                   lambda line: click.echo(line), committed).run(stop)
        except imports.SchemaMismatch as exc:
            raise click.ClickException(f"{exc}; nothing of the last batch was committed, the position stays") from exc
        finally:
            follower.close()
    click.echo("stopped")


def _tail_commit(writers, tag: str, schema, source_id: str, path: str):
    """``commit(parts, position)`` for `windvane tail`: rows and position in one transaction (ingest.imports)."""
    from ingest import imports
    from ingest.schema import Schema

    chosen = [schema]

    def commit(parts, position) -> tuple[int, int]:
        if chosen[0] is None:  # no stream and no --schema: the first lines that parsed decide
            first = next((p for p in parts if p.table.num_rows), None)
            chosen[0] = imports.infer_schema(tag, first) if first is not None else None
        # Until some line parsed there are only rejects, which need no schema: any will do.
        done = imports.commit_parts(writers, tag, chosen[0] or Schema(tag, "log", (tag,), extra="reject"), parts,
                                    source_id, position, source="tail", message=f"tail {path}")
        return done.rows, done.rejected

    return commit


@cli.command(name="export", short_help="Export a stream to Parquet, Arrow, CSV, zarr or netCDF; incremental with --job.")
@click.argument("stream")
@click.option("--store", "store_url", required=True, envvar="WINDVANE_STORE", show_envvar=True,
              help="Store URL: sqlite:///file.db, mariadb://user@/db?unix_socket=/path/sock, ...")
@click.option("--to", "target", required=True, metavar="PATH",
              help="The file to write (a directory for zarr); with --job, the directory of its part files.")
@click.option("--format", "format_name", required=True, metavar="FORMAT",
              help="parquet, arrow (IPC file), csv, zarr (v3 directory) or netcdf (netCDF-4).")
@click.option("--start", default=None, metavar="TIME",
              help="Only rows at or after TIME: ISO 8601 (no zone means UTC) or epoch seconds.")
@click.option("--stop", default=None, metavar="TIME", help="Only rows before TIME.")
@click.option("--job", default=None, metavar="NAME",
              help="Incremental: export the rows committed since job NAME's last run, as a new part file in --to.")
@click.option("--overwrite", is_flag=True, help="Replace --to if it exists (without --job).")
@click.option("--quarantine", is_flag=True, help="Export the stream's quarantine stream (rejected records).")
def export_stream(stream: str, store_url: str, target: str, format_name: str, start: str | None, stop: str | None,
                  job: str | None, overwrite: bool, quarantine: bool) -> None:
    """Export STREAM from one snapshot (the newest commit when it starts), block by block, in bounded memory.

    With --job, each run writes the rows committed since the job's last run
    to part-<first row>-<stop row>.<ext> in --to, exactly once even if a run
    is killed (the next run rewrites the part it left unfinished); the job's
    state is kept in the store.
    """
    import neostore

    import sys

    from ingest import export as exporting

    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = click.progressbar(length=max(total, 1), label=f"exporting {stream}", file=sys.stderr)
            bar.__enter__()
        bar.update(done - bar.pos)

    try:
        result = exporting.export(store_url, stream, target, format_name, start=start, stop=stop, job=job,
                                  overwrite=overwrite, quarantine=quarantine, progress=progress)
    except exporting.ExportError as exc:
        raise BadInput(str(exc)) from exc
    except neostore.NeoStoreError as exc:
        raise click.ClickException(str(exc)) from exc
    except KeyboardInterrupt:
        click.echo("interrupted: no file was left half-written; with --job, run it again to finish", err=True)
        sys.exit(130)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    click.echo(_export_summary(result))


def _export_summary(result) -> str:
    """One line: rows, raw and written bytes, MB/s, files; for a job, the rows it covered."""
    if result.job is not None and not result.files and result.redone is None and result.first_row == result.stop_row:
        return f"job {result.job}: nothing new in stream {result.stream} since row {result.stop_row:,}"
    where = ", ".join(result.files) or "none (no row in the time range)"
    line = (f"exported {result.rows:,} rows of {result.stream} ({result.nbytes / 1e6:.1f} MB raw, "
            f"{result.file_bytes / 1e6:.1f} MB written) in {result.seconds:.1f} s ({result.mbps:.1f} MB/s) "
            f"to {len(result.files)} file{'s' if len(result.files) != 1 else ''}: {where}")
    if result.job is not None:
        line += f"; job {result.job}: rows {result.first_row:,} to {result.stop_row:,}"
        if result.redone is not None:
            line += f", after redoing rows {result.redone[0]:,} to {result.redone[1]:,} an interrupted run left"
    return line


STORE_OPTION = click.option("--store", "store_url", required=True, envvar="WINDVANE_STORE", show_envvar=True,
                            help="Store URL: sqlite:///file.db, mariadb://user@/db?unix_socket=/path/sock, ...")


@cli.group(name="streams", invoke_without_command=True)
@click.option("--store", "store_url", envvar="WINDVANE_STORE", show_envvar=True,
              help="Store URL whose streams to list: sqlite:///file.db, mariadb://user@/db?unix_socket=/path/sock, ...")
@click.pass_context
def streams_group(ctx: click.Context, store_url: str | None) -> None:
    """List the streams of the store at --store (rows, time range, bytes stored); remove, rename or trim one.

    \b
        windvane streams --store URL                       list them
        windvane streams rm TAG --store URL                remove a stream
        windvane streams mv OLD NEW --store URL            rename it
        windvane streams trim TAG --before T --store URL   drop its rows older than T

    rm, mv and trim are each one commit. History keeps what they replace:
    a read at an earlier tid still sees the stream, its old name or its
    dropped rows, until `windvane store pack` drops them. A tag's
    quarantine stream and import records go with its stream (rm removes
    them, mv renames them; trim leaves the quarantine as it is).

    Exit codes: 0 done (or nothing to trim), 2 bad input (no such stream,
    a name taken, a TIME that is not one, no store at --store), 1 the store
    failed.
    """
    if ctx.invoked_subcommand is not None:
        return
    if store_url is None:
        raise BadInput("give the store whose streams to list: --store URL (or WINDVANE_STORE)")
    from ingest import info as contents

    with _open_store(store_url, read_only=True) as st:
        found = contents.describe_streams(st)
    for line in contents.stream_table_lines(found):
        click.echo(line)


def _stream_change(store_url: str, change: Callable) -> object:
    """Run ``change(store)`` on the store at ``store_url``, errors mapped to exit codes."""
    import arrays
    import neostore

    from ingest import stream_admin

    try:
        with _open_store(store_url, create=False) as st:
            return change(st)
    except (stream_admin.StreamAdminError, arrays.InvalidTagError) as exc:
        raise BadInput(str(exc)) from exc
    except neostore.NeoStoreError as exc:
        raise click.ClickException(str(exc)) from exc


def _change_text(change) -> str:
    extras = [f"{change.quarantined:,} quarantined records"] if change.quarantined else []
    extras += [f"{change.records:,} import records"] if change.records else []
    return f"{change.rows:,} rows" + "".join(f", {e}" for e in extras)


@streams_group.command(name="rm", short_help="Remove a stream (with its quarantine and import records).")
@click.argument("tag")
@STORE_OPTION
def remove_stream(tag: str, store_url: str) -> None:
    """Remove stream TAG, its quarantine stream and its import records, in one commit."""
    from ingest import stream_admin

    change = _stream_change(store_url, lambda st: stream_admin.remove(st, tag))
    click.echo(f"removed stream {tag} ({_change_text(change)}) in commit 0x{change.tid.hex()}; "
               "earlier reads still see it until `windvane store pack`")


@streams_group.command(name="mv", short_help="Rename a stream (with its quarantine and import records).")
@click.argument("old")
@click.argument("new")
@STORE_OPTION
def rename_stream(old: str, new: str, store_url: str) -> None:
    """Rename stream OLD to NEW (its quarantine stream and import records too), in one commit.

    NEW must not be a stream yet.
    """
    from ingest import stream_admin

    change = _stream_change(store_url, lambda st: stream_admin.rename(st, old, new))
    click.echo(f"renamed stream {old} to {new} ({_change_text(change)}) in commit 0x{change.tid.hex()}")


@streams_group.command(name="trim", short_help="Drop a stream's rows older than a time.")
@click.argument("tag")
@click.option("--before", required=True, metavar="TIME",
              help="Drop the rows whose time is before TIME: ISO 8601 (no zone means UTC) or epoch seconds.")
@STORE_OPTION
def trim_stream(tag: str, before: str, store_url: str) -> None:
    """Drop the rows of stream TAG whose time is before --before, in one commit (none if no row is that old).

    The rows stay in history (a read at an earlier tid sees them) until
    `windvane store pack` drops them.
    """
    from ingest import stream_admin
    from ingest.export.times import BadTime, parse_time

    try:
        before_ns = parse_time(before, "--before")
    except BadTime as exc:
        raise BadInput(str(exc)) from exc
    change = _stream_change(store_url, lambda st: stream_admin.trim(st, tag, before_ns))
    if change.tid is None:
        click.echo(f"nothing to trim: no row of stream {tag} is before {before}")
    else:
        click.echo(f"trimmed {change.rows:,} rows of stream {tag} before {before} in commit 0x{change.tid.hex()}; "
                   "they stay in history until `windvane store pack`")


@cli.group(name="quarantine")
def quarantine_group() -> None:
    """See what was quarantined (records that did not fit their schema), and replay it after a schema fix.

    \b
        windvane quarantine ls [TAG] --store URL
        windvane quarantine replay TAG [--schema fixed.toml] --store URL

    Exit codes: 0 done, 2 bad input (no quarantine for TAG, no schema to
    replay with, a schema that contradicts the stream, no store at --store),
    1 the store failed.
    """


def _reason_lines(summary) -> list[str]:
    from ingest.replay import TOP_REASONS

    lines = [f"  {count:>10,}  {reason}" for reason, count in summary.reasons[:TOP_REASONS]]
    rest = summary.reasons[TOP_REASONS:]
    if rest:
        lines.append(f"  {sum(c for _, c in rest):>10,}  ({len(rest):,} other reasons)")
    return lines


@quarantine_group.command(name="ls", short_help="Quarantined records per tag, counted by reason.")
@STORE_OPTION
@click.argument("tag", required=False)
def list_quarantine(store_url: str, tag: str | None) -> None:
    """List the quarantine streams (or TAG's): records, and the commonest reasons with their counts."""
    import arrays

    from ingest import replay as replaying

    with _open_store(store_url, read_only=True) as st:
        try:
            found = replaying.summarize(st, tag)
        except (replaying.ReplayError, arrays.InvalidTagError) as exc:
            raise BadInput(str(exc)) from exc
    if not found:
        click.echo("nothing is quarantined")
    for summary in found:
        click.echo(f"quarantine/{summary.tag}: {summary.rows:,} records")
        for line in _reason_lines(summary):
            click.echo(line)


@quarantine_group.command(name="replay", short_help="Move the quarantined records that now fit into their stream.")
@STORE_OPTION
@click.argument("tag")
@click.option("--schema", "schema_path", type=click.Path(exists=True, dir_okay=False, path_type=str),
              help="Schema file (TOML) to validate with. Default: the stream's columns as they are.")
def replay_quarantine(store_url: str, tag: str, schema_path: str | None) -> None:
    """Validate TAG's quarantined records again and move those that fit into stream TAG, exactly once.

    In one commit the records that fit are appended to the stream and
    removed from the quarantine; the others stay, with the reason they fail
    now. Run twice, or again after being killed, it never stores a record
    twice nor loses one. Replay reads records that arrived as msgpack or
    JSON (Forward, HTTP, MQTT, JSON imports); the time is the one the
    quarantine recorded, and records whose time was unreadable stay.
    """
    import arrays
    import neostore

    from ingest import replay as replaying
    from ingest.schema import load_schema

    try:
        schema = load_schema(schema_path) if schema_path else None
        with _open_store(store_url, create=False) as st:
            result = replaying.replay(st, tag, schema, started=lambda n: click.echo(
                f"replaying {n:,} quarantined records of {tag} ...", err=True))
    except (ingest.IngestError, arrays.InvalidTagError) as exc:
        raise BadInput(str(exc)) from exc
    except neostore.NeoStoreError as exc:
        raise click.ClickException(str(exc)) from exc
    where = f"in commit 0x{result.tid.hex()}" if result.tid is not None else "(nothing changed, nothing committed)"
    click.echo(f"replayed {result.replayed:,} records of quarantine/{tag} into stream {tag} {where}; "
               f"{result.remaining.rows:,} stay in quarantine")
    for line in _reason_lines(result.remaining):
        click.echo(line)


def main() -> None:
    """Entry point of the `windvane` console script."""
    cli(prog_name="windvane")


if __name__ == "__main__":
    main()
