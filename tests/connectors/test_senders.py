"""Who is sending (connectors.senders): Forward connections, HTTP clients, the workers' merged table.

Real sockets, no mocks: Forward clients are raw sockets writing what
out_forward writes; HTTP clients are aiohttp's; the workers' part asks two
in-process services through their real unix sockets (ingest.siblings).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from pathlib import Path

import aiohttp
import pytest

from tests.connectors.forward.test_forward_server import (
    CollectingSink,
    chunk_id,
    handshake_client,
    packed_message,
    read_acks,
)
from tests.connectors.http.test_http_server import NDJSON
from tests.connectors.http.test_http_server import CollectingSink as HttpSink
from tests.serve_process import event_schema
from windvane.connectors.forward.server import ForwardServer
from windvane.connectors.http import HttpServer, make_app
from windvane.connectors.senders import CLOSED_KEPT, Senders
from windvane.ingest import siblings
from windvane.ingest.auth import Users
from windvane.ingest.config import CommitterConfig, ServiceConfig, WorkerPlace
from windvane.ingest.service import Service, endpoint_samples

pytestmark = pytest.mark.timeout(120)


async def until(predicate) -> None:
    """Until ``predicate()`` holds (the server's side of a socket event runs on the loop a moment later)."""
    while not predicate():
        await asyncio.sleep(0.01)


def forward_rows(server: ForwardServer) -> list[dict]:
    return server.senders.snapshot()


def sockname(writer: asyncio.StreamWriter) -> str:
    host, port = writer.get_extra_info("sockname")[:2]
    return f"{host}:{port}"


async def send_chunks(writer: asyncio.StreamWriter, reader: asyncio.StreamReader, n: int, events: int) -> None:
    chunks = [chunk_id() for _ in range(n)]
    writer.write(b"".join(packed_message("senders.test", events, c) for c in chunks))
    await writer.drain()
    assert [a["ack"] for a in await read_acks(reader, n)] == chunks


async def test_forward_connections_are_listed_open_then_closed():
    srv = ForwardServer(CollectingSink(), "127.0.0.1", 0)
    await srv.start()
    try:
        r1, w1 = await asyncio.open_connection("127.0.0.1", srv.port)
        r2, w2 = await asyncio.open_connection("127.0.0.1", srv.port)
        before = time.time()
        await send_chunks(w1, r1, 2, 3)
        await send_chunks(w2, r2, 1, 5)
        rows = {row["peer"]: row for row in forward_rows(srv)}
        first, second = rows[sockname(w1)], rows[sockname(w2)]
        for row in (first, second):
            assert row["protocol"] == "forward"
            assert row["open"] is True
            assert row["user"] is None and row["hostname"] is None
            assert row["since"] <= before
            assert row["bytes"] > 0
        assert first["bytes"] == len(packed_message("senders.test", 3, chunk_id())) * 2

        w1.close()
        await w1.wait_closed()
        await until(lambda: len(srv.senders.snapshot()) == 2 and not srv.senders.snapshot()[1]["open"])
        opened, closed = srv.senders.snapshot()
        assert (opened["peer"], opened["open"]) == (sockname(w2), True)
        # Closed, a connection is its client's row: the host, without the port.
        assert (closed["peer"], closed["open"]) == ("127.0.0.1", False)
        assert closed["bytes"] == first["bytes"]
        assert srv.senders.open_count == 1
        w2.close()
    finally:
        await srv.close()


async def test_forward_senders_count_acks_and_name_the_handshake_user():
    users = Users(passwords={"alice": "s3cret-password"})
    srv = ForwardServer(CollectingSink(), "127.0.0.1", 0, shared_key="k3y", users=users, self_hostname="wv")
    await srv.start()
    try:
        r, w, pong = await handshake_client(
            srv.port, client_hostname="sensor-7", shared_key="k3y", username="alice", password="s3cret-password"
        )
        assert pong[:2] == ["PONG", True]
        await send_chunks(w, r, 2, 4)
        (row,) = forward_rows(srv)
        assert (row["user"], row["hostname"]) == ("alice", "sensor-7")
        assert (row["events"], row["chunks"]) == (8, 2)
        assert row["last_ack"] is not None and row["last_ack"] >= row["since"]
        w.close()
    finally:
        await srv.close()


async def test_a_client_that_reconnects_for_each_chunk_is_one_row_of_sums():
    srv = ForwardServer(CollectingSink(), "127.0.0.1", 0)
    await srv.start()
    try:
        kept = await asyncio.open_connection("127.0.0.1", srv.port)
        for _ in range(5):
            clients = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", srv.port) for _ in range(100)))
            for reader, writer in clients[:3]:
                await send_chunks(writer, reader, 1, 2)
            for _, writer in clients:
                writer.close()
            await asyncio.gather(*(writer.wait_closed() for _, writer in clients))
        await until(lambda: srv.stats["connections"] == 1)
        await until(lambda: len(srv.senders.snapshot()) == 2 and srv.senders.snapshot()[1]["chunks"] == 15)
        opened, client = srv.senders.snapshot()
        assert opened["open"] and opened["peer"] == sockname(kept[1])
        assert (client["peer"], client["open"], client["events"], client["chunks"]) == ("127.0.0.1", False, 30, 15)
        kept[1].close()
    finally:
        await srv.close()


def test_closed_clients_are_bounded():
    senders = Senders("forward")
    for i in range(CLOSED_KEPT + 50):
        for port in (1000, 1001):  # two connections of each client: one row
            senders.open(("c", i, port), f"10.0.{i // 256}.{i % 256}:{port}").acked(1)
            senders.close(("c", i, port))
    rows = senders.snapshot()
    assert len(rows) == CLOSED_KEPT
    assert rows[0]["peer"] == f"10.0.0.{CLOSED_KEPT + 49}" and rows[0]["events"] == 2  # the most recent first
    senders.open("v6", "[::1]:5000")
    senders.close("v6")
    assert senders.snapshot()[0]["peer"] == "[::1]"


async def test_http_client_is_one_sender_by_host_and_user():
    users = Users(passwords={"alice": "s3cret-password"})
    server = HttpServer(make_app(HttpSink(), users=users), "127.0.0.1", 0)
    await server.start()
    auth = "Basic " + base64.b64encode(b"alice:s3cret-password").decode()
    ndjson = {"Content-Type": "application/x-ndjson"}
    url = f"http://127.0.0.1:{server.port}/senders.http"
    try:
        # A connection each: the client's port changes, it stays one sender.
        for _ in range(2):
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
                async with session.post(url, data=NDJSON, headers={**ndjson, "Authorization": auth}) as resp:
                    assert resp.status == 200
        async with aiohttp.ClientSession() as session:
            async with session.post(url, data=NDJSON, headers=ndjson) as resp:
                assert resp.status == 401  # not answered with success: not counted
        (row,) = server.senders.snapshot()
        assert row["protocol"] == "http"
        assert (row["peer"], row["user"], row["hostname"]) == ("127.0.0.1", "alice", None)
        assert (row["requests"], row["events"], row["bytes"]) == (2, 4, 2 * len(NDJSON))
        assert row["open"] is True and row["last_ack"] >= row["since"]
        assert server.senders.open_count == 1
    finally:
        await server.close()


def test_http_clients_are_bounded_and_forgotten():
    senders = Senders("http", clients_kept=10)
    for i in range(25):
        senders.answered(f"10.0.0.{i}", None, 1, 100)
    senders.answered("10.0.0.20", None, 1, 100)  # the most recent again
    rows = senders.snapshot()
    assert len(rows) == 10
    assert rows[0]["peer"] == "10.0.0.20" and rows[0]["requests"] == 2
    assert {row["peer"] for row in rows} == {f"10.0.0.{i}" for i in range(15, 25)}
    gone = Senders("http", client_window=-1.0)  # every client answered before now is out of the window
    gone.answered("10.0.0.1", "alice", 1, 100)
    assert gone.snapshot() == []
    idle = Senders("http", active=-1.0)  # listed, no longer active
    idle.answered("10.0.0.1", "alice", 1, 100)
    assert [row["open"] for row in idle.snapshot()] == [False]
    assert idle.open_count == 0


def test_senders_open_gauge_is_an_endpoint_sample():
    forward, http = Senders("forward"), Senders("http")
    forward.open("a", "127.0.0.1:1")
    forward.open("b", "127.0.0.1:2")
    forward.close("a")
    http.answered("127.0.0.1", None, 1, 10)

    class Endpoint:
        def __init__(self, senders: Senders) -> None:
            self.senders = senders

    samples = {
        (name, labels["protocol"]): value
        for name, _, _, labels, value in endpoint_samples([Endpoint(forward), Endpoint(http)])
    }
    assert samples == {("windvane_senders_open", "forward"): 1, ("windvane_senders_open", "http"): 1}


def test_senders_sort_open_first_then_last_ack():
    rows = [
        {"open": False, "last_ack": 30.0, "peer": "closed"},
        {"open": True, "last_ack": None, "peer": "never"},
        {"open": True, "last_ack": 10.0, "peer": "older"},
        {"open": True, "last_ack": 20.0, "peer": "newer"},
    ]
    assert [r["peer"] for r in siblings.sort_senders(rows)] == ["newer", "older", "never", "closed"]


@pytest.fixture
def short_tmp():
    """A directory with a short path: unix socket addresses are limited to about a hundred bytes."""
    directory = Path(f"/tmp/wv-senders-{os.getpid()}-{base64.b32encode(os.urandom(5)).decode()}")
    directory.mkdir()
    yield directory
    for path in directory.rglob("*"):
        if not path.is_dir():
            path.unlink()
    for path in sorted(directory.rglob("*"), reverse=True):
        path.rmdir()
    directory.rmdir()


async def test_workers_answer_for_their_senders(short_tmp):
    """Two workers' services, each with its Forward server: either one lists both workers' senders."""
    key = os.urandom(32)
    (short_tmp / "schemas").mkdir()
    (short_tmp / "schemas" / "events.toml").write_text(event_schema("senders.test"))
    services, servers, stops, runs, ready = [], [], [], [], []
    for index in range(2):
        config = ServiceConfig(
            store=f"sqlite:///{short_tmp / f'store-{index}.db'}",
            schemas=str(short_tmp / "schemas"),
            committer=CommitterConfig(decode_workers=0),
            worker=WorkerPlace(index, 2, str(short_tmp), key),
        )
        service = Service(config)
        server = ForwardServer(CollectingSink(), "127.0.0.1", 0, heartbeat_udp=False)
        stop, started = asyncio.Event(), asyncio.Event()
        runs.append(asyncio.create_task(service.run([server], on_ready=started.set, stop=stop)))
        services.append(service)
        servers.append(server)
        stops.append(stop)
        ready.append(started)
    try:
        await asyncio.gather(*(started.wait() for started in ready))
        clients = [await asyncio.open_connection("127.0.0.1", servers[i].port) for i in (0, 0, 1)]
        for reader, writer in clients:
            await send_chunks(writer, reader, 1, 2)
        rows = await asyncio.to_thread(services[0].senders)
        assert sorted((row["worker"], row["peer"]) for row in rows) == sorted(
            (i, sockname(writer)) for i, (_, writer) in zip((0, 0, 1), clients)
        )
        assert all(row["open"] and row["protocol"] == "forward" for row in rows)
        from_other = await asyncio.to_thread(services[1].senders)
        assert sorted(r["peer"] for r in from_other) == sorted(r["peer"] for r in rows)
        for _, writer in clients:
            writer.close()
    finally:
        for stop in stops:
            stop.set()
        await asyncio.gather(*runs, return_exceptions=True)


def test_a_worker_that_does_not_answer_lists_no_senders():
    own = [{"open": True, "last_ack": 1.0, "worker": 0}]
    assert siblings.merge_senders(own, {1: ConnectionRefusedError("gone")}) == own
    other = [{"open": True, "last_ack": 2.0, "worker": 1}]
    assert siblings.merge_senders(own, {1: other}) == [*other, *own]


def test_mqtt_subscription_is_one_sender(tmp_path, request):
    """The subscription is listed with its broker, topics and what it acknowledged; closed once the subscriber is."""
    from tests.connectors.mqtt.mosquitto import Mosquitto
    from tests.connectors.mqtt.test_mqtt import SCHEMA, Publisher, _subscribe, wait_for

    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "plant.toml").write_text(SCHEMA)
    seen: list[dict] = []
    with Mosquitto(tmp_path / "mosquitto") as broker:
        publisher = Publisher(broker.port, f"pub-{request.node.name}")

        def work(subscriber) -> None:
            publisher.send([("plant/a/power", json.dumps({"value": i / 2, "seq": i})) for i in range(5)])
            wait_for(lambda: subscriber.stored >= 5, what="every message committed")
            seen.extend(subscriber.senders.snapshot())

        try:
            subscriber = asyncio.run(
                _subscribe(
                    f"sqlite:///{tmp_path / 'store.db'}",
                    tmp_path / "schemas",
                    broker.port,
                    work,
                    client_id=f"sub-{request.node.name}",
                )
            )
        finally:
            publisher.close()
    (row,) = seen
    assert (row["protocol"], row["peer"], row["user"]) == ("mqtt", f"127.0.0.1:{broker.port} (plant/#)", None)
    assert (row["chunks"], row["events"], row["open"]) == (5, 5, True)
    assert row["bytes"] > 0 and row["last_ack"] >= row["since"]
    (closed,) = subscriber.senders.snapshot()
    assert closed["open"] is False and closed["chunks"] == 5
