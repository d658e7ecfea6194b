"""The HTTP ingestion endpoint: fluentd in_http and fluent-plugin-wendelin compatible, on aiohttp.

Routes (see :func:`make_app`):

* ``POST|PUT /<tag path>`` — in_http: the tag is the path with ``/`` -> ``.``;
  body formats in :func:`connectors.http.decode.decode_in_http`. Answers
  ``200 {"accepted": n, "quarantined": m}`` (``"reasons"`` added when
  records were quarantined), or ``200 {"duplicate": true, ...}`` when the
  ``Idempotency-Key`` was committed before.
* ``POST|PUT .../ingest?reference=<tag>`` (any path whose last segment is
  ``ingest``, e.g. ``/erp5/portal_ingestion_policies/default/ingest``) —
  fluent-plugin-wendelin; answers ``204`` with no body, as ERP5 does, also
  for a duplicate. So the in_http tags ``ingest`` and ``*.ingest`` are
  taken by this route.
* ``GET /`` — the web console when the server has one (``pages`` of
  :func:`make_app`: ``windvane serve`` always), which also answers the
  paths under ``/-/`` (so no in_http tag may start with ``-.``); else 200,
  empty (in_http's health check). ``GET /health`` —
  ``{"status": "ok", **health()}``; 503 if ``health()`` raises or reports
  another status, the body then naming the reason in ``error`` and
  ``message`` (ingest's: while commits fail). ``GET /metrics`` — Prometheus text from ``metrics()``
  plus the connector's own request counters. ``GET /streams`` — JSON of
  ``streams()``. The callables may block: they run in a worker thread.

A success status is sent only after ``await sink.submit(..., wait=False)``
returned, i.e. after the events are durably committed. Every error is JSON
``{"error": code, "message": text}``: 400 malformed body/query/path, 401
missing or wrong credentials (only when ``users`` is non-empty; with
``WWW-Authenticate`` for Basic and Bearer), 404/405 unknown route or method,
413 body over ``body_size_limit`` (checked against Content-Length before
reading, also in answer to ``Expect: 100-continue``) or decompressed body over
``decompressed_size_limit``, 415 unsupported Content-Encoding, 417 an
``Expect`` other than 100-continue, 500 commit failed (nothing of the request
is stored: retry), 503 with ``Retry-After`` when the sink applies
backpressure, 403 for a user without the role a request needs
(:data:`ingest.auth.ROLES`: posting needs ``send``, ``/metrics`` and
``/streams`` need ``read``; every user holding ``send`` may send to every
tag). With ``users`` set, ``/metrics`` and ``/streams`` need credentials
too, and so do the console's pages; ``/health`` never does (load balancers
probe it).

Memory and time (:class:`connectors.limits.Limits`): a request's body is
charged to the process's :class:`connectors.budget.MemoryBudget` as it is
read; once whole, it is charged what it comes to hold decoded and committed
(:func:`connectors.budget.held_for` its size, and its decompressed size,
found first without keeping the output, so a bomb costs CPU, not memory;
the decompressed limit is at most what the budget can hold); all of it is
released when the request is answered. A request that finds the budget full is
answered ``503 {"error": "memory_budget"}`` with ``Retry-After`` and its
connection closed. A body that takes longer than ``body_timeout`` is
answered 408; headers that take longer than ``header_timeout`` from their
first byte close the connection; so does ``idle_timeout`` between
requests. :class:`HttpServer` accepts through a
:class:`connectors.listener.Listener` (``max_connections``, file
descriptors running out); :attr:`HttpServer.stats` counts timeouts,
refusals and 503s for the budget.

When the sink decodes in worker processes (``sink.accepts_undecoded``),
bodies are handed to it undecoded (:func:`decode_body` runs there); a body
found malformed comes back as :class:`ingest.errors.UndecodableBatch`
carrying the decoder's :class:`HttpError`, answered as if decoded here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import ssl as _ssl
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from aiohttp import ClientPayloadError, web
from aiohttp.typedefs import Handler

from windvane.connectors.budget import Charges, MemoryBudget, held_for, inflate_limit
from windvane.connectors.inflate import inflated_size
from windvane.connectors.limits import Limits
from windvane.connectors.listener import ConnectionCounters, Listener, ProtocolProxy
from windvane.connectors.senders import Senders
from windvane.ingest.auth import CredentialsError, Users
from windvane.ingest.batch import Batch, Sink, Undecoded
from windvane.ingest.errors import Backpressure, CommitFailed, UndecodableBatch

from .config import HttpConfig
from .decode import FLUENT_BIT_AGENT, count_events, decode_in_http, decode_wendelin, decompress, tag_for_path
from .errors import (
    BadRequest,
    ExpectationFailed,
    Forbidden,
    HttpError,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
    ServiceUnavailable,
    Unauthorized,
)
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .metrics import Sample, SampleFields, render_metrics

__all__ = ["HttpServer", "Sample", "make_app", "render_metrics"]

log = logging.getLogger(__name__)

# Bodies above this are decompressed and decoded in a worker thread, so one
# big request does not stall every other connection for the whole decode.
INLINE_DECODE_BYTES = 64 << 10
MAX_IDEMPOTENCY_KEY = 256
_REALM = 'realm="windvane"'
_BUDGET_RETRY = 1  # seconds a client refused for the memory budget is told to wait (commits take about that)
_JSON = "application/json"


@dataclass
class _State:
    sink: Sink
    users: Users | None
    body_size_limit: int
    decompressed_size_limit: int
    health: Callable[[], dict[str, Any]] | None
    metrics: Callable[[], Sequence[SampleFields]] | None
    streams: Callable[[], list[dict[str, Any]]] | None
    responses: Counter[int] = field(default_factory=Counter)
    events: int = 0
    bytes: int = 0
    defer: bool = False  # hand bodies to the sink undecoded (it decodes in worker processes)
    limits: Limits = field(default_factory=Limits)
    budget: MemoryBudget = field(default_factory=lambda: MemoryBudget(Limits().memory_budget))
    counters: ConnectionCounters = field(default_factory=ConnectionCounters)
    guards: dict[asyncio.BaseTransport, _HeaderGuard] = field(default_factory=dict)  # by connection
    # Who sends: the clients answered with success, by host and user (:mod:`connectors.senders`).
    senders: Senders = field(default_factory=lambda: Senders("http"))

    @property
    def inflate_limit(self) -> int:
        """Decompressed bytes a body may have: the configured limit, at most what the memory budget holds."""
        return inflate_limit(self.decompressed_size_limit, self.budget)


STATE = web.AppKey("windvane_http_state", _State)


def make_app(
    sink: Sink,
    *,
    users: Users | None = None,
    body_size_limit: int = HttpConfig.body_size_limit,
    decompressed_size_limit: int = HttpConfig.decompressed_size_limit,
    health: Callable[[], dict[str, Any]] | None = None,
    metrics: Callable[[], Sequence[SampleFields]] | None = None,
    streams: Callable[[], list[dict[str, Any]]] | None = None,
    limits: Limits | None = None,
    budget: MemoryBudget | None = None,
    pages: Callable[[web.Application], None] | None = None,
) -> web.Application:
    """The aiohttp application of the endpoint (routes and replies in the module docstring).

    ``pages`` adds routes of its own to the application before ingestion's
    (the web console: ``GET /`` and paths under ``/-/``), which it then
    answers itself, authentication included; without it ``GET /`` answers
    an empty 200.

    ``limits``: timeouts and connection limits (also read by :class:`HttpServer`);
    ``budget``: the memory budget, shared with the process's other servers (one
    of ``limits.memory_budget`` of its own when not given).

    Serve it with :class:`HttpServer`; another runner must pass
    ``auto_decompress=False`` (as HttpServer does) or compressed bodies are
    inflated by aiohttp without the decompressed size limit, then refused.
    """
    limits = limits or Limits()
    state = _State(
        sink,
        users,
        body_size_limit,
        decompressed_size_limit,
        health,
        metrics,
        streams,
        defer=bool(getattr(sink, "accepts_undecoded", False)),
        limits=limits,
        budget=budget or MemoryBudget(limits.memory_budget),
        senders=Senders("http", active=limits.idle_timeout),
    )
    app = web.Application(middlewares=[_errors_middleware], client_max_size=body_size_limit)
    app[STATE] = state
    if pages is not None:
        pages(app)
    else:
        app.router.add_get("/", _root)
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/streams", _streams)
    for method in ("POST", "PUT"):
        app.router.add_route(method, "/{path:.*}", _ingest, expect_handler=_expect)
    return app


# ---------------------------------------------------------------- replies


def _json_response(status: int, body: Any, headers: Any = None) -> web.Response:
    return web.Response(status=status, body=json.dumps(body).encode(), content_type=_JSON, headers=headers)


def _error_response(exc: HttpError) -> web.Response:
    headers: list[tuple[str, str]] | dict[str, str] | None = None
    if isinstance(exc, Unauthorized):
        headers = [("WWW-Authenticate", f'Basic {_REALM}, charset="UTF-8"'), ("WWW-Authenticate", f"Bearer {_REALM}")]
    elif isinstance(exc, ServiceUnavailable):
        headers = {"Retry-After": str(exc.retry_after)}
    resp = _json_response(exc.status, {"error": exc.code, "message": exc.message}, headers)
    if isinstance(exc, (PayloadTooLarge, RequestTimeout, ServiceUnavailable)):
        resp.force_close()  # the rest of the body is unread: do not parse it as the next request
    return resp


@web.middleware
async def _errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every failure into a JSON error reply, and count replies by status."""
    state = request.app[STATE]
    transport = request.transport
    guard = state.guards.get(transport) if transport is not None else None
    if guard is not None:
        guard.request_started()
    try:
        resp = await _replied(request, handler)
    except BaseException:  # on any way out, cancellation included, the guard must hear the request ended
        if guard is not None:
            guard.request_finished(ending=True)
        raise
    if guard is not None:
        guard.request_finished(ending=resp.keep_alive is False)
    state.responses[resp.status] += 1
    return resp


