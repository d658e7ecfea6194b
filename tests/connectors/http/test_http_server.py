"""The HTTP ingestion endpoint over real HTTP on 127.0.0.1 (aiohttp client and raw sockets), with a real Sink object.

:class:`CollectingSink` implements the ingest Sink protocol in memory: it
records what it was given, counts non-map records as quarantined, can hold
submissions until released, and can raise Backpressure or CommitFailed.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import struct

import aiohttp
import msgpack
import pytest

from windvane.connectors.http import HttpServer, make_app, render_metrics
from windvane.connectors.http.metrics import Sample
from windvane.ingest.auth import Users
from windvane.ingest.batch import Batch, Receipt
from windvane.ingest.errors import Backpressure, CommitFailed

NDJSON = b'{"message":"hello","level":"info"}\n{"message":"world","level":"warn","code":42}\n'


class CollectingSink:
    """An in-memory Sink: ``submit`` stores batches (after ``gate`` opens) or raises ``error``."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.calls: list[tuple[bytes | None, bool]] = []
        self.keys: set[bytes] = set()
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()
        self.resolved = 0
        self.error: Exception | None = None

    async def submit(self, batches, *, key=None, wait=True) -> Receipt:
        self.calls.append((key, wait))
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        if key is not None and key in self.keys:
            return Receipt(0, 0, None, duplicate=True)
        if key is not None:
            self.keys.add(key)
        self.batches.extend(batches)
        bad = sum(1 for b in batches for r in b.records if not isinstance(r, dict))
        total = sum(len(b) for b in batches)
        self.resolved += 1
        return Receipt(total - bad, bad, b"\x00" * 8, reasons=("record is not a map",) if bad else ())


@pytest.fixture
async def served():
    """Start a server for a sink and options; yields a factory returning (base url, sink)."""
    servers = []

    async def start(sink=None, **options):
        sink = sink or CollectingSink()
        server = HttpServer(make_app(sink, **options), "127.0.0.1", 0)
        await server.start()
        servers.append(server)
        return f"http://127.0.0.1:{server.port}", sink

    yield start
    for server in servers:
        await server.close()


@pytest.fixture
async def client():
    async with aiohttp.ClientSession() as session:
        yield session


async def post(client, url, data, headers=None, method="POST"):
    async with client.request(method, url, data=data, headers=headers or {}) as resp:
        body = await resp.read()
        return resp.status, resp.headers, (json.loads(body) if body else None)


async def raw_exchange(port: int, request: bytes, *, read_until_close=False) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await reader.read() if read_until_close else await read_response(reader)
    writer.close()
    return data


