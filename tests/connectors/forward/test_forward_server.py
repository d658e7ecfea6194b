"""ForwardServer over real TCP sockets (and TLS, UDP), with a real Sink implementation that records batches.

No mocks: clients are raw sockets writing what real senders write, and the
PyPI ``fluent-logger`` client itself. No timing assertions: tests wait on
events, never on durations.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import logging
import os
import socket
import ssl
import subprocess
import threading
from pathlib import Path

import msgpack
import pytest

from windvane.connectors.forward.handshake import ping
from windvane.connectors.forward.server import ForwardServer
from windvane.ingest.auth import Users
from windvane.ingest.batch import Receipt
from windvane.ingest.errors import Backpressure, CommitFailed

FIXTURES = Path(__file__).parents[2] / "fixtures" / "forward"
pytestmark = pytest.mark.timeout(120)


class CollectingSink:
    """A Sink that keeps every submission; it can hold a key, fail a key, or push back."""

    def __init__(self) -> None:
        self.submissions: list[tuple[list, bytes | None]] = []
        self.started: list[bytes | None] = []
        self.holds: dict[bytes, asyncio.Event] = {}
        self.fail_keys: set[bytes] = set()
        self.backpressure = 0  # raise Backpressure this many times
        self.gate: asyncio.Event | None = None  # when set to an unset Event, every submit waits on it
        self.changed = asyncio.Event()

    async def submit(self, batches, *, key=None, wait=True) -> Receipt:
        self.started.append(key)
        self.changed.set()
        if self.gate is not None:
            await self.gate.wait()
        if key in self.holds:
            await self.holds[key].wait()
        if key in self.fail_keys:
            self.fail_keys.discard(key)
            raise CommitFailed("the test store is down")
        if self.backpressure:
            self.backpressure -= 1
            raise Backpressure("the test store is full", retry_after=0.01)
        self.submissions.append((list(batches), key))
        self.changed.set()
        return Receipt(accepted=sum(len(b) for b in batches), quarantined=0, tid=b"\x00" * 8)

    async def submit_many(self, items, *, wait=True) -> list:
        # Each item as a submit of its own, its error as its outcome (the Sink contract).
        return await asyncio.gather(*(self.submit(b, key=k, wait=wait) for b, k in items), return_exceptions=True)

    @property
    def events(self) -> list:
        return [(b.tag, t, r) for batches, _ in self.submissions for b in batches for t, r in zip(b.times, b.records)]

    async def wait_for(self, predicate) -> None:
        while not predicate():
            self.changed.clear()
            await self.changed.wait()


def packb(value) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def packed_message(tag: str, n: int, chunk: str | None, start: int = 0) -> bytes:
    entries = b"".join(packb([1700000000 + i, {"i": i, "msg": "x" * 150}]) for i in range(start, start + n))
    option = {"size": n, "compressed": "text"}
    if chunk is not None:
        option["chunk"] = chunk
    return b"\x93" + packb(tag) + b"\xdb" + len(entries).to_bytes(4, "big") + entries + packb(option)


def chunk_id() -> str:
    return base64.encodebytes(os.urandom(16)).decode()  # as out_forward: ends with "\n"


@pytest.fixture
async def sink():
    return CollectingSink()


@pytest.fixture
async def server(sink):
    srv = ForwardServer(sink, "127.0.0.1", 0)
    await srv.start()
    yield srv
    await srv.close()


async def read_acks(reader: asyncio.StreamReader, n: int) -> list:
    unpacker = msgpack.Unpacker(raw=False)
    acks: list = []
    while len(acks) < n:
        data = await reader.read(65536)
        assert data, f"connection closed after {len(acks)} of {n} acks"
        unpacker.feed(data)
        acks.extend(unpacker)
    return acks


async def spin() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_fluentd_fixture_is_acked_after_commit(server, sink):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    data = (FIXTURES / "fluentd_packed_gzip.bin").read_bytes()
    key = json.loads((FIXTURES / "expected.json").read_text())["chunks"]["fluentd_packed_gzip.bin"].encode()
    held = sink.holds[key] = asyncio.Event()
    writer.write(data)
    await sink.wait_for(lambda: key in sink.started)
    await spin()
    assert server.stats["acks"] == 0 and not sink.submissions  # not acked while the commit is pending
    held.set()
    (ack,) = await read_acks(reader, 1)
    assert ack == {"ack": key.decode()} and ack["ack"].endswith("\n")
    assert sink.submissions[0][1] == key
    assert [r[b"host"] for _, _, r in sink.events] == [b"web-01", b"web-02"]  # fluentd sends text as bin
    writer.close()


async def test_acks_in_arrival_order_with_pipelining(server, sink):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    chunks = [chunk_id() for _ in range(5)]
    held = sink.holds[chunks[0].encode()] = asyncio.Event()
    writer.write(b"".join(packed_message("app", 10, c, start=10 * i) for i, c in enumerate(chunks)))
    # The later chunks are committed while the first still waits: pipelined...
    await sink.wait_for(lambda: len(sink.submissions) == 4)
    await spin()
    assert server.stats["acks"] == 0  # ...but none is acked before the first
    held.set()
    acks = await read_acks(reader, 5)
    assert [a["ack"] for a in acks] == chunks
    assert sorted(t for _, t, _ in sink.events) == [(1700000000 + i) * 10**9 for i in range(50)]
    writer.close()


async def test_in_flight_is_bounded_and_reading_pauses(sink):
    srv = ForwardServer(sink, "127.0.0.1", 0, max_in_flight=2)
    await srv.start()
    sink.gate = asyncio.Event()  # every submit waits: the store is "slow"
    message = packed_message("app", 500, None)  # ~100 KB
    count = 400  # ~40 MB: far more than the socket buffers hold
    sock = socket.create_connection(("127.0.0.1", srv.port))
    loop = asyncio.get_running_loop()
    sending = loop.run_in_executor(None, sock.sendall, message * count)
    await sink.wait_for(lambda: len(sink.started) >= 2)
    for _ in range(50):
        await asyncio.sleep(0)
    # The server stopped reading: TCP pushes back, the client is still blocked in sendall.
    assert not sending.done()
    assert len(sink.started) == 2  # never more than max_in_flight submissions pending
    sink.gate.set()
    await sending
    await loop.run_in_executor(None, sock.shutdown, socket.SHUT_WR)
    await sink.wait_for(lambda: len(sink.events) == 500 * count)
    sock.close()
    await srv.close()


async def test_backpressure_is_retried_then_acked(server, sink):
    sink.backpressure = 3
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    c = chunk_id()
    writer.write(packed_message("app", 3, c))
    (ack,) = await read_acks(reader, 1)
    assert ack == {"ack": c} and len(sink.events) == 3
    writer.close()


async def test_commit_failed_gives_no_ack_and_closes_the_connection(server, sink, caplog):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    failing, ok = chunk_id(), chunk_id()
    sink.fail_keys.add(failing.encode())
    with caplog.at_level(logging.ERROR, "windvane.connectors.forward"):
        writer.write(packed_message("app", 2, failing) + packed_message("app", 2, ok))
        # Closed once what was submitted is answered: a client without an ack timeout of its own (Fluent
        # Bit) learns at once that it must resend.
        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(await reader.read())
    writer.close()
    acked = {reply["ack"] for reply in unpacker}
    assert failing not in acked and acked <= {ok}
    assert "commit failed" in caplog.text and "closing: the client resends" in caplog.text
    # The client resends what was not acknowledged over a new connection: it is acknowledged now.
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    resent = [c for c in (failing, ok) if c not in acked]
    writer.write(b"".join(packed_message("app", 2, c) for c in resent))
    assert await read_acks(reader, len(resent)) == [{"ack": c} for c in resent]
    writer.close()


async def test_messages_without_chunk_are_committed(server, sink):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"".join(packb(["app.py", 1700000000 + i, {"i": i}]) for i in range(100)) + b"\xc0")
    writer.write_eof()
    await sink.wait_for(lambda: len(sink.events) == 100)
    assert [r["i"] for _, _, r in sink.events] == list(range(100))
    assert await reader.read() == b""  # no ack for chunkless messages; closed after EOF
    writer.close()


async def test_malformed_closes_only_that_connection(server, sink, caplog):
    good_r, good_w = await asyncio.open_connection("127.0.0.1", server.port)
    bad_r, bad_w = await asyncio.open_connection("127.0.0.1", server.port)
    first = chunk_id()
    with caplog.at_level(logging.ERROR, "windvane.connectors.forward"):
        bad_w.write(packed_message("app", 2, first) + packb([42, 1, {}, {"chunk": "never"}]))
        acks = await read_acks(bad_r, 1)
        assert await bad_r.read() == b""  # then closed
    assert acks == [{"ack": first}]  # the message before the bad one is committed and acked
    assert "malformed Forward message from 127.0.0.1:" in caplog.text and "tag is int" in caplog.text
    c = chunk_id()
    good_w.write(packed_message("app", 2, c))
    assert await read_acks(good_r, 1) == [{"ack": c}]
    assert server.stats["malformed"] == 1
    good_w.close()
    bad_w.close()


async def test_garbage_bytes_and_truncated_gzip(server, sink, caplog):
    with caplog.at_level(logging.ERROR, "windvane.connectors.forward"):
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        w.write(b"\x93\xa3app\xc1\xc1\xc1")
        assert await r.read() == b""
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        payload = gzip.compress(packb([1, {"a": 1}]) * 100)[:-8]
        w.write(packb(["app", payload, {"compressed": "gzip", "chunk": "c"}]))
        assert await r.read() == b""
    assert "truncated" in caplog.text
    assert server.stats["malformed"] == 2 and not sink.submissions


async def test_oversize_chunk(sink, caplog):
    srv = ForwardServer(sink, "127.0.0.1", 0, chunk_size_limit=10_000)
    await srv.start()
    r, w = await asyncio.open_connection("127.0.0.1", srv.port)
    with caplog.at_level(logging.ERROR, "windvane.connectors.forward"):
        w.write(packed_message("big.tag", 200, chunk_id()))
        assert await r.read() == b""
    assert "big.tag" in caplog.text and "10000" in caplog.text and "127.0.0.1:" in caplog.text
    assert srv.stats["oversize"] == 1 and not sink.submissions
    # Other connections are fine.
    r, w = await asyncio.open_connection("127.0.0.1", srv.port)
    c = chunk_id()
    w.write(packed_message("small", 2, c))
    assert await read_acks(r, 1) == [{"ack": c}]
    w.close()
    await srv.close()


async def test_slow_byte_by_byte_sender_does_not_block_others(server, sink):
    slow_r, slow_w = await asyncio.open_connection("127.0.0.1", server.port)
    fast_r, fast_w = await asyncio.open_connection("127.0.0.1", server.port)
    slow_chunk, fast_chunk = chunk_id(), chunk_id()
    slow_message = packed_message("slow", 3, slow_chunk)
    half = len(slow_message) // 2
    for i in range(half):
        slow_w.write(slow_message[i : i + 1])
        await slow_w.drain()
        await asyncio.sleep(0)
    fast_w.write(packed_message("fast", 3, fast_chunk))
    assert await read_acks(fast_r, 1) == [{"ack": fast_chunk}]  # served while the slow one is mid-message
    for i in range(half, len(slow_message)):
        slow_w.write(slow_message[i : i + 1])
        await slow_w.drain()
    assert await read_acks(slow_r, 1) == [{"ack": slow_chunk}]
    slow_w.close()
    fast_w.close()


async def test_json_mode(server, sink):
    r, w = await asyncio.open_connection("127.0.0.1", server.port)
    w.write(
        b'["app.json", 1700000000, {"k": "v"}, {"chunk": "j1\\n"}]["app.json", [[1700000001, {"k": 2}]], {"chunk": "j2"}]'
    )
    first = json.loads(await r.readuntil(b"}"))
    second = json.loads(await r.readuntil(b"}"))
    assert [first, second] == [{"ack": "j1\n"}, {"ack": "j2"}]
    assert [rec for _, _, rec in sink.events] == [{"k": "v"}, {"k": 2}]
    w.close()


def test_udp_heartbeat(server_in_thread):
    srv, _ = server_in_thread
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(30)
        s.sendto(b"\x00", ("127.0.0.1", srv.port))
        data, _ = s.recvfrom(16)
    assert data == b"\x00"


async def handshake_client(port: int, **kw) -> tuple:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(await r.read(4096))
    helo = next(unpacker)
    assert (
        helo[0] == "HELO"
        and len(helo[1]["nonce"]) == 16
        and len(helo[1]["auth"]) == 16
        and helo[1]["keepalive"] is True
    )
    w.write(packb(ping(helo, **kw)))
    while True:
        try:
            return r, w, next(unpacker)
        except StopIteration:
            data = await r.read(4096)
            assert data
            unpacker.feed(data)


async def test_handshake_success_and_failures(sink, caplog):
    users = Users(passwords={"alice": "s3cret-password"})
    srv = ForwardServer(sink, "127.0.0.1", 0, shared_key="k3y", users=users, self_hostname="windvane-test")
    await srv.start()
    r, w, pong = await handshake_client(
        srv.port,
        client_hostname="client-1",
        shared_key="k3y",
        username="alice",
        password="s3cret-password",
        salt=b"s" * 16,
    )
    assert pong[:4] == ["PONG", True, "", "windvane-test"]
    assert len(pong[4]) == 128  # sha512 hex of salt + self_hostname + nonce + shared_key
    c = chunk_id()
    w.write(packed_message("app", 2, c))
    assert await read_acks(r, 1) == [{"ack": c}]
    w.close()
    with caplog.at_level(logging.WARNING, "windvane.connectors.forward"):
        r, w, pong = await handshake_client(
            srv.port, client_hostname="c2", shared_key="wrong", username="alice", password="s3cret-password"
        )
        assert pong == ["PONG", False, "shared_key mismatch", "", ""]
        assert await r.read() == b""
        r, w, pong = await handshake_client(
            srv.port, client_hostname="c3", shared_key="k3y", username="alice", password="nope"
        )
        assert pong == ["PONG", False, "username/password mismatch", "", ""]
        assert await r.read() == b""
    assert "127.0.0.1:" in caplog.text and "k3y" not in caplog.text and "s3cret" not in caplog.text
    assert srv.stats["rejected_auth"] == 2
    await srv.close()


async def test_a_user_without_the_send_role_is_refused_at_the_handshake(sink):
    users = Users(
        passwords={"viewer": "viewer-password", "feeder": "feeder-password"},
        roles={"viewer": frozenset({"read"}), "feeder": frozenset({"send"})},
    )
    srv = ForwardServer(sink, "127.0.0.1", 0, shared_key="k3y", users=users, self_hostname="windvane-test")
    await srv.start()
    try:
        r, w, pong = await handshake_client(
            srv.port, client_hostname="c1", shared_key="k3y", username="viewer", password="viewer-password"
        )
        assert pong == ["PONG", False, "user 'viewer' does not hold the 'send' role", "", ""]
        assert await r.read() == b""
        r, w, pong = await handshake_client(
            srv.port, client_hostname="c2", shared_key="k3y", username="feeder", password="feeder-password"
        )
        assert pong[:3] == ["PONG", True, ""]
        w.close()
    finally:
        await srv.close()


@pytest.fixture
def certificate(tmp_path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    try:
        from cryptography import x509
    except ImportError:
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
                "-keyout",
                str(key),
                "-out",
                str(cert),
            ],
            check=True,
            capture_output=True,
        )
        return cert, key
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    pk = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    c = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(pk.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(pk, hashes.SHA256())
    )
    cert.write_bytes(c.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(
        pk.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert, key


async def test_tls(sink, certificate):
    cert, key = certificate
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    srv = ForwardServer(sink, "127.0.0.1", 0, ssl=server_ctx, shared_key="tls-key")
    await srv.start()
    client_ctx = ssl.create_default_context(cafile=str(cert))
    r, w = await asyncio.open_connection("127.0.0.1", srv.port, ssl=client_ctx)
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(await r.read(4096))
    helo = next(unpacker)
    w.write(packb(ping(helo, client_hostname="tls-client", shared_key="tls-key")))
    unpacker.feed(await r.read(4096))
    assert next(unpacker)[1] is True
    c = chunk_id()
    w.write((FIXTURES / "fluentbit_compressed_gzip.bin").read_bytes() + packed_message("tls", 3, c))
    acks = await read_acks(r, 2)
    assert acks[1] == {"ack": c} and len(acks[0]["ack"]) == 24
    assert len(sink.events) == 5
    w.close()
    await srv.close()


def bulk_message(tag: str, first: int, blocks: int, chunk: str, *, as_bin: bool = False) -> bytes:
    """PackedForward of ``blocks`` vibration blocks of 300 kB (str32 entries as out_forward frames them,
    bin32 as Fluent Bit does): a bulk message, received in place where it is kept."""
    entries = b"".join(
        packb([1700000000 + i, {"samples": bytes([i % 251]) * 300_000, "i": i}]) for i in range(first, first + blocks)
    )
    return (
        b"\x93"
        + packb(tag)
        + (b"\xc6" if as_bin else b"\xdb")
        + len(entries).to_bytes(4, "big")
        + entries
        + packb({"size": blocks, "chunk": chunk})
    )


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
async def test_bulk_messages_are_received_whole_in_any_pieces(sink, certificate, tls):
    """Bulk messages (vibration blocks) are read straight into the buffer that keeps them; cut anywhere,
    pipelined with small messages, over TCP and TLS, every event arrives as sent."""
    cert, key = certificate
    server_ctx = client_ctx = None
    if tls:
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ctx.load_cert_chain(cert, key)
        client_ctx = ssl.create_default_context(cafile=str(cert))
    srv = ForwardServer(sink, "127.0.0.1", 0, ssl=server_ctx)
    await srv.start()
    chunks = [chunk_id() for _ in range(5)]
    stream = b"".join(
        [
            bulk_message("vib.a", 0, 4, chunks[0]),
            packed_message("small", 3, chunks[1]),
            bulk_message("vib.b", 4, 2, chunks[2], as_bin=True),
            bulk_message("vib.a", 6, 3, chunks[3]),
            packed_message("small", 2, chunks[4], start=3),
        ]
    )
    r, w = await asyncio.open_connection("127.0.0.1", srv.port, ssl=client_ctx)
    at = piece = 0
    while at < len(stream):
        size = (1 + piece % 7) * 65_537 // 3  # pieces of odd sizes, from 21 kB to 153 kB
        w.write(stream[at : at + size])
        await w.drain()
        at, piece = at + size, piece + 1
    acks = await read_acks(r, 5)
    assert sorted(a["ack"] for a in acks) == sorted(chunks)
    blocks = [(tag, record["i"], record["samples"]) for tag, _, record in sink.events if tag.startswith("vib.")]
    assert [(tag, i) for tag, i, _ in blocks] == [("vib.a", i) for i in range(4)] + [("vib.b", 4), ("vib.b", 5)] + [
        ("vib.a", i) for i in range(6, 9)
    ]
    assert all(samples == bytes([i % 251]) * 300_000 for _, i, samples in blocks)
    assert [record["i"] for tag, _, record in sink.events if tag == "small"] == [0, 1, 2, 3, 4]
    w.close()
    await srv.close()


@pytest.fixture
def server_in_thread():
    """A server on its own event loop thread, for blocking clients (fluent-logger, UDP)."""
    loop = asyncio.new_event_loop()
    holder: dict = {}
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def main() -> None:
            holder["sink"] = CollectingSink()
            holder["server"] = ForwardServer(holder["sink"], "127.0.0.1", 0)
            await holder["server"].start()
            holder["stop"] = asyncio.Event()
            ready.set()
            await holder["stop"].wait()
            await holder["server"].close()

        loop.run_until_complete(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(60)
    yield holder["server"], holder["sink"]
    loop.call_soon_threadsafe(holder["stop"].set)
    thread.join(60)
    loop.close()


def test_fluent_logger_python_client(server_in_thread):
    from fluent import sender

    srv, sink = server_in_thread
    logger = sender.FluentSender("app", host="127.0.0.1", port=srv.port, nanosecond_precision=True)
    for i in range(10_000):
        assert logger.emit("py", {"i": i, "text": f"event {i}"}), logger.last_error
    logger.close()
    done = threading.Event()

    def check() -> bool:
        return len(sink.events) >= 10_000

    while not check():
        done.wait(0.05)  # polling the other thread's sink; not a timing assertion
    events = sink.events
    assert [r["i"] for _, _, r in events] == list(range(10_000))
    assert all(tag == "app.py" and r["text"] == f"event {r['i']}" for tag, _, r in events)
    times = [t for _, t, _ in events]
    assert times == sorted(times)
    assert any(t % 1_000_000_000 for t in times)  # nanosecond EventTime, not whole seconds
    assert srv.stats["events"] == 10_000
