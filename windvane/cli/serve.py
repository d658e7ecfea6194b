"""`windvane serve`: receive fluentd Forward, HTTP and MQTT data into streams."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from windvane import ingest
from windvane.cli.root import STORE_OPTION, BadInput, cli
from windvane.connectors.forward.config import ForwardConfig
from windvane.connectors.http.config import HttpConfig
from windvane.connectors.limits import Limits
from windvane.connectors.mqtt.config import MqttConfig
from windvane.ingest.config import MAX_DECODE_WORKERS, CommitterConfig, ServiceConfig

if TYPE_CHECKING:
    from ssl import SSLContext

    from windvane.connectors.budget import MemoryBudget
    from windvane.connectors.tls import TlsConfig
    from windvane.ingest.service import Service


def _seconds(flag: str, default: float, help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A ``serve`` option of a positive number of seconds."""
    return click.option(
        flag,
        default=default,
        show_default=True,
        metavar="SECONDS",
        type=click.FloatRange(0, min_open=True),
        help=help_text,
    )


@dataclass(frozen=True)
class ServeConfig:
    """Everything ``windvane serve`` is told: one configuration per component (None: that listener is off)."""

    service: ServiceConfig
    forward: ForwardConfig | None = field(default_factory=ForwardConfig)
    http: HttpConfig | None = field(default_factory=HttpConfig)
    mqtt: MqttConfig | None = None
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True)
class ServeOptions:
    """``windvane serve``'s options as click parses them (see each option's help)."""

    store_url: str
    schemas: str
    forward: str
    http_address: str
    shared_key: str | None
    users: str | None
    http_auth: str | None
    tls_cert: str | None
    tls_key: str | None
    commit_interval: float
    decode_workers: int | None
    workers: int | None
    mqtt_url: str | None
    mqtt_topics: tuple[str, ...]
    mqtt_client_id: str | None
    memory_budget: int
    max_connections: int
    handshake_timeout: float
    idle_timeout: float
    header_timeout: float
    body_timeout: float
    frame_timeout: float
    frame_min_rate: int
    trim_after: float
    log_level: str