async def read_response(reader: asyncio.StreamReader) -> bytes:
    """One HTTP/1.1 response with a Content-Length (or none: empty body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def body_of(response: bytes):
    return json.loads(response.split(b"\r\n\r\n", 1)[1])


# ---------------------------------------------------------------- success paths


async def test_ndjson_from_out_http(served, client):
    url, sink = await served()
    status, headers, body = await post(client, url + "/app/log", NDJSON, {"Content-Type": "application/x-ndjson"})
    assert status == 200 and body == {"accepted": 2, "quarantined": 0}
    assert headers["Content-Type"].startswith("application/json")
    (batch,) = sink.batches
    assert batch.tag == "app.log" and batch.records[1] == {"message": "world", "level": "warn", "code": 42}
    assert sink.calls == [(None, False)]  # wait=False: a full sink answers 503 at once


async def test_gzip_json_array_and_put(served, client):
    url, sink = await served()
    body = gzip.compress(b'[{"a":1}\n,{"b":2}\n,3\n]')
    status, _, reply = await post(
        client, url + "/x/y", body, {"Content-Type": "application/json", "Content-Encoding": "gzip"}, "PUT"
    )
    assert status == 200 and reply == {"accepted": 2, "quarantined": 1, "reasons": ["record is not a map"]}
    assert sink.batches[0].raw(2) == b"3"


async def test_big_body_is_decoded_off_the_loop(served, client):
    url, _ = await served()
    lines = b"".join(b'{"seq":%d,"pad":"%s"}\n' % (i, b"x" * 100) for i in range(5000))
    status, _, reply = await post(client, url + "/big", lines, {"Content-Type": "application/x-ndjson"})
    assert status == 200 and reply["accepted"] == 5000


async def test_wendelin_route_answers_204(served, client):
    users = Users({"erp5": "secret"})
    url, sink = await served(users=users)
    chunk = msgpack.packb([msgpack.ExtType(0, struct.pack(">II", 1700000000, 7)), {"temp": 21.5}])
    auth = "Basic " + base64.b64encode(b"erp5:secret").decode()
    async with client.post(
        url + "/erp5/portal_ingestion_policies/default/ingest?reference=sensor.product",
        data=chunk,
        headers={"Authorization": auth, "Content-Type": "application/x-www-form-urlencoded"},
    ) as resp:
        assert resp.status == 204 and await resp.read() == b""
    (batch,) = sink.batches
    assert batch.tag == "sensor.product" and batch.times == [1700000000_000000007] and batch.raw(0) == chunk
    status, _, body = await post(client, url + "/ingest", chunk, {"Authorization": auth})
    assert status == 400 and body["error"] == "missing_reference"


async def test_idempotency_key_and_duplicate(served, client):
    url, sink = await served()
    headers = {"Content-Type": "application/json", "Idempotency-Key": "chunk-1"}
    assert (await post(client, url + "/t", b'{"a":1}', headers))[2] == {"accepted": 1, "quarantined": 0}
    status, _, body = await post(client, url + "/t", b'{"a":1}', headers)
    assert status == 200 and body == {"duplicate": True, "accepted": 0, "quarantined": 0}
    assert [k for k, _ in sink.calls] == [b"chunk-1", b"chunk-1"] and len(sink.batches) == 1


async def test_reply_only_after_submit_resolved(served, client):
    sink = CollectingSink()
    sink.gate = asyncio.Event()
    url, _ = await served(sink)
    task = asyncio.create_task(post(client, url + "/t", b'{"a":1}', {"Content-Type": "application/json"}))
    await sink.entered.wait()
    for _ in range(20):  # let the server run: it must still be waiting for the commit
        await asyncio.sleep(0.005)
    assert not task.done() and sink.resolved == 0
    sink.gate.set()
    status, _, body = await task
    assert status == 200 and body["accepted"] == 1 and sink.resolved == 1


async def test_health_metrics_streams_root(served, client):
    samples = [
        ("windvane_events_total", "Events committed.", "counter", {"stream": "app.log"}, 10),
        Sample("windvane_lag_seconds", "Commit lag.", "gauge", {"stream": 'we"ird\\'}, 0.25),
        ("windvane_events_total", "Events committed.", "counter", {"stream": "b"}, 3),
    ]
    url, _ = await served(
        health=lambda: {"store": "sqlite"}, metrics=lambda: samples, streams=lambda: [{"name": "app.log", "events": 10}]
    )
    async with client.get(url + "/") as resp:
        assert resp.status == 200
    assert (await post(client, url + "/health", None, method="GET"))[2] == {"status": "ok", "store": "sqlite"}
    assert (await post(client, url + "/streams", None, method="GET"))[2] == [{"name": "app.log", "events": 10}]
    async with client.get(url + "/metrics") as resp:
        assert resp.status == 200 and resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = await resp.text()
    assert text.startswith(render_metrics(samples))
    assert (
        '# TYPE windvane_events_total counter\nwindvane_events_total{stream="app.log"} 10\nwindvane_events_total{stream="b"} 3\n'
        in text
    )
    assert 'windvane_lag_seconds{stream="we\\"ird\\\\"} 0.25' in text
    assert 'windvane_http_responses_total{code="200"}' in text


async def test_health_failure_is_503(served, client):
    def broken():
        raise OSError("database unreachable")

    url, _ = await served(health=broken)
    status, _, body = await post(client, url + "/health", None, method="GET")
    assert status == 503 and "database unreachable" in body["message"]
    url, _ = await served(health=lambda: {"status": "degraded"})
    assert (await post(client, url + "/health", None, method="GET"))[0] == 503


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "code"),
    [
        ("/t", b'{"a":', {"Content-Type": "application/json"}, 400, "bad_json"),
        ("/t", b"a,b\n", {"Content-Type": "text/csv"}, 400, "unsupported_content_type"),
        ("/t", b"", {"Content-Type": "application/json"}, 400, "empty_body"),
        (
            "/t",
            # mtime=0: the body is part of the test's id, which every xdist worker must collect alike.
            gzip.compress(NDJSON, mtime=0)[:-8],
            {"Content-Type": "application/x-ndjson", "Content-Encoding": "gzip"},
            400,
            "truncated_body",
        ),
        ("/t", NDJSON, {"Content-Type": "application/x-ndjson", "Content-Encoding": "br"}, 415, "unsupported_encoding"),
        ("/", NDJSON, {"Content-Type": "application/x-ndjson"}, 400, "missing_tag"),
        ("/t", b"{}", {"Content-Type": "application/json", "Idempotency-Key": "k" * 300}, 400, "bad_idempotency_key"),
    ],
)
async def test_client_errors(served, client, path, body, headers, status, code):
    url, sink = await served()
    got, _, reply = await post(client, url + path, body, headers)
    assert (got, reply["error"]) == (status, code) and reply["message"]
    assert sink.calls == []


async def test_bad_json_message_has_line_and_column(served, client):
    url, _ = await served()
    status, _, reply = await post(client, url + "/t", b'{"a" 1}\n', {"Content-Type": "application/x-ndjson"})
    assert status == 400 and "line 1 of the NDJSON body is not valid JSON: column 6" in reply["message"]
    _, _, reply = await post(client, url + "/t", b'[{"a":1},\n{"a" 1}]', {"Content-Type": "application/json"})
    assert "line 2, column 6" in reply["message"]


async def test_body_too_large(served, client):
    url, sink = await served(body_size_limit=1000)
    status, _, reply = await post(client, url + "/t", b"[" + b"1," * 600 + b"1]", {"Content-Type": "application/json"})
    assert status == 413 and reply["error"] == "body_too_large" and "1000" in reply["message"]

    async def chunked():  # no Content-Length: the limit is enforced while reading
        for _ in range(30):
            yield b" " * 100

    async with client.post(url + "/t", data=chunked(), headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 413 and (await resp.json())["error"] == "body_too_large"
    url, _ = await served(decompressed_size_limit=1000)
    status, _, reply = await post(
        client, url + "/t", gzip.compress(b" " * 5000), {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    )
    assert status == 413 and reply["error"] == "decompressed_too_large"
    assert sink.calls == []


async def test_expect_100_continue(served):
    url, _ = await served(body_size_limit=1000)
    port = int(url.rsplit(":", 1)[1])
    # Too large: 413 before the body is sent (we never send it).
    response = await raw_exchange(
        port,
        b"POST /t HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n",
    )
    assert status_of(response) == 413 and body_of(response)["error"] == "body_too_large"
    # Acceptable: 100 Continue, then the body, then 200.
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /t HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 7\r\nExpect: 100-continue\r\n\r\n"
    )
    assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b'{"a":1}')
    response = await read_response(reader)
    writer.close()
    assert status_of(response) == 200 and body_of(response) == {"accepted": 1, "quarantined": 0}
    response = await raw_exchange(
        port, b"POST /t HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\nExpect: something\r\n\r\n"
    )
    assert status_of(response) == 417 and body_of(response)["error"] == "expectation_failed"


async def test_auth(served, client):
    users = Users({"fluent": "pw:with:colons"}, {"tok-123": "fluent"})
    url, sink = await served(users=users)
    headers = {"Content-Type": "application/json"}
    for auth in (None, "Basic " + base64.b64encode(b"fluent:wrong").decode(), "Bearer nope", "Basic !!!", "Digest x"):
        h = dict(headers, **({"Authorization": auth} if auth else {}))
        async with client.post(url + "/t", data=b'{"a":1}', headers=h) as resp:
            assert resp.status == 401 and (await resp.json())["error"] == "unauthorized"
            assert resp.headers.getall("WWW-Authenticate") == [
                'Basic realm="windvane", charset="UTF-8"',
                'Bearer realm="windvane"',
            ]
    basic = "Basic " + base64.b64encode(b"fluent:pw:with:colons").decode()
    assert (await post(client, url + "/t", b'{"a":1}', dict(headers, Authorization=basic)))[0] == 200
    assert (await post(client, url + "/t", b'{"a":1}', dict(headers, Authorization="Bearer tok-123")))[0] == 200
    assert len(sink.batches) == 2
    assert (await post(client, url + "/metrics", None, method="GET"))[0] == 401
    assert (await post(client, url + "/health", None, method="GET"))[0] == 200  # probes need no credentials
    # 401 before the body with Expect: 100-continue.
    port = int(url.rsplit(":", 1)[1])
    response = await raw_exchange(
        port, b"POST /t HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\nExpect: 100-continue\r\n\r\n"
    )
    assert status_of(response) == 401


async def test_backpressure_is_503_with_retry_after(served, client):
    sink = CollectingSink()
    sink.error = Backpressure("the store is 2 s behind", retry_after=2.3)
    url, _ = await served(sink)
    status, headers, body = await post(client, url + "/t", b'{"a":1}', {"Content-Type": "application/json"})
    assert status == 503 and headers["Retry-After"] == "3" and body["error"] == "backpressure"
    sink.error = Backpressure("full", retry_after=0.01)
    assert (await post(client, url + "/t", b'{"a":1}', {"Content-Type": "application/json"}))[1]["Retry-After"] == "1"


async def test_commit_failed_is_500(served, client):
    sink = CollectingSink()
    sink.error = CommitFailed("disk full")
    url, _ = await served(sink)
    status, _, body = await post(client, url + "/t", b'{"a":1}', {"Content-Type": "application/json"})
    assert status == 500 and body["error"] == "commit_failed" and "disk full" in body["message"]


async def test_unknown_routes_and_methods(served, client):
    url, _ = await served()
    status, _, body = await post(client, url + "/t", None, method="DELETE")
    assert status == 405 and body["error"] == "method_not_allowed"
    status, _, body = await post(client, url + "/streams", None, method="GET")
    assert status == 404 and body["error"] == "not_configured"


# ---------------------------------------------------------------- connections


async def test_slow_upload_does_not_block_others(served, client):
    url, sink = await served()
    port = int(url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = b'{"slow":1}'
    writer.write(
        b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        + body[:4]
    )
    await writer.drain()
    for i in range(5):  # other clients are served while the slow body is incomplete
        status, _, _ = await post(client, url + "/fast", b'{"i":%d}' % i, {"Content-Type": "application/json"})
        assert status == 200
    assert [b.tag for b in sink.batches] == ["fast"] * 5
    writer.write(body[4:])
    response = await read_response(reader)
    writer.close()
    assert status_of(response) == 200 and sink.batches[-1].records == [{"slow": 1}]


async def test_keep_alive(served):
    url, sink = await served()
    port = int(url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for i in range(3):
        writer.write(
            b'POST /k HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"k":%d}' % i
        )
        response = await read_response(reader)
        assert status_of(response) == 200 and b"connection: close" not in response.lower()
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(await read_response(reader)) == 200
    writer.close()
    assert [b.records[0]["k"] for b in sink.batches] == [0, 1, 2]


def test_render_metrics_rejects_bad_samples():
    assert render_metrics([]) == ""
    assert render_metrics([("x", "h\nelp", "gauge", {}, float("inf"))]) == "# HELP x h\\nelp\n# TYPE x gauge\nx +Inf\n"
    for bad in [
        ("bad-name", "", "gauge", {}, 1),
        ("x", "", "histogram", {}, 1),
        ("x", "", "gauge", {"0l": 1}, 1),
        ("x", "", "gauge", {}, "NaNa"),
        (1, 2),
    ]:
        with pytest.raises(ValueError):
            render_metrics([bad])
