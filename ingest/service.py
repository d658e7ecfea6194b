"""The ``windvane serve`` process: a store, its schemas, the group committer and the endpoints.

:class:`Service` is configured by a :class:`ingest.config.ServiceConfig`;
it owns the store and the committer and answers the health, metrics and
stream questions endpoints ask; the endpoints themselves (the Forward and
HTTP servers of ``connectors``, configured by their own config classes) are
built by the command line, which alone wires the layers, and handed to
:meth:`Service.run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from windvane import arrays, neostore
from windvane.neostore.tids import tid_time

from . import siblings
from .auth import Users
from .committer import GroupCommitter
from .config import ServiceConfig, default_decode_workers
from .errors import AuthError
from .memory import arrow_buffers_from_malloc, tune_malloc
from .metrics import NO_STREAM, CommitFailure, Metrics, MetricSample
from .schema import SchemaSet, load_schemas
from .times import iso_text

log = logging.getLogger("windvane.ingest")


#: CPython's cycle collector thresholds for a serving process (young generation, middle, old).
#: A service keeps thousands of stream writers alive and allocates a few objects per event;
#: with the defaults (700, 10, 10) collections keep scanning those writers, which takes a large
#: share of its time with thousands of streams and lets commits fall behind. Garbage cycles are
#: rare here (reference counting frees the rest): collecting them less often costs little memory.
GC_THRESHOLDS = (50_000, 20, 100)


#: Seconds a thread holding the interpreter lock keeps it while another waits (CPython's default: 0.005).
#: A serving process has three busy threads (the event loop, the committer, the commit thread);
#: handing the lock over every 5 ms costs them more than the work with many tags: acks wait longer and
#: the commit thread idles. A thread waits at most this long for the lock, against acks measured in
#: tens of milliseconds (benchmarks/README.md has the figures).
SWITCH_INTERVAL = 0.05


def tune_interpreter() -> None:
    """Set the cycle collector (:data:`GC_THRESHOLDS`), the lock's switch interval
    (:data:`SWITCH_INTERVAL`), glibc's malloc (:func:`ingest.memory.tune_malloc`) and where Arrow's buffers
    come from (:func:`ingest.memory.arrow_buffers_from_malloc`: that malloc) for a long-running
    service; for the process that serves, once its startup is done: what startup loaded is frozen,
    never scanned again."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    sys.setswitchinterval(SWITCH_INTERVAL)
    tune_malloc()
    arrow_buffers_from_malloc()


def listener_auth(config: ServiceConfig, *, forward: bool, shared_key: bool, http: str | None) -> dict[str, str]:
    """What authenticates each listener (``forward``, ``http``), in words for the start-up lines.

    ``forward``: whether Forward listens, ``shared_key``: whether it has one;
    ``http``: the address HTTP listens at (None: HTTP is off).

    Raises :class:`AuthError` for a configuration that would protect one
    listener and leave another open without being told to: Forward with a
    shared key and HTTP without users (unless ``http_auth`` is "none"), or
    users with Forward on and no shared key (the Forward protocol checks
    users only inside its shared-key handshake, as fluentd's ``in_forward``
    does: its users need a ``<security>`` shared key).
    """
    if config.http_auth not in (None, "users", "none"):
        raise AuthError(f"--http-auth {config.http_auth!r} is not one of: users, none")
    if config.http_auth == "users" and not config.users:
        raise AuthError("--http-auth users needs --users FILE (the users file of HTTP Basic passwords and tokens)")
    if config.users and forward and not shared_key:
        raise AuthError(
            "--users without --shared-key: the Forward protocol checks users only inside its shared-key "
            "handshake (as fluentd's in_forward), so Forward would be open to anyone while HTTP asks for "
            "credentials; give --shared-key too, or --forward off to serve HTTP alone"
        )
    http_users = bool(config.users) and config.http_auth != "none"
    if http and forward and shared_key and not http_users and config.http_auth != "none":
        raise AuthError(
            "--shared-key protects Forward only: HTTP would be open to anyone who can connect to "
            f"{http}; give --users FILE for HTTP Basic/Bearer credentials, --http off, or "
            "--http-auth none to serve HTTP unauthenticated on purpose"
        )
    out = {}
    if forward:
        out["forward"] = (
            ("shared key and user passwords" if config.users else "shared key") + " (handshake)"
            if shared_key
            else "none: open to anyone who can connect"
        )
    if http:
        out["http"] = "users (Basic or Bearer)" if http_users else "none: open to anyone who can connect"
    return out