@cli.command(short_help="Receive fluentd Forward and HTTP data into streams.")
@STORE_OPTION
@click.option(
    "--schemas",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=str),
    help="Directory of stream schemas (*.toml): which tags go to which stream, with which fields.",
)
@click.option(
    "--forward",
    default=ForwardConfig().address,
    show_default=True,
    metavar="HOST:PORT",
    help="Where to accept the fluentd Forward protocol (TCP, and UDP heartbeats); 'off' to disable.",
)
@click.option(
    "--http",
    "http_address",
    default=HttpConfig().address,
    show_default=True,
    metavar="HOST:PORT",
    help="Where to accept HTTP posts (fluentd in_http and fluent-plugin-wendelin); 'off' to disable.",
)
@click.option(
    "--shared-key",
    envvar="WINDVANE_SHARED_KEY",
    show_envvar=True,
    help="Forward protocol shared key: clients must complete the HELO/PING/PONG handshake. It protects "
    "Forward only: with HTTP on, give --users too (or --http-auth none, or --http off).",
)
@click.option(
    "--users",
    type=click.Path(exists=True, dir_okay=False, path_type=str),
    help='TOML file of users ([users.NAME] with password = "..." and/or tokens = ["..."]): HTTP asks '
    "for Basic or Bearer credentials; Forward checks user passwords in its handshake, which needs "
    "--shared-key (or --forward off).",
)
@click.option(
    "--http-auth",
    type=click.Choice(["users", "none"]),
    default=None,
    help="How HTTP authenticates: 'users' (--users, the default when given) or 'none' (open: needed to "
    "serve HTTP unauthenticated beside a Forward protected by --shared-key).",
)
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False, path_type=str),
    help="PEM certificate chain: serve Forward and HTTP over TLS (with --tls-key).",
)
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False, path_type=str), help="PEM private key.")
@click.option(
    "--commit-interval",
    default=CommitterConfig.interval * 1000,
    show_default=True,
    metavar="MS",
    type=click.FloatRange(0, 10_000),
    help="Milliseconds to wait after a group's first arrival for more before committing. Groups form "
    "anyway from what arrives while the previous commit runs; a wait saves commits at some latency.",
)
@click.option(
    "--decode-workers",
    type=click.IntRange(0, 64),
    default=None,
    metavar="N",
    help="Processes that decode and validate Forward and HTTP payloads, so that more than one core "
    f"works; 0 decodes in the serving process. Default: one per core (at most {MAX_DECODE_WORKERS}), "
    "0 on one core.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 256),
    default=None,
    metavar="N",
    help="Server processes, each with its own event loop and committer, sharing the ports and the store "
    "(the kernel spreads connections between them); /health and /metrics answer for all. A worker that "
    "ends unasked is started again. Default: one per core.",
)
@click.option(
    "--mqtt",
    "mqtt_url",
    default=None,
    metavar="URL",
    help="MQTT broker to subscribe to: mqtt://[user:password@]host[:port] or mqtts://...[?ca=ca.pem]. "
    "QoS 1 messages are acknowledged once committed; topic a/b/c is tag a.b.c.",
)
@click.option(
    "--mqtt-topic",
    "mqtt_topics",
    multiple=True,
    metavar="PATTERN",
    help=f"MQTT topic filter to subscribe to (repeatable). Default: {' '.join(MqttConfig.topics)!r}, every topic.",
)
@click.option(
    "--mqtt-client-id",
    default=None,
    metavar="ID",
    help="Client id of the persistent MQTT session (what the broker keeps for windvane while it is "
    "down). Default: derived from the store URL, so a restart resumes the same session.",
)
@click.option(
    "--memory-budget",
    default=Limits.memory_budget >> 20,
    show_default=True,
    metavar="MIB",
    type=click.IntRange(1, 1 << 20),
    help="Mebibytes of client data held in memory and not yet committed, for all Forward and HTTP "
    "connections together (frames being read, decompressed payloads, requests waiting for their "
    "commit), each charged four times its size. A bound: a Forward message is admitted before it is read, "
    "and past the budget Forward connections are not read and HTTP requests get 503 until commits "
    "catch up. A message bigger than the whole budget is read alone, once nothing else is held.",
)
@click.option(
    "--max-connections",
    default=Limits.max_connections,
    show_default=True,
    metavar="N",
    type=click.IntRange(1),
    help="Connections open at once on each of Forward and HTTP; more are closed as soon as they are accepted.",
)
@_seconds(
    "--handshake-timeout",
    Limits.handshake_timeout,
    "Seconds a client has to complete the TLS handshake and, with --shared-key, the Forward HELO/PING/PONG.",
)
@_seconds(
    "--idle-timeout",
    Limits.idle_timeout,
    "Seconds a Forward or HTTP connection may stay open sending nothing while nothing is owed to it. Keep it "
    "above the clients' flush interval (fluentd: 60 s) so they can reuse connections.",
)
@_seconds(
    "--header-timeout",
    Limits.header_timeout,
    "Seconds an HTTP request's headers may take from their first byte; then the connection is closed.",
)
@_seconds(
    "--body-timeout",
    Limits.body_timeout,
    "Seconds an HTTP request's body may take once its headers are in; then it is answered 408.",
)
@_seconds(
    "--frame-timeout",
    Limits.frame_timeout,
    "Seconds a Forward message may take to arrive whole from its first byte, plus a second per "
    "--frame-min-rate KiB of it (time the server holds reading back is not counted); then the connection "
    "is closed, so that a client trickling bytes holds no connection for ever.",
)
@click.option(
    "--frame-min-rate",
    default=Limits.frame_min_rate >> 10,
    show_default=True,
    metavar="KIB",
    type=click.IntRange(1),
    help="Kibibytes per second a big Forward message is given beyond --frame-timeout.",
)
@_seconds(
    "--trim-after",
    Limits.trim_after,
    "Seconds after a burst, once no client data has been held that long, that the memory it took "
    "is given back to the system; each decode worker does the same once it has had no work that long.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
)
def serve(**options: Any) -> None:
    """Receive data and commit it durably: acknowledge only what is committed.

    Forward clients (fluentd, Fluent Bit, the fluent-logger libraries) get
    their ack once the chunk is committed; HTTP clients get their 2xx then.
    Records that do not fit their schema are kept, with the reason, in the
    tag's quarantine stream. When ready it prints a line per listener (its
    address, what it takes, how it authenticates: "auth: ...") and "ready";
    Forward (TCP, and UDP heartbeats on the same port) and HTTP are on
    unless --forward off or --http off. SIGTERM or Ctrl-C stops it after
    committing what it received. It refuses to start with Forward protected
    and HTTP open unless told so.
    """
    from windvane import neostore
    from windvane.connectors.mqtt import MqttError
    from windvane.ingest.service import listener_auth

    opts = ServeOptions(**options)
    logging.basicConfig(level=opts.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if _off(opts.forward) and _off(opts.http_address) and not opts.mqtt_url:
        raise BadInput("--forward and --http are off and no --mqtt broker is given: nothing to serve")
    tls = _tls(opts)
    try:
        # Refuse a bad address, broker URL, topic or authentication before opening anything.
        config = _serve_config(opts, tls)
        if config.mqtt:
            _check_mqtt(config.mqtt)
        auth = listener_auth(
            config.service,
            forward=config.forward is not None,
            shared_key=bool(config.forward and config.forward.shared_key),
            http=config.http.address if config.http else None,
        )
        if tls:
            tls.server_context()  # a certificate that does not load is refused here, not by each worker
    except (ingest.IngestError, neostore.NeoStoreError, MqttError, ValueError) as exc:
        raise BadInput(str(exc)) from exc
    from windvane.cli.serve_workers import default_workers, run_workers

    workers = opts.workers or default_workers()
    if workers == 1:
        serve_one(config, auth, tls, lambda lines: announce(lines, auth))
    else:
        with _listening():
            run_workers(config, auth, tls, workers, opts.log_level, serve_one, lambda lines: announce(lines, auth))


@contextlib.contextmanager
def _listening() -> Iterator[None]:
    """BadInput for a listener that cannot listen, naming it, its address and the option to change."""
    from windvane.connectors.errors import ListenError

    try:
        yield
    except ListenError as exc:  # the message names the listener, its address and what to do
        option = f"--{exc.name.lower()}"
        raise BadInput(f"{exc}: {option} HOST:PORT, or {option} off") from exc
    except OSError as exc:
        raise BadInput(f"cannot listen: {exc}") from exc


def serve_one(
    config: ServeConfig,
    auth: dict[str, str],
    tls: TlsConfig | None,
    ready: Callable[[list[tuple[str, str, int]]], None],
) -> None:
    """Serve ``config`` in this process until SIGTERM or SIGINT, calling ``ready`` with each listener's
    ``(name, host, port)`` once all listen; BadInput if the store, the schemas or a listener cannot be had."""
    import asyncio

    from windvane import neostore
    from windvane.connectors.mqtt import MqttError
    from windvane.ingest.service import Service, tune_interpreter

    try:
        ssl = tls.server_context() if tls else None  # one context for Forward and HTTP
        service = Service(config.service)
    except (ingest.IngestError, neostore.NeoStoreError, MqttError, ValueError) as exc:
        raise BadInput(str(exc)) from exc
    tune_interpreter()
    with _listening():
        asyncio.run(_serve(service, config, ssl, ready))


def announce(lines: list[tuple[str, str, int]], auth: dict[str, str]) -> None:
    """Print a line per listener (its address, what it takes, how it authenticates) and "ready"."""
    auth = {**auth, "mqtt": "the broker's (user and password in --mqtt's URL)"}
    for name, host, port in lines:
        click.echo(f"{name}: {host}:{port} {_CARRIES[name]}  auth: {auth[name]}")
    click.echo("ready")


def _off(address: str) -> bool:
    """Whether a listener's address option turns it off."""
    return address.lower() in ("", "off", "none")


def _tls(opts: ServeOptions) -> TlsConfig | None:
    """The TLS of ``--tls-cert`` and ``--tls-key`` (None without them); BadInput if only one is given."""
    from windvane.connectors.tls import TlsConfig

    if bool(opts.tls_cert) != bool(opts.tls_key):
        raise BadInput("TLS needs both --tls-cert and --tls-key")
    return TlsConfig(opts.tls_cert, opts.tls_key) if opts.tls_cert and opts.tls_key else None


def _limits(opts: ServeOptions) -> Limits:
    """The connectors' limits of ``--memory-budget``, ``--max-connections`` and the timeouts."""
    return Limits(
        memory_budget=opts.memory_budget << 20,
        max_connections=opts.max_connections,
        handshake_timeout=opts.handshake_timeout,
        idle_timeout=opts.idle_timeout,
        header_timeout=opts.header_timeout,
        body_timeout=opts.body_timeout,
        frame_timeout=opts.frame_timeout,
        frame_min_rate=opts.frame_min_rate << 10,
        trim_after=opts.trim_after,
    )


def _service_config(opts: ServeOptions, limits: Limits) -> ServiceConfig:
    """The ingest service's configuration: store, schemas, users and committer."""
    # One budget: ingest holds no more waiting for commits than the connectors may hold in all.
    committer = CommitterConfig(
        interval=opts.commit_interval / 1000,
        max_pending_bytes=limits.memory_budget,
        decode_workers=opts.decode_workers,
        trim_after=limits.trim_after,  # the decode workers give memory back as the connectors' budget does
    )
    return ServiceConfig(
        store=opts.store_url, schemas=opts.schemas, users=opts.users, http_auth=opts.http_auth, committer=committer
    )


def _serve_config(opts: ServeOptions, tls: TlsConfig | None) -> ServeConfig:
    """Every component's configuration; ValueError if an address is bad."""
    limits = _limits(opts)
    topics = opts.mqtt_topics or MqttConfig.topics
    return ServeConfig(
        service=_service_config(opts, limits),
        limits=limits,
        forward=None if _off(opts.forward) else ForwardConfig.at(opts.forward, shared_key=opts.shared_key, tls=tls),
        http=None if _off(opts.http_address) else HttpConfig.at(opts.http_address, tls=tls),
        mqtt=MqttConfig(opts.mqtt_url, topics, opts.mqtt_client_id) if opts.mqtt_url else None,
    )


def _check_mqtt(mqtt: MqttConfig) -> None:
    """MqttError unless the broker URL and every topic filter are well formed."""
    from windvane.connectors.mqtt import check_topic_filter, parse_broker_url

    parse_broker_url(mqtt.url)
    for topic in mqtt.topics:
        check_topic_filter(topic)


#: What each start-up line says its listener takes besides its address (Forward listens on UDP too), and how
#: to close it: Forward and HTTP are on unless told off.
_CARRIES = {
    "forward": "(TCP, and UDP for heartbeats; --forward off closes it)",
    "http": "(TCP: posts, /health, /metrics, /streams, the console at /; --http off closes it)",
    "mqtt": "(the broker subscribed to)",
}


async def _serve(
    service: Service,
    config: ServeConfig,
    ssl: SSLContext | None,
    ready: Callable[[list[tuple[str, str, int]]], None],
) -> None:
    # With the helpers below, the one place that imports connectors: the layers meet here.
    from windvane.connectors.budget import MemoryBudget
    from windvane.connectors.mqtt import MqttError

    # One for the whole process: Forward and HTTP draw on it.
    budget = MemoryBudget(config.limits.memory_budget, config.limits.trim_after, service.committer.let_go_of_the_last)
    # A worker of several listens beside the others on the same ports.
    shared = config.service.worker is not None
    lines: list[tuple[str, Any, str]] = []
    if config.forward:
        lines.append(("forward", *_forward_server(service, config.forward, config.limits, ssl, budget, shared)))
    if config.http:
        lines.append(
            ("http", *_http_server(service, config.http, config.limits, ssl, budget, shared, config.service.store))
        )
    if config.mqtt:
        lines.append(("mqtt", *_mqtt_subscriber(service, config.mqtt, config.service.store)))

    try:
        await service.run(
            [endpoint for _, endpoint, _ in lines],
            lambda: ready([(name, host, endpoint.port) for name, endpoint, host in lines]),
        )
    except MqttError as exc:  # the broker cannot be reached, or refused windvane, at start
        raise BadInput(str(exc)) from exc


def _forward_server(
    service: Service, f: ForwardConfig, limits: Limits, ssl: SSLContext | None, budget: MemoryBudget, shared: bool
) -> tuple[Any, str]:
    """``(server, host)``: the Forward listener ``f`` configures."""
    from windvane.connectors.forward.server import ForwardServer

    server = ForwardServer(
        service.committer,
        f.host,
        f.port,
        shared_key=f.shared_key,
        users=service.users,
        ssl=ssl,
        chunk_size_limit=f.chunk_size_limit,
        decompressed_size_limit=f.decompressed_size_limit,
        limits=limits,
        budget=budget,
        reuse_port=shared,
    )
    return server, f.host


def _http_server(
    service: Service,
    h: HttpConfig,
    limits: Limits,
    ssl: SSLContext | None,
    budget: MemoryBudget,
    shared: bool,
    store_url: str,
) -> tuple[Any, str]:
    """``(server, host)``: the HTTP listener ``h`` configures, with the web console on ``GET /``."""
    from windvane.connectors.http.app import HttpServer, make_app
    from windvane.console.app import Console
    from windvane.console.views import Source
    from windvane.neostore.url import redacted

    console = Console(
        Source(
            service.store,
            redacted(store_url),
            service.health,
            lambda: [*service.metric_samples(), *budget.samples()],
            service.schemas.for_tag,
            service.senders,
        ),
        service.http_users,
    )
    app = make_app(
        service.committer,
        users=service.http_users,
        body_size_limit=h.body_size_limit,
        decompressed_size_limit=h.decompressed_size_limit,
        health=service.health,
        metrics=service.metric_samples,
        streams=service.streams,
        limits=limits,
        budget=budget,
        pages=console.add_routes,
    )
    return HttpServer(app, h.host, h.port, ssl=ssl, reuse_port=shared), h.host


def _mqtt_subscriber(service: Service, m: MqttConfig, store: str) -> tuple[Any, str]:
    """``(subscriber, broker host)``: the MQTT session ``m`` configures (its default client id from ``store``)."""
    from windvane.connectors.mqtt import MqttSubscriber, default_client_id, parse_broker_url

    broker = parse_broker_url(m.url)
    client_id = m.client_id or default_client_id(store)
    return MqttSubscriber(service.committer, broker, m.topics, client_id=client_id, **m.session()), broker.host
