"""``windvane serve`` end to end: real sockets, a real store, bad input answered and nothing else lost.

The connectors' own tests cover every protocol detail against a collecting
sink; these run the whole service as a user does, then read the store.
"""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest

from tests.forward_sender import chunk_id, packed_forward
from tests.serve_process import REPO, Serve
from windvane import arrays

FIXTURES = Path(__file__).parents[1] / "fixtures" / "forward"

SCHEMA = """
kind = "log"
tags = ["app.**", "fluentd.**", "fluentbit.**"]
[[fields]]
name = "seq"
dtype = "int64"
fill = -1
[[fields]]
name = "message"
dtype = "str"
[[fields]]
name = "host"
dtype = "str"
"""


@pytest.fixture
def schemas(tmp_path) -> Path:
    d = tmp_path / "schemas"
    d.mkdir()
    (d / "app.toml").write_text(SCHEMA)
    return d


@pytest.fixture
def serve(store_url, schemas, tmp_path):
    started = []

    def start(*args: str) -> Serve:
        s = Serve(store_url, schemas, tmp_path / "serve.log", *args)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.process.poll() is None:
            assert s.stop() == 0, s.log()


def post(port: int, path: str, body: bytes, headers: dict | None = None) -> tuple[int, dict, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/x-ndjson", **(headers or {})})
        response = conn.getresponse()
        text = response.read()
        return response.status, dict(response.getheaders()), json.loads(text) if text else {}
    finally:
        conn.close()


def get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def forward_send(port: int, message: bytes, *, expect_ack: bool, timeout: float = 10) -> bytes | None:
    """Send one message; the ack, or None if the server closed the connection without one."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(message)
        except (ConnectionResetError, BrokenPipeError):
            return None  # the server closed the connection while we were still sending
        if not expect_ack:
            sock.settimeout(timeout)
            try:
                return sock.recv(1024) or None
            except TimeoutError:
                return None
        unpacker = msgpack.Unpacker(raw=False)
        while True:
            data = sock.recv(1024)
            if not data:
                return None
            unpacker.feed(data)
            for reply in unpacker:
                return reply["ack"].encode()


def column(url: str, tag: str, name: str, quarantine: bool = False) -> list:
    with arrays.open_stream(url, tag, quarantine=quarantine) as s:
        return list(s[name][:])


def test_http_quarantines_bad_records_and_stores_the_rest(serve, store_url):
    s = serve()
    lines = [b'{"seq": 1, "message": "fine"}', b'{"seq": "two", "message": "wrong type"}', b'{"seq": 3}']
    status, _, reply = post(s.http_port, "/app/web", b"\n".join(lines) + b"\n")
    assert status == 200 and reply["accepted"] == 2 and reply["quarantined"] == 1
    assert "field 'seq': expected int64, got str 'two'" in reply["reasons"][0]
    assert column(store_url, "app.web", "seq") == [1, 3]
    assert column(store_url, "app.web", "raw", quarantine=True) == [lines[1]]
    assert "expected int64" in column(store_url, "app.web", "reason", quarantine=True)[0]
    assert column(store_url, "app.web", "source", quarantine=True) == ["http"]
    assert "quarantined 1 event(s) of tag 'app.web'" in s.log() and "expected int64" in s.log()


def test_http_bad_bodies_get_4xx_json_and_the_server_keeps_serving(serve, store_url):
    s = serve()
    status, _, reply = post(s.http_port, "/app/web", b'{"seq": \n{"seq": 1\n')
    assert status == 400 and reply["error"] == "bad_json" and "no valid JSON line" in reply["message"]
    truncated = gzip.compress(b'{"seq": 1}\n' * 100)[:-10]
    status, _, reply = post(s.http_port, "/app/web", truncated, {"Content-Encoding": "gzip"})
    assert status == 400 and "gzip" in reply["message"]
    status, _, reply = post(s.http_port, "/app/web", b"x" * (33 << 20))
    assert status == 413 and reply["error"]
    status, _, reply = post(s.http_port, "/app/web", b'{"seq": 5}\n')
    assert status == 200 and reply["accepted"] == 1
    assert column(store_url, "app.web", "seq") == [5]


def test_http_idempotency_key_stores_once(serve, store_url):
    s = serve()
    body = b'{"seq": 1}\n{"seq": 2}\n'
    first = post(s.http_port, "/app/idem", body, {"Idempotency-Key": "batch-0001"})
    again = post(s.http_port, "/app/idem", body, {"Idempotency-Key": "batch-0001"})
    assert first[0] == again[0] == 200 and again[2].get("duplicate") is True
    assert column(store_url, "app.idem", "seq") == [1, 2]


def test_forward_malformed_chunk_is_not_acked_and_others_flow(serve, store_url):
    s = serve()
    cid = chunk_id()
    good = packed_forward("app.fw", [(1_700_000_000_000_000_000 + i, {"seq": i}) for i in range(10)], cid)
    broken = b"\x93\xa6app.fw\xc1\x80"  # 0xc1 is a byte msgpack never uses
    assert forward_send(s.forward_port, broken, expect_ack=False, timeout=3) is None
    assert forward_send(s.forward_port, good, expect_ack=True) == cid
    assert column(store_url, "app.fw", "seq") == list(range(10))
    assert "malformed Forward message" in s.log()


def test_forward_oversize_chunk_is_refused(serve, store_url, schemas, tmp_path):
    s = serve()
    cid = chunk_id()
    huge = packed_forward("app.big", [(1, {"message": "x" * (1 << 20)})] * 70, cid)  # > 64 MiB default limit
    assert forward_send(s.forward_port, huge, expect_ack=False, timeout=10) in (None, b"")
    assert "app.big" in s.log() and "limit" in s.log()
    assert forward_send(s.forward_port, packed_forward("app.big", [(1, {"seq": 1})], cid), expect_ack=True) == cid


@pytest.mark.parametrize(
    "name",
    [
        "fluentd_packed_text",
        "fluentd_packed_gzip",
        "fluentd_packed_zstd",
        "fluentbit_forward",
        "fluentbit_compressed_gzip",
        "fluentbit_message",
        "fluentbit_message_metadata",
        "message_ext8_time",
        "fluent_logger_python",
    ],
)
def test_fixtures_of_real_senders_are_accepted(serve, store_url, name):
    expected = json.loads((FIXTURES / "expected.json").read_text())
    s = serve()
    data = (FIXTURES / f"{name}.bin").read_bytes()
    with socket.create_connection(("127.0.0.1", s.forward_port), timeout=10) as sock:
        sock.sendall(data)
        if b"chunk" in data:  # acknowledged senders: wait for the ack
            assert sock.recv(1024), "no ack"
    deadline = time.monotonic() + 20
    tags = []
    while time.monotonic() < deadline and not tags:
        tags = arrays.list_streams(store_url)
        time.sleep(0.05)
    assert tags, s.log()
    with arrays.open_stream(store_url, tags[0]) as stream:
        n = len(stream)
        times = stream["time"][:].tolist()
        messages = list(stream["message"][:])
        extra = list(stream["extra"][:])
    if name == "fluent_logger_python":  # the Python client's fixture sends {"a": n} at whole seconds
        assert (n, times, extra) == (2, [1767225600 * 10**9, 1767225601 * 10**9], ['{"a":1}', '{"a":2}'])
        return
    assert n == len(messages) >= 1
    assert set(times) <= set(expected["times_ns"]) | {t // 10**9 * 10**9 for t in expected["times_ns"]}
    assert set(messages) <= {r["message"] for r in expected["records"]}


def test_bad_credentials_are_refused(serve, store_url, tmp_path):
    users = tmp_path / "users.toml"
    users.write_text('[users.sender]\npassword = "right password"\ntokens = ["a-long-token"]\n')
    s = serve("--users", str(users), "--shared-key", "the key")
    status, headers, reply = post(s.http_port, "/app/auth", b'{"seq": 1}\n')
    assert status == 401 and reply["error"] and "WWW-Authenticate" in headers
    import base64

    wrong = base64.b64encode(b"sender:wrong").decode()
    assert post(s.http_port, "/app/auth", b'{"seq": 1}\n', {"Authorization": f"Basic {wrong}"})[0] == 401
    right = base64.b64encode(b"sender:right password").decode()
    assert post(s.http_port, "/app/auth", b'{"seq": 1}\n', {"Authorization": f"Basic {right}"})[0] == 200
    assert post(s.http_port, "/app/auth", b'{"seq": 2}\n', {"Authorization": "Bearer a-long-token"})[0] == 200
    # Forward: a client that skips the handshake gets nothing acknowledged.
    cid = chunk_id()
    assert forward_send(
        s.forward_port, packed_forward("app.auth", [(1, {"seq": 9})], cid), expect_ack=False, timeout=3
    ) != msgpack.packb({"ack": cid.decode()})
    assert column(store_url, "app.auth", "seq") == [1, 2]


def test_health_metrics_and_streams(serve, store_url):
    s = serve()
    post(s.http_port, "/app/m", b'{"seq": 1}\n{"seq": "bad"}\n')
    status, body = get(s.http_port, "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    status, body = get(s.http_port, "/metrics")
    text = body.decode()
    assert status == 200
    assert 'windvane_stream_events_total{tag="app.m"} 1' in text
    assert 'windvane_stream_rejects_total{tag="app.m"} 1' in text
    assert "windvane_commits_total" in text and 'windvane_stream_lag_seconds{tag="app.m"}' in text
    status, body = get(s.http_port, "/streams")
    streams = json.loads(body)
    assert status == 200
    mine = next(x for x in streams if x["tag"] == "app.m" and not x["quarantine"])
    assert mine["rows"] == 1 and "seq" in mine["columns"]
    # dtypes named as schemas and `windvane info` name them
    assert mine["columns"]["message"]["dtype"] == "str" and mine["columns"]["seq"]["dtype"] == "int64"
    # The time range of its rows (the least and greatest time), as ISO 8601 UTC text.
    with arrays.open_stream(store_url, "app.m") as stream:
        when = str(stream["time"][:].astype("datetime64[ns]")[0]) + "Z"
    assert mine["earliest_time"] == mine["latest_time"] == when


def test_unrouted_tags_are_kept_in_quarantine(serve, store_url):
    s = serve()
    status, _, reply = post(s.http_port, "/nobody/knows", b'{"seq": 1}\n')
    assert status == 200 and reply["quarantined"] == 1 and "no schema matches" in reply["reasons"][0]
    assert column(store_url, "nobody.knows", "raw", quarantine=True) == [b'{"seq": 1}']


def windvane(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import windvane; windvane.main()", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_bad_input_exits_2_with_the_reason(tmp_path, schemas):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.toml").write_text('kind = "radar"\ntags = ["x"]\n')
    result = windvane("serve", "--store", f"sqlite:///{tmp_path}/s.db", "--schemas", str(bad))
    assert result.returncode == 2 and "kind 'radar' is not one of" in result.stderr
    result = windvane("serve", "--store", "postgres://x/y", "--schemas", str(schemas))
    assert result.returncode == 2 and "postgres" in result.stderr
    result = windvane(
        "serve", "--store", f"sqlite:///{tmp_path}/s.db", "--schemas", str(schemas), "--forward", "127.0.0.1:notaport"
    )
    assert result.returncode == 2 and "not a number" in result.stderr
    result = windvane(
        "serve", "--store", f"sqlite:///{tmp_path}/s.db", "--schemas", str(schemas), "--forward", "off", "--http", "off"
    )
    assert result.returncode == 2 and "nothing to serve" in result.stderr