class Endpoint(Protocol):
    """A listening connector: started once, closed once (closing waits for its submissions)."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


def _iso(when: float) -> str:
    return datetime.datetime.fromtimestamp(when, datetime.UTC).isoformat(timespec="seconds")


#: Failing streams a /health message names one by one, and its ``streams`` lists (oldest failure first);
#: ``failing_streams`` counts them all: a full disk can fail thousands of streams' work at once.
_NAMED_STREAMS, _LISTED_STREAMS = 5, 100


def _failing_streams(failing: dict[str, CommitFailure]) -> list[tuple[str, CommitFailure]]:
    """The streams of ``failing`` (not work that names none), oldest failure first."""
    return sorted(((tag, f) for tag, f in failing.items() if tag != NO_STREAM), key=lambda item: item[1].since)


def _failing_message(failure: CommitFailure, streams: list[tuple[str, CommitFailure]]) -> str:
    """What /health says while commits fail (``failure`` as a whole): which streams' work is not committed, why."""
    named = [f"{tag!r} ({f.failures} failed since {_iso(f.since)}: {f.reason})" for tag, f in streams[:_NAMED_STREAMS]]
    if len(streams) > _NAMED_STREAMS:
        named.append(f"and {len(streams) - _NAMED_STREAMS} more stream(s)")
    why = f"work not committed yet (until it is sent again) for stream {', '.join(named)}" if named else failure.reason
    return f"commits fail since {_iso(failure.since)} ({failure.failures} failed): {why}"


#: Connection counters read from a listening endpoint's ``stats``: key -> (metric, help).
ENDPOINT_COUNTERS = {
    "timeouts": (
        "windvane_connection_timeouts_total",
        "Connections closed because a handshake, header, body, frame or idle timeout expired.",
    ),
    "refused": (
        "windvane_connections_refused_total",
        "Connections refused or closed at once because the connection limit was reached.",
    ),
}


def endpoint_samples(endpoints: Sequence[object]) -> list[MetricSample]:
    """:data:`ENDPOINT_COUNTERS` of each endpoint that has ``stats`` (Forward, HTTP), labelled
    ``endpoint="forward"``, ``"http"``: the connectors count them; ingest cannot be imported there.
    With them the senders open of each endpoint that lists its ``senders`` (Forward, HTTP, MQTT)."""
    out = []
    for endpoint in endpoints:
        senders = getattr(endpoint, "senders", None)
        if senders is not None:
            out.append(
                (
                    "windvane_senders_open",
                    "Senders open: Forward connections, HTTP clients answered within the idle timeout, MQTT "
                    "subscriptions connected.",
                    "gauge",
                    {"protocol": senders.protocol},
                    senders.open_count,
                )
            )
        stats = getattr(endpoint, "stats", None)
        if stats is None:
            continue  # MQTT connects out: it neither times out clients nor refuses them
        name = type(endpoint).__name__.removesuffix("Server").lower()
        for key, (metric, help_text) in ENDPOINT_COUNTERS.items():
            out.append((metric, help_text, "counter", {"endpoint": name}, stats.get(key, 0)))
    return out


