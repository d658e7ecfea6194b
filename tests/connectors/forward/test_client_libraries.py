"""Acceptance tests: the Fluentd project's own client libraries against `windvane serve`.

Real clients, real server, real store, no mocks. Each test starts
``windvane serve`` on a fresh store, runs one client driver (tests/clients.py,
tests/clients/) that sends N events and waits for every ack, then reads the
stream back with :func:`arrays.open_stream` and checks that it holds exactly
those events: count, values, order and timestamps to the precision the
client sends. An acknowledged event must already be readable when the ack
arrives, so acknowledged runs are read back once, without waiting.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests import clients
from tests.clients import expected_events, run_client
from tests.serve_process import Serve, event_schema, start_serve

pytestmark = pytest.mark.clients

COUNT = 10_000
SHARED_KEY = "windvane-shared-key-ü"
USER, PASSWORD = "alice", "s3cret-pässword"

SCHEMAS = {"clients.toml": event_schema("clients.**")}


# -- the server ------------------------------------------------------------------


@pytest.fixture
def serve(tmp_path, sqlite_url):
    """Start `windvane serve` (``serve(url=None, shared_key=, users=, tls=)``); SIGTERM at teardown, exit 0."""
    started: list[Serve] = []

    def start(url: str | None = None, *, shared_key=None, users=None, tls=None) -> Serve:
        extra = []
        if shared_key is not None:
            extra += ["--shared-key", shared_key]
            if not users:
                extra += ["--http-auth", "none"]  # these tests send over Forward; HTTP is open on purpose
        if users:
            users_file = tmp_path / "users.toml"
            users_file.write_text("".join(f'[users.{n}]\npassword = "{p}"\n\n' for n, p in users.items()))
            extra += ["--users", str(users_file)]
        if tls is not None:
            extra += ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key)]
        server = start_serve(tmp_path, SCHEMAS, *extra, store=url or sqlite_url, timeout=90)
        started.append(server)
        return server

    yield start
    failures = []
    for server in started:
        code = server.stop()
        if code != 0:
            failures.append(f"windvane serve exited {code} after SIGTERM\n{server.output()}")
    if failures:
        pytest.fail("\n\n".join(failures))


# -- TLS -------------------------------------------------------------------------


@dataclass
class Cert:
    cert: Path
    key: Path


@pytest.fixture(scope="module")
def tls_cert(tmp_path_factory) -> Cert:
    """A self-signed certificate for localhost and 127.0.0.1 (its own CA)."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    try:
        import datetime
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        openssl = shutil.which("openssl")
        if openssl is None:
            pytest.skip("neither the cryptography package nor openssl is installed")
        subprocess.run(
            [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
             "-addext", "basicConstraints=critical,CA:TRUE"],
            check=True, capture_output=True,
        )  # fmt: skip
        return Cert(cert, key)
    pkey = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(pkey.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(pkey, hashes.SHA256())
    )
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(
        pkey.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return Cert(cert, key)


# -- reading back ------------------------------------------------------------------

TIMINGS: list[tuple[str, int, float]] = []


@pytest.fixture(scope="module", autouse=True)
def _report_timings(request):
    """Print how long each client took, after the module's tests."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or not TIMINGS:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        reporter.write_line("client timings (driver wall time, events):")
        for name, count, seconds in TIMINGS:
            rate = count / max(seconds, 1e-9)
            reporter.write_line(f"  {name:<52} {count:>6} {seconds:7.2f} s  {rate:>9,.0f} events/s")


def send(name: str, client: str, server: Serve, tag: str, count: int, mode: str, **options) -> clients.Run:
    """Run a driver that must succeed; record its time."""
    run = run_client(client, server.host, server.forward_port, tag, count, mode, **options)
    assert run.returncode == 0 and run.summary and run.summary.get("ok"), (
        f"{name}: the client failed\n{run.describe()}\n--- server ---\n{server.output()}"
    )
    assert run.summary["sent"] == count
    if options.get("ack"):
        assert run.summary["acked"] == count, run.describe()
    TIMINGS.append((name, count, run.seconds))
    return run


def read_stream(url: str, tag: str) -> dict:
    from windvane import arrays

    with arrays.open_stream(url, tag) as s:
        n = len(s)
        columns = {k: s[k][:] for k in ("seq", "msg", "value", "time")}
    for k, v in columns.items():
        assert len(v) == n, f"column {k} holds {len(v)} values, the stream {n}"
    return columns


def stream_length(url: str, tag: str) -> int:
    """How many events stream ``tag`` holds; 0 if it does not exist (yet)."""
    from windvane import arrays

    try:
        with arrays.open_stream(url, tag) as s:
            return len(s)
    except KeyError:  # arrays.StreamNotFoundError
        return 0


def assert_stream(url: str, tag: str, count: int, *, time_unit_ns: int = 1, wait: float = 0.0) -> None:
    """The stream ``tag`` holds exactly events 0..count-1, in order.

    ``wait``: for clients without acks, how long the server may take to
    commit what the client wrote; acknowledged events must be there at once.
    """
    deadline = time.monotonic() + wait
    while wait and stream_length(url, tag) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    got = read_stream(url, tag)
    want = expected_events(count, time_unit_ns)
    n = len(got["seq"])
    assert n == count, f"stream {tag} holds {n} events, {count} were sent"

    seq = np.asarray(got["seq"])
    assert seq.dtype == np.int64, seq.dtype
    missing = np.setdiff1d(want["seq"], seq)
    assert missing.size == 0 and np.unique(seq).size == count, (
        f"stream {tag}: {missing.size} events missing (first {missing[:10].tolist()}), "
        f"{count - np.unique(seq).size} duplicated"
    )
    np.testing.assert_array_equal(seq, want["seq"], err_msg=f"stream {tag}: events out of order")

    value = np.asarray(got["value"])
    assert value.dtype == np.float64, value.dtype
    np.testing.assert_array_equal(value, want["value"])

    t = np.asarray(got["time"])
    assert t.dtype == np.int64, t.dtype
    bad = np.flatnonzero(t != want["time"])
    assert bad.size == 0, (
        f"stream {tag}: {bad.size} timestamps differ, first at seq {bad[0]}: "
        f"{int(t[bad[0]])} stored, {int(want['time'][bad[0]])} sent"
    )

    msg = [str(m) for m in got["msg"]]
    bad_msg = [i for i, (a, b) in enumerate(zip(msg, want["msg"])) if a != b]
    assert not bad_msg, (
        f"stream {tag}: {len(bad_msg)} msg values differ, first: {msg[bad_msg[0]]!r} != {want['msg'][bad_msg[0]]!r}"
    )


# -- PyPI fluent-logger --------------------------------------------------------------


def test_python_fluent_logger(serve):
    """fluent-logger-python: Message mode, EventTime with nanoseconds; it has no acks."""
    server = serve()
    send("python fluent-logger Message", "python", server, "clients.python", COUNT, "Message")
    assert_stream(server.url, "clients.python", COUNT, wait=30)


# -- npm fluent-logger ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["Message", "PackedForward", "CompressedPackedForward"])
def test_node_fluent_logger_shared_key(serve, mode):
    """fluent-logger-node: requireAckResponse over a shared-key handshake, each event mode."""
    server = serve(shared_key=SHARED_KEY)
    tag = f"clients.node.{mode.lower()}"
    send(f"npm fluent-logger {mode} ack shared-key", "fluent-logger", server, tag, COUNT, mode,
         ack=True, shared_key=SHARED_KEY)  # fmt: skip
    assert_stream(server.url, tag, COUNT)


def test_node_fluent_logger_user_auth(serve):
    """fluent-logger-node with shared key and username/password (the HELO carries an auth salt).

    Not over TLS: fluent-logger 3.4.1 starts listening for a chunk's ack only
    in the socket write callback, and over TLS the ack can arrive first and is
    then lost (an "ack response timeout" in about half the runs against a
    server that acks at once). See tests/clients/README.md.
    """
    server = serve(shared_key=SHARED_KEY, users={USER: PASSWORD, "bob": "other"})
    tag = "clients.node.userauth"
    send("npm fluent-logger PackedForward ack shared-key+user", "fluent-logger", server, tag, 2_000, "PackedForward",
         ack=True, shared_key=SHARED_KEY, username=USER, password=PASSWORD, batch=500)  # fmt: skip
    assert_stream(server.url, tag, 2_000)


# -- npm @fluent-org/logger ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["Forward", "PackedForward", "CompressedPackedForward"])
def test_fluent_org_logger_ack(serve, mode):
    """@fluent-org/logger: several chunks in flight on one connection, each acked by chunk id."""
    server = serve()
    tag = f"clients.fluentorg.{mode.lower()}"
    send(f"npm @fluent-org/logger {mode} ack", "fluent-org", server, tag, COUNT, mode, ack=True)
    assert_stream(server.url, tag, COUNT)


def test_fluent_org_logger_message_mode_ack(serve):
    """@fluent-org/logger Message mode: 4-element messages, every one acked, pipelined."""
    server = serve()
    tag = "clients.fluentorg.message"
    send("npm @fluent-org/logger Message ack", "fluent-org", server, tag, 2_000, "Message", ack=True, batch=500)
    assert_stream(server.url, tag, 2_000)


def test_fluent_org_logger_tls_user_auth(serve, tls_cert):
    """@fluent-org/logger over TLS (socket.tls) with shared key and username/password."""
    server = serve(shared_key=SHARED_KEY, users={USER: PASSWORD}, tls=tls_cert)
    tag = "clients.fluentorg.tls"
    send("npm @fluent-org/logger PackedForward ack TLS+user", "fluent-org", server, tag, COUNT, "PackedForward",
         ack=True, shared_key=SHARED_KEY, username=USER, password=PASSWORD, tls_ca=tls_cert.cert)  # fmt: skip
    assert_stream(server.url, tag, COUNT)


def test_fluent_org_logger_mariadb(serve, mariadb_url):
    """The same acknowledged PackedForward stream, stored on MariaDB."""
    server = serve(mariadb_url)
    tag = "clients.fluentorg.mariadb"
    send("npm @fluent-org/logger PackedForward ack (MariaDB)", "fluent-org", server, tag, COUNT, "PackedForward",
         ack=True)  # fmt: skip
    assert_stream(server.url, tag, COUNT)


# -- Go fluent-logger-golang ----------------------------------------------------------


@pytest.mark.parametrize(
    "mode, count, time_unit_ns",
    [("msgpack", COUNT, 1), ("json", COUNT, 10**9), ("msgpack-seconds", 2_000, 10**9)],
    ids=["SubSecondPrecision", "MarshalAsJSON", "integer-seconds"],
)
def test_go_fluent_logger_ack(serve, mode, count, time_unit_ns):
    """fluent-logger-golang with RequestAck: one acked Message per Post (JSON acks for MarshalAsJSON)."""
    server = serve()
    tag = f"clients.go.{mode.replace('-', '_')}"
    send(f"go fluent-logger-golang {mode} RequestAck", "go", server, tag, count, mode, ack=True)
    assert_stream(server.url, tag, count, time_unit_ns=time_unit_ns)


def test_go_fluent_logger_tls(serve, tls_cert):
    """fluent-logger-golang over TLS (FluentNetwork "tls") with RequestAck."""
    server = serve(tls=tls_cert)
    tag = "clients.go.tls"
    send("go fluent-logger-golang msgpack RequestAck TLS", "go", server, tag, 2_000, "msgpack", ack=True,
         tls_ca=tls_cert.cert)  # fmt: skip
    assert_stream(server.url, tag, 2_000)


# -- refusals ----------------------------------------------------------------------


@pytest.mark.parametrize("client", ["fluent-logger", "fluent-org"])
def test_wrong_shared_key_or_password_is_refused(serve, client):
    """A client with the wrong shared key or password fails, and nothing of it is stored."""
    server = serve(shared_key=SHARED_KEY, users={USER: PASSWORD})
    tries = {
        "key": dict(shared_key="not-the-key", username=USER, password=PASSWORD),
        "password": dict(shared_key=SHARED_KEY, username=USER, password="wrong"),
        "user": dict(shared_key=SHARED_KEY, username="mallory", password=PASSWORD),
    }
    for what, creds in tries.items():
        tag = f"clients.refused.{client.replace('-', '')}.{what}"
        run = run_client(client, server.host, server.forward_port, tag, 10, "PackedForward", ack=True, timeout=15,
                         **creds)  # fmt: skip
        assert run.returncode != 0, f"wrong {what} accepted\n{run.describe()}"
        assert stream_length(server.url, tag) == 0, f"wrong {what}: events stored"
    # the right credentials still work on the same server
    tag = f"clients.refused.{client.replace('-', '')}.ok"
    send(f"{client} right credentials", client, server, tag, 10, "PackedForward", ack=True,
         shared_key=SHARED_KEY, username=USER, password=PASSWORD)  # fmt: skip
    assert_stream(server.url, tag, 10)


# -- the drivers themselves: a missing ack must fail them (no windvane needed) ------


class _SilentServer:
    """Accepts Forward connections and reads everything, but never answers."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn):
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            self.received += len(data)

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.mark.parametrize(
    "client, mode",
    [
        ("fluent-logger", "Message"),
        ("fluent-logger", "PackedForward"),
        ("fluent-org", "PackedForward"),
        ("go", "msgpack"),
        ("go", "json"),
    ],
)
def test_driver_fails_without_ack(client, mode):
    """The drivers' own guarantee, checked against a peer that never acks: exit non-zero."""
    silent = _SilentServer()
    try:
        clients.driver_command(client)  # build (or skip) first
        run = run_client(client, "127.0.0.1", silent.port, "clients.noack", 5, mode, ack=True, ack_timeout_ms=1500,
                         timeout=4)  # fmt: skip
    finally:
        silent.close()
    assert run.returncode not in (0, -9), f"no ack, yet the driver did not fail (or hung)\n{run.describe()}"
    assert silent.received > 0, "the driver sent nothing"
    assert not (run.summary or {}).get("ok"), run.describe()


@pytest.mark.parametrize(
    "client, mode", [("python", "Message"), ("fluent-logger", "Message"), ("fluent-org", "Forward"), ("go", "msgpack")]
)
def test_driver_fails_when_nothing_listens(client, mode):
    """Connection refused: every driver exits non-zero, promptly."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # closed again before the driver connects
    clients.driver_command(client)
    run = run_client(client, "127.0.0.1", port, "clients.nobody", 5, mode, ack=client != "python", timeout=10)
    assert run.returncode not in (0, -9), run.describe()