async def _replied(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The reply to ``request``: the handler's, or the JSON error reply for what it raised."""
    try:
        resp = await handler(request)
    except HttpError as exc:
        resp = _error_response(exc)
    except Backpressure as exc:
        retry = max(1, math.ceil(exc.retry_after)) if math.isfinite(exc.retry_after) else 1
        resp = _json_response(
            503,
            {"error": "backpressure", "message": f"{exc}; nothing was stored: retry after {retry} s"},
            {"Retry-After": str(retry)},
        )
    except CommitFailed as exc:
        log.warning("commit failed for %s %s: %s", request.method, request.path, exc)
        resp = _json_response(
            500, {"error": "commit_failed", "message": f"{exc}; nothing of this request was stored: retry it"}
        )
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = exc.reason.lower().replace(" ", "_")
        message = f"{request.method} {request.path}: {exc.reason}"
        if exc.status == 405:
            message += "; send events with POST or PUT, read with GET /, /health, /metrics or /streams"
        allow = exc.headers.get("Allow")
        resp = _json_response(exc.status, {"error": code, "message": message}, {"Allow": allow} if allow else None)
    except Exception:  # any other fault of a handler is the client's 500 reply, logged, not a dropped connection
        log.exception("internal error on %s %s", request.method, request.path)
        resp = _json_response(500, {"error": "internal", "message": "internal server error; see the server log"})
    return resp


# ---------------------------------------------------------------- checks before the body


def _authenticate(users: Users | None, header: str | None, role: str) -> str | None:
    """The authenticated user, None when no users are configured; :class:`Unauthorized` for missing or wrong
    credentials, :class:`Forbidden` for a user without ``role``."""
    if not users:
        return None
    try:
        user = users.authenticate(header)
    except CredentialsError as exc:
        raise Unauthorized("unauthorized", str(exc)) from None
    if not users.may(user, role):
        raise Forbidden("forbidden", f"user {user!r} does not hold the {role!r} role this request needs")
    return user


def _check_length(request: web.Request, limit: int) -> None:
    length = request.content_length
    if length is not None and length > limit:
        raise PayloadTooLarge(
            "body_too_large",
            f"Content-Length {length} exceeds the body size limit of {limit} bytes; send smaller requests",
        )


async def _expect(request: web.Request) -> web.StreamResponse | None:
    """``Expect: 100-continue``: refuse (401, 413, 417) before the client sends the body, else let it send."""
    state = request.app[STATE]
    expect = request.headers.get("Expect", "")
    try:
        if expect.lower() != "100-continue":
            raise ExpectationFailed(
                "expectation_failed", f"Expect: {expect[:60]!r} is not supported; only 100-continue is"
            )
        _authenticate(state.users, request.headers.get("Authorization"), "send")
        _check_length(request, state.body_size_limit)
        _admit(state, held_for(request.content_length or 0), Charges(state.budget))
    except HttpError as exc:
        resp = _error_response(exc)
        resp.force_close()  # the client may or may not send the body now: do not read it as a request
        state.responses[resp.status] += 1
        return resp
    if request.version >= (1, 1):
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # as aiohttp's own handler: the final response has not started
    return None


def _admit(state: _State, size: int, charges: Charges) -> None:
    """Raise 503 unless ``size`` more bytes fit in the memory budget.

    A request that holds everything the budget holds goes on anyway: it is
    alone, and bounded by the body and decompressed size limits.
    """
    budget = state.budget
    if budget.fits(size) or budget.used <= charges.total:
        return
    state.counters.budget_refusals += 1
    raise ServiceUnavailable(
        "memory_budget",
        f"the server holds {budget.used} bytes of requests not yet committed, its memory budget is {budget.limit} "
        f"bytes (--memory-budget); nothing of this request was stored: retry after {_BUDGET_RETRY} s",
        retry_after=_BUDGET_RETRY,
    )


async def _read_body(request: web.Request, state: _State, charges: Charges) -> bytes:
    """The body, charged to the memory budget as it arrives (503 past it), within the body timeout (408)."""
    limit = state.body_size_limit
    chunks: list[bytes] = []
    total = 0
    content = request.content
    try:
        async with asyncio.timeout(state.limits.body_timeout):
            while True:
                try:
                    chunk = await content.readany()
                except (ConnectionError, ClientPayloadError) as exc:
                    # The client went away or broke the chunked framing: no one may read this reply, but say why.
                    raise BadRequest("incomplete_body", f"the request body stopped before its end: {exc}") from None
                if not chunk:
                    return b"".join(chunks)
                total += len(chunk)
                if total > limit:
                    raise PayloadTooLarge(
                        "body_too_large",
                        f"the body exceeds the body size limit of {limit} bytes; send smaller requests",
                    )
                _admit(state, len(chunk), charges)
                charges.add("partial", len(chunk))
                chunks.append(chunk)
    except TimeoutError:
        state.counters.body_timeouts += 1
        raise RequestTimeout(
            "body_timeout",
            f"the request body did not arrive within {state.limits.body_timeout:g} s (the body timeout); "
            "nothing of it was stored",
        ) from None


async def _inflated_size(state: _State, body: bytes, encoding: str | None) -> int:
    """The decompressed size of a compressed body (0 if it is not), found in constant memory before it is
    decompressed; 413 past the decompressed size limit."""
    codings = [c for c in (encoding or "").split(",") if c.strip() and c.strip().lower() != "identity"]
    if not codings:
        return 0
    limit = state.inflate_limit
    size = await asyncio.to_thread(inflated_size, body, codings, limit)
    if size > limit:
        raise PayloadTooLarge(
            "decompressed_too_large",
            f"the body decompresses to more than {limit} bytes (the decompressed size limit, at most what the "
            "memory budget holds decoded); send smaller requests",
        )
    return size


def _idempotency_key(request: web.Request) -> bytes | None:
    value = request.headers.get("Idempotency-Key")
    if not value:
        return None
    key = value.encode("utf-8", "surrogateescape")
    if len(key) > MAX_IDEMPOTENCY_KEY:
        raise BadRequest(
            "bad_idempotency_key", f"the Idempotency-Key is {len(key)} bytes; at most {MAX_IDEMPOTENCY_KEY} are allowed"
        )
    return key


# ---------------------------------------------------------------- handlers


def _decode(
    wendelin: bool,
    body: bytes,
    content_type: str | None,
    encoding: str | None,
    path: str,
    query: dict[str, str],
    limit: int,
) -> list[Batch]:
    return decode_body(body, wendelin, content_type, encoding, path, query, limit, time.time_ns())


def decode_body(
    body: bytes,
    wendelin: bool,
    content_type: str | None,
    encoding: str | None,
    path: str,
    query: dict[str, str],
    limit: int,
    now: int,
) -> list[Batch]:
    """The batches of a request body (``now``: its arrival time); also run by ingest's workers (module level)."""
    data = decompress(body, encoding, limit)
    if wendelin:
        return decode_wendelin(data, content_type, query=query, now_ns=now, size=len(body))
    return decode_in_http(data, content_type, tag=tag_for_path(path), query=query, now_ns=now, size=len(body))


async def _ingest(request: web.Request) -> web.Response:
    state = request.app[STATE]
    user = _authenticate(state.users, request.headers.get("Authorization"), "send")
    _check_length(request, state.body_size_limit)
    key = _idempotency_key(request)
    charges = Charges(state.budget)  # what this request holds in the memory budget, until it is answered
    try:
        _admit(state, held_for(request.content_length or 0), charges)
        body = await _read_body(request, state, charges)
        inflated = await _inflated_size(state, body, request.headers.get("Content-Encoding"))
        held = held_for(len(body)) + held_for(inflated)
        _admit(state, held - charges.total, charges)
        charges.change(submitted=held, partial=-charges.partial)
        return await _ingest_body(request, state, key, body, user)
    finally:
        charges.release()


async def _ingest_body(
    request: web.Request, state: _State, key: bytes | None, body: bytes, user: str | None = None
) -> web.Response:
    """Decode (here or in the sink's workers) and submit a request's body; the reply once committed (the
    client, ``request.remote`` as ``user``, is counted among the senders then)."""
    client = (request.remote or "?", user)
    path = request.path
    wendelin = path == "/ingest" or path.endswith("/ingest")
    query = {k: request.query[k] for k in request.query.keys()}  # the first value of each parameter
    if "time_key" not in query and request.headers.get("User-Agent", "").startswith(FLUENT_BIT_AGENT):
        query["time_key"] = "date"  # Fluent Bit's json_date_key, which its JSON formats add to every record
    args = (
        wendelin,
        body,
        request.headers.get("Content-Type"),
        request.headers.get("Content-Encoding"),
        path,
        query,
        state.inflate_limit,
    )
    if state.defer:
        return await _ingest_undecoded(state, key, *args, client=client)
    if len(body) > INLINE_DECODE_BYTES:
        batches = await asyncio.to_thread(_decode, *args)
    else:
        batches = _decode(*args)
    state.bytes += len(body)
    if batches:
        receipt = await state.sink.submit(batches, key=key, wait=False)
        state.events += count_events(batches)
        accepted, quarantined, duplicate, reasons = (
            receipt.accepted,
            receipt.quarantined,
            receipt.duplicate,
            receipt.reasons,
        )
    else:
        accepted, quarantined, duplicate, reasons = 0, 0, False, ()
    state.senders.answered(*client, accepted + quarantined, len(body))
    if wendelin:
        return web.Response(status=204)
    reply: dict[str, Any] = {"accepted": accepted, "quarantined": quarantined}
    if duplicate:
        reply = {"duplicate": True, **reply}
    if reasons:
        reply["reasons"] = list(reasons)
    return _json_response(200, reply)


async def _ingest_undecoded(
    state: _State,
    key: bytes | None,
    wendelin: bool,
    body: bytes,
    content_type: str | None,
    encoding: str | None,
    path: str,
    query: dict[str, str],
    limit: int,
    *,
    client: tuple[str, str | None] = ("?", None),
) -> web.Response:
    """:func:`_ingest` with the body decoded by the sink's workers, not on the event loop; ``client`` (host,
    user) is counted among the senders once it is committed."""
    tag = query.get("reference", "") if wendelin else tag_for_path(path)
    undecoded = Undecoded(
        tag,
        body,
        decode_body,
        (wendelin, content_type, encoding, path, query, limit, time.time_ns()),
        "http",
        len(body),
    )
    state.bytes += len(body)
    try:
        receipt = await state.sink.submit([undecoded], key=key, wait=False)
    except UndecodableBatch as exc:
        if isinstance(exc.cause, HttpError):
            raise exc.cause from None
        raise BadRequest("bad_body", str(exc)) from None
    state.events += receipt.accepted + receipt.quarantined
    state.senders.answered(*client, receipt.accepted + receipt.quarantined, len(body))
    if wendelin:
        return web.Response(status=204)
    reply: dict[str, Any] = {"accepted": receipt.accepted, "quarantined": receipt.quarantined}
    if receipt.duplicate:
        reply = {"duplicate": True, **reply}
    if receipt.reasons:
        reply["reasons"] = list(receipt.reasons)
    return _json_response(200, reply)


async def _root(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def _health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    reply: dict[str, Any] = {"status": "ok"}
    if state.health is not None:
        try:
            extra = await asyncio.to_thread(state.health)
        # The check may fail with anything (database, disk, network): each is the unhealthy answer.
        except Exception as exc:  # noqa: BLE001
            log.warning("health check failed: %s", exc)
            return _json_response(
                503, {"status": "error", "error": "unhealthy", "message": f"health check failed: {exc}"}
            )
        reply.update(extra or {})
    if reply.get("status") == "ok":
        return _json_response(200, reply)
    reply.setdefault("error", "unhealthy")
    reply.setdefault("message", f"the service reports status {reply.get('status')!r}")
    return _json_response(503, reply)


def _own_samples(state: _State) -> list[Sample]:
    samples = [
        Sample(
            "windvane_http_responses_total",
            "HTTP responses of the ingestion endpoint by status.",
            "counter",
            {"code": str(code)},
            n,
        )
        for code, n in sorted(state.responses.items())
    ]
    samples.append(
        Sample(
            "windvane_http_events_total",
            "Events decoded from HTTP requests and handed to ingest.",
            "counter",
            {},
            state.events,
        )
    )
    samples.append(
        Sample(
            "windvane_http_received_bytes_total",
            "Request body bytes received, as sent (compressed).",
            "counter",
            {},
            state.bytes,
        )
    )
    samples.extend(Sample(*sample) for sample in state.budget.samples())  # the process's, shared with Forward
    return samples


async def _metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    _authenticate(state.users, request.headers.get("Authorization"), "read")
    own = _own_samples(state)
    extra = state.metrics

    def render() -> str:
        return render_metrics([*(extra() if extra is not None else ()), *own])

    text = await asyncio.to_thread(render)
    return web.Response(body=text.encode(), headers={"Content-Type": METRICS_CONTENT_TYPE})


async def _streams(request: web.Request) -> web.Response:
    state = request.app[STATE]
    _authenticate(state.users, request.headers.get("Authorization"), "read")
    streams = state.streams
    if streams is None:
        raise NotFound("not_configured", "this server has no stream listing (no streams() callable was given)")
    return web.Response(body=await asyncio.to_thread(lambda: json.dumps(streams()).encode()), content_type=_JSON)


# ---------------------------------------------------------------- runner


class _HeaderGuard(ProtocolProxy):
    """Times a connection between requests (aiohttp has no header timeout).

    From a request's first byte its headers have ``header_timeout`` seconds
    (the middleware calls :meth:`request_started` once they are in); with no
    request under way and nothing received, the connection is closed after
    ``idle_timeout``. Body timeouts are :func:`_read_body`'s.
    """

    def __init__(self, inner: asyncio.Protocol, state: _State) -> None:
        super().__init__(inner)
        self.state = state
        self.transport: asyncio.Transport | None = None
        self.requests = 0  # under way on this connection (aiohttp runs them one at a time)
        self.waiting_headers = False
        self.ending = False  # its last response closes it (aiohttp may still read the rest of a body a while)
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)  # a TCP listener's connections have stream transports
        self.state.guards[transport] = self
        super().connection_made(transport)
        self._arm(self.state.limits.idle_timeout, self._idle)

    def data_received(self, data: bytes) -> None:
        if not self.requests and not self.waiting_headers:
            self.waiting_headers = True
            self._arm(self.state.limits.header_timeout, self._headers_late)
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._arm(None, None)
        if self.transport is not None:
            self.state.guards.pop(self.transport, None)
        super().connection_lost(exc)

    def request_started(self) -> None:
        self.requests += 1
        self.waiting_headers = False
        self._arm(None, None)

    def request_finished(self, ending: bool = False) -> None:
        self.requests -= 1
        self.ending = self.ending or ending
        if not self.requests and self.transport is not None and not self.transport.is_closing():
            self._arm(self.state.limits.idle_timeout, self._idle)

    def _arm(self, delay: float | None, callback: Callable[[], None] | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if delay is not None and callback is not None:
            self.timer = asyncio.get_running_loop().call_later(delay, callback)

    def _headers_late(self) -> None:
        self.timer = None
        if self.requests:
            return
        self.state.counters.header_timeouts += 1
        log.info(
            "HTTP request headers from %s not received within %g s (header timeout); closing",
            self._peer(),
            self.state.limits.header_timeout,
        )
        self._close()

    def _idle(self) -> None:
        self.timer = None
        if self.requests or self.waiting_headers:
            return
        if self.ending:  # not idle: closing, still reading what the client sends after its answer
            self._close()
            return
        self.state.counters.idle_timeouts += 1
        log.info("HTTP connection from %s idle for %g s; closing", self._peer(), self.state.limits.idle_timeout)
        self._close()

    def _peer(self) -> str:
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "?"

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()


class HttpServer:
    """Serves an application made by :func:`make_app` on ``host:port`` (``port=0`` picks a free port).

    Connections are accepted by a :class:`connectors.listener.Listener` with the
    application's limits (``max_connections``, file descriptors running out,
    the TLS handshake timeout) and timed by a :class:`_HeaderGuard`.
    ``reuse_port`` listens beside other processes serving the same port.
    """

    def __init__(
        self,
        app: web.Application,
        host: str = HttpConfig.host,
        port: int = HttpConfig.port,
        *,
        ssl: _ssl.SSLContext | None = None,
        reuse_port: bool = False,
    ) -> None:
        self._app = app
        self._reuse_port = reuse_port
        self._state = app[STATE]
        self._host = host
        self._port = port
        self._ssl = ssl
        self._runner: web.AppRunner | None = None
        self._listener: Listener | None = None

    async def start(self) -> None:
        """Listen; from now on :attr:`port` is the bound port."""
        state = self._state
        limits = state.limits
        # No access log: a line per request costs more than decoding a small one.
        # auto_decompress=False: aiohttp would inflate gzip/deflate bodies itself,
        # with no limit on the decompressed size; decode.decompress enforces one.
        # aiohttp's own keep-alive timer is only a backstop: the guard closes idle connections first, and counts them.
        runner = web.AppRunner(
            self._app,
            access_log=None,
            handle_signals=False,
            auto_decompress=False,
            keepalive_timeout=2 * limits.idle_timeout,
        )
        await runner.setup()
        handlers = runner.server
        assert handlers is not None
        listener = Listener(
            lambda: _HeaderGuard(handlers(), state),
            self._host,
            self._port,
            name="HTTP",
            ssl=self._ssl,
            max_connections=limits.max_connections,
            handshake_timeout=limits.handshake_timeout,
            counters=state.counters,
            reuse_port=self._reuse_port,
        )
        try:
            await listener.start()
        except BaseException:  # on any way out, cancellation included, the application must be cleaned up
            await runner.cleanup()
            raise
        self._runner, self._listener = runner, listener
        self._port = listener.port

    @property
    def port(self) -> int:
        """The port listened on (the bound one once started)."""
        return self._port

    @property
    def stats(self) -> dict[str, int]:
        """The listener's counters (:class:`connectors.listener.ConnectionCounters`: timeouts, refused, ...)."""
        return self._state.counters.as_dict()

    @property
    def senders(self) -> Senders:
        """The clients answered with success, by host and user (:mod:`connectors.senders`)."""
        return self._state.senders

    async def close(self) -> None:
        """Stop listening, let requests in flight finish, close connections."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