class Service:
    """A store, its schemas and the committer, for the endpoints to share."""

    def __init__(self, config: ServiceConfig):
        self.config = config
        self.schemas: SchemaSet = load_schemas(config.schemas)
        self.users = Users.load(config.users) if config.users else None
        #: The users HTTP asks for credentials (None: HTTP is open, by ``http_auth`` "none" or no users).
        self.http_users = self.users if config.http_auth != "none" else None
        self.store = neostore.open(config.store)
        self.metrics = Metrics()
        self.endpoints: list[Endpoint] = []  # those started by run(); /metrics reads their connection counters
        settings = config.committer
        self.committer = GroupCommitter(
            self.store,
            self.schemas,
            interval=settings.interval,
            max_pending_bytes=settings.max_pending_bytes,
            max_group_bytes=settings.max_group_bytes,
            key_window=settings.key_window,
            metrics=self.metrics,
            decode_workers=default_decode_workers() if settings.decode_workers is None else settings.decode_workers,
            trim_after=settings.trim_after,
            takes_turns=settings.takes_turns,
        )

    # -- what endpoints ask (these read the database: call them off the event loop) --------

    def health(self) -> dict[str, Any]:
        """``status`` "ok", or "failing" with ``error``, ``message`` and ``streams`` saying why while commits
        fail (from a failed commit until the work that failed is committed, stream by stream: see
        :mod:`ingest.metrics`); raises if the store cannot be read. A worker of several answers for the
        whole server (:mod:`ingest.siblings`), each worker's state under ``workers``."""
        own = self._own_health()
        place = self.config.worker
        if place is None:
            return own
        return siblings.merge_health(place, own, siblings.ask_all(place, "health"))

    def metric_samples(self) -> list[MetricSample]:
        """The Prometheus samples of the server: this process's, merged with the other workers' if any."""
        own = self._own_samples()
        place = self.config.worker
        if place is None:
            return own
        answers = [a for a in siblings.ask_all(place, "metrics").values() if not isinstance(a, BaseException)]
        workers: MetricSample = (
            "windvane_workers",
            "Worker processes of the server that answered (the others are being started again).",
            "gauge",
            {},
            1 + len(answers),
        )
        return [*siblings.merge_samples([own, *answers]), workers]

    def senders(self) -> list[dict[str, Any]]:
        """Who sends (the console's senders table): every Forward connection, HTTP client and MQTT subscription
        the endpoints list (``connectors.senders``: the open ones, the recently closed and recent HTTP
        clients), each a dict of ``protocol``, ``peer``, ``user``, ``hostname``, ``since``, ``events``,
        ``chunks``, ``requests``, ``bytes``, ``last_ack``, ``open`` and ``worker`` (the worker's index, None
        for a server of one process); a worker of several lists the other workers' too. Open first, then the
        last acknowledged first. Reads no database: safe from any thread."""
        own = self._own_senders()
        place = self.config.worker
        if place is None:
            return siblings.sort_senders(own)
        return siblings.merge_senders(own, siblings.ask_all(place, "senders"))

    def _own_senders(self) -> list[dict[str, Any]]:
        """This process's senders: the endpoints that list theirs have a ``senders`` with ``snapshot()``."""
        place = self.config.worker
        worker = None if place is None else place.index
        out = []
        for endpoint in self.endpoints:
            senders = getattr(endpoint, "senders", None)
            if senders is not None:
                out += [{**row, "worker": worker} for row in senders.snapshot()]
        return out

    def _answer(self, question: str) -> Any:
        """This worker's own part of the server's answer to another worker's ``question``."""
        place = self.config.worker
        assert place is not None  # only workers of several answer questions
        if question == "health":
            return {**self._own_health(), "pid": os.getpid(), "restarts": place.restarts}
        if question == "metrics":
            return self._own_samples()
        if question == "senders":
            return self._own_senders()
        raise ValueError(f"no such question: {question!r}")

    def _own_health(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": "ok",
            "schemas": len(self.schemas),
            "pending_bytes": self.committer.pending_bytes,
        }
        failure, failing = self.metrics.failure, self.metrics.failing
        if failure is not None:
            # Not read from the store: a store that is down could keep this answer waiting.
            streams = _failing_streams(failing)
            return {
                **out,
                "status": "failing",
                "error": "commits_failing",
                "message": _failing_message(failure, streams),
                "reason": failure.reason,
                "failing_since": failure.since,
                "failed_commits": failure.failures,
                "failing_streams": len(streams),
                "streams": {
                    tag: {"reason": f.reason, "failing_since": f.since, "failed_commits": f.failures}
                    for tag, f in streams[:_LISTED_STREAMS]
                },
            }
        return out | store_health(self.store)

    def _own_samples(self) -> list[MetricSample]:
        place = self.config.worker
        restarts: MetricSample = (
            "windvane_worker_restarts_total",
            "Times a worker process was started again after it ended unasked (killed, crashed).",
            "counter",
            {},
            0 if place is None else place.restarts,
        )
        given_back: MetricSample = (
            "windvane_decode_memory_given_back_total",
            "Times a decode worker gave the memory freed after a burst back to the system (--trim-after).",
            "counter",
            {},
            self.committer.decoding.given_back,
        )
        return [*self.metrics.samples(), given_back, restarts, *endpoint_samples(self.endpoints)]

    def streams(self) -> list[dict[str, Any]]:
        out = []
        for quarantine in (False, True):
            for tag in arrays.list_streams(self.store, quarantine=quarantine):
                with arrays.open_stream(self.store, tag, quarantine=quarantine) as stream:
                    span = stream.time_span()  # the least and greatest time: rows arrive in any time order
                    out.append(
                        {
                            "tag": tag,
                            "quarantine": quarantine,
                            "path": stream.path,
                            "rows": len(stream),
                            "earliest_time": None if span is None else iso_text(span[0]),
                            "latest_time": None if span is None else iso_text(span[1]),
                            "columns": {
                                name: {
                                    "dtype": arrays.dtype_name(stream[name].dtype),
                                    "shape": list(stream[name].shape),
                                }
                                for name in ["time", *stream.columns]
                            },
                            "schema": stream.attrs.get("schema"),
                        }
                    )
        return out

    # -- running ----------------------------------------------------------------------------

    async def run(
        self,
        endpoints: Sequence[Endpoint],
        on_ready: Callable[[], None] | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        """Start the committer and ``endpoints``, call ``on_ready``, serve until ``stop`` or SIGTERM/SIGINT.

        Shutting down stops the endpoints first (they wait for what they
        submitted), then commits what is queued, then closes the store.
        """
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        # The decode workers start once the endpoints listen: on a busy machine their imports would
        # otherwise share the cores with the service's own start.
        await asyncio.to_thread(self.committer.start, workers=False)
        started: list[Endpoint] = []
        answering = siblings.Answering(self.config.worker, self._answer) if self.config.worker else None
        try:
            for endpoint in endpoints:
                await endpoint.start()
                started.append(endpoint)
                self.endpoints = list(started)
            if on_ready is not None:
                on_ready()
            await asyncio.to_thread(self.committer.start_workers)
            await stop.wait()
            log.info("shutting down")
        finally:
            if answering is not None:
                answering.close()
            for endpoint in reversed(started):
                with contextlib.suppress(Exception):
                    await endpoint.close()
            await asyncio.to_thread(self.committer.close)
            await asyncio.to_thread(self.store.close)


def store_health(store: neostore.Store) -> dict[str, Any]:
    """What ``/health`` says of the store: its last commit (Unix time; None in a new store) and, where it
    has them, the cluster's nodes and the read replicas, with a warning for each that does not serve (a
    node leaving a cluster that keeps quorum is a warning: commits go on through the others). Raises if
    the store cannot be read."""
    last = store.last_transaction()
    out: dict[str, Any] = {"last_commit": tid_time(neostore.u64(last)) if last and last != neostore.ZERO else None}
    return out | _cluster_health(store)


def _cluster_health(store: neostore.Store) -> dict[str, Any]:
    """The cluster part of :func:`store_health`."""
    nodes, replicas = store.node_states(), store.replica_states()
    if not nodes and not replicas:
        return {}
    warnings = [
        f"node {n.node} does not serve: {n.error or f'{n.state}, {n.component}'}" for n in nodes if not n.serving
    ]
    warnings += [f"replica {r.node} is out of reach: {r.error}" for r in replicas if r.error is not None]
    out: dict[str, Any] = {
        "nodes": [dataclasses.asdict(n) for n in nodes],
        "replicas": [dataclasses.asdict(r) for r in replicas],
    }
    return out | ({"warnings": warnings} if warnings else {})
