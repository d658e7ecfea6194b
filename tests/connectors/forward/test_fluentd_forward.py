"""Real fluentd 1.14.6, run as deployments run it, delivers into ``windvane serve`` over the Forward protocol.

fluentd runs with its supervisor (its worker in ASCII-8BIT: what ``in_tail``
reads is packed as msgpack bin), tails a JSON-lines file of text in many
scripts, and sends with ``out_forward`` and ``require_ack_response``: plain,
gzip, shared key, shared key with user auth, TLS, keepalive connections with
UDP and TCP heartbeats. Each test reads the stream back and compares every
value and every time (to the nanosecond fluentd parsed) with the file. The
last two kill ``windvane serve`` with SIGKILL, and stop MariaDB for 30 s, in
the middle of a run: fluentd's own buffer and retries resend, and every line
is stored exactly once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.connectors.forward.test_client_libraries import Cert, tls_cert  # noqa: F401 - a fixture
from tests.fluent_programs import Program, start_fluentd
from tests.serve_process import event_schema, free_port, start_serve
from windvane import arrays, neostore

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

SCHEMAS = {"fd.toml": event_schema("fd.**", "fb.**", extra="keep")}
SHARED_KEY = "fluentd-shared-key-ü"
BASE = 1_767_225_600  # 2026-01-01T00:00:00Z


def line_text(i: int) -> str:
    """Text of line ``i``: scripts, quotes, a backslash, an emoji, and an empty string now and then."""
    if i % 97 == 0:
        return ""
    return f'event {i} Grüße "Köln" \\ température °C 温度センサー ✓ 🌬️ ' + "abc"[i % 3] * (i % 40)


def line_time_ns(i: int) -> int:
    return (BASE + i // 1000) * 10**9 + (i % 1000) * 1_000_003


def write_lines(path: Path, count: int, start: int = 0) -> None:
    """Lines ``start`` to ``count - 1`` into ``path``: a new file from line 0, else appended (a growing log)."""
    with open(path, "a" if start else "w", encoding="utf-8") as f:
        for i in range(start, count):
            ns = line_time_ns(i)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + f".{ns % 10**9:09d}+0000"
            record = {"seq": i, "msg": line_text(i), "value": i * 0.25, "host": f"h{i % 3}", "t": stamp}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


def fluentd_config(
    source: Path, port: int, *, output: str = "", server: str = "", security: str = "", host: str = "127.0.0.1"
) -> str:
    return f"""
<source>
  @type tail
  path {source}
  pos_file {source}.pos
  read_from_head true
  tag fd.events
  <parse>
    @type json
    time_key t
    time_type string
    time_format %Y-%m-%dT%H:%M:%S.%N%z
  </parse>
</source>
<match fd.**>
  @type forward
  require_ack_response true
  ack_response_timeout 5
  {output}
  <buffer>
    flush_interval 0.5s
    chunk_limit_size 2m
    retry_wait 1s
    retry_max_interval 2s
    retry_forever true
  </buffer>
  <server>
    host {host}
    port {port}
    {server}
  </server>
  {security}
</match>
"""


def rows(url: str, tag: str = "fd.events", quarantine: bool = False) -> int:
    store = neostore.open(url, read_only=True)
    try:
        with arrays.open_stream(store, tag, quarantine=quarantine) as s:
            return len(s)
    except Exception:  # noqa: BLE001 - the stream appears with the first commit
        return 0
    finally:
        store.close()


def wait_rows(url: str, count: int, timeout: float, *, what: str = "", tag: str = "fd.events") -> None:
    deadline = time.monotonic() + timeout
    while rows(url, tag) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{rows(url, tag)} of {count} rows after {timeout} s {what}")
        time.sleep(0.5)


def check_stream(url: str, count: int, tag: str = "fd.events", time_slack_ns: int = 0) -> None:
    """The stream holds line 0..count-1 once each, every value and time as in the file; nothing quarantined.

    ``time_slack_ns``: how far the sender's own parse of the time may be off
    (Fluent Bit reads the fraction through a double).
    """
    store = neostore.open(url, read_only=True)
    try:
        with arrays.open_stream(store, tag) as s:
            seq = s["seq"][:]
            order = np.argsort(seq, kind="stable")
            assert seq[order].tolist() == list(range(count)), "each line exactly once"
            msg, extra = s["msg"][:], s["extra"][:]
            assert [msg[j] for j in order] == [line_text(i) for i in range(count)]
            np.testing.assert_array_equal(s["value"][:][order], np.arange(count) * 0.25)
            assert [extra[j] for j in order] == [
                json.dumps({"host": f"h{i % 3}"}).replace(" ", "") for i in range(count)
            ]
            off = np.abs(s["time"][:][order] - np.array([line_time_ns(i) for i in range(count)]))
            assert off.max() <= time_slack_ns, f"line {int(off.argmax())}: time {int(off.max())} ns off"
        assert tag not in arrays.list_streams(store, quarantine=True)
    finally:
        store.close()


def deliver(
    tmp_path: Path,
    count: int,
    start: Callable[[Path, int], Program],
    *,
    tag: str = "fd.events",
    serve_args: tuple = (),
    time_slack_ns: int = 0,
) -> str:
    """Tail ``count`` lines through a real program (``start(source, port)``) into a fresh ``windvane serve``,
    check the stream against the file and the program's log for errors; the program's log."""
    source = tmp_path / "events.jsonl"
    write_lines(source, count)  # before the start: a tail sees files made later only at its next scan
    url = f"sqlite:///{tmp_path / 'store.db'}"
    port = free_port()
    with start_serve(tmp_path, SCHEMAS, *serve_args, store=url, forward=f"127.0.0.1:{port}", http=None) as serve:
        program = start(source, port)
        try:
            wait_rows(url, count, 120, tag=tag, what=f"\n{program.log()}\n{serve.log()}")
            log = program.log(100_000)
        finally:
            program.stop()
        assert serve.stop() == 0, serve.log()
    check_stream(url, count, tag, time_slack_ns)
    assert "[error]" not in log, log
    return log


def run(tmp_path: Path, count: int, *, serve_args: tuple = (), **config: str) -> str:
    """Tail ``count`` lines through real fluentd into a fresh ``windvane serve``; fluentd's log."""
    return deliver(
        tmp_path,
        count,
        lambda source, port: start_fluentd(fluentd_config(source, port, **config), tmp_path),
        serve_args=serve_args,
    )


def test_plain(tmp_path):
    run(tmp_path, 3000)


def test_gzip(tmp_path):
    run(tmp_path, 3000, output="compress gzip")


def test_shared_key(tmp_path):
    security = f"<security>\n self_hostname fluentd-test\n shared_key {SHARED_KEY}\n</security>"
    run(tmp_path, 3000, security=security, serve_args=("--shared-key", SHARED_KEY))


def test_shared_key_with_users(tmp_path):
    users = tmp_path / "users.toml"
    users.write_text('[users.alice]\npassword = "s3cret-pässword"\n')
    security = f"<security>\n self_hostname fluentd-test\n shared_key {SHARED_KEY}\n</security>"
    run(
        tmp_path,
        3000,
        security=security,
        server="username alice\n    password s3cret-pässword",
        serve_args=("--shared-key", SHARED_KEY, "--users", str(users)),
    )


def test_wrong_user_password_is_refused_and_nothing_stored(tmp_path):
    users = tmp_path / "users.toml"
    users.write_text('[users.alice]\npassword = "right"\n')
    source = tmp_path / "events.jsonl"
    write_lines(source, 100)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    port = free_port()
    security = f"<security>\n self_hostname fluentd-test\n shared_key {SHARED_KEY}\n</security>"
    with start_serve(
        tmp_path,
        SCHEMAS,
        "--shared-key",
        SHARED_KEY,
        "--users",
        str(users),
        store=url,
        forward=f"127.0.0.1:{port}",
        http=None,
    ) as serve:
        fluentd = start_fluentd(
            fluentd_config(source, port, security=security, server="username alice\n    password wrong"), tmp_path
        )
        try:
            fluentd.wait_log("authentication failed: username/password mismatch", timeout=60)
        finally:
            fluentd.stop()
        assert "handshake from 127.0.0.1" in serve.log() and "refused: username/password mismatch" in serve.log()
    assert rows(url) == 0


def test_tls(tmp_path, tls_cert: Cert):
    # The certificate names localhost (Ruby's hostname check fails on an IP address): fluentd checks
    # the chain against it as its CA and the name it connected to.
    output = f"transport tls\n  tls_cert_path {tls_cert.cert}\n  tls_verify_hostname true"
    run(
        tmp_path,
        3000,
        output=output,
        host="localhost",
        serve_args=("--tls-cert", str(tls_cert.cert), "--tls-key", str(tls_cert.key)),
    )


@pytest.mark.parametrize("heartbeat", ["udp", "transport"])
def test_keepalive_connections_and_heartbeats(tmp_path, heartbeat):
    output = (
        f"keepalive true\n  keepalive_timeout 30\n  send_keepalive_packet true\n"
        f"  heartbeat_type {heartbeat}\n  heartbeat_interval 0.5"
    )
    log = run(tmp_path, 3000, output=output)
    # fluentd marks a server whose heartbeats go unanswered unavailable; it never did here.
    assert "detached forwarding server" not in log and "no nodes are available" not in log, log


@pytest.mark.crash
@pytest.mark.slow
def test_kill_9_of_windvane_mid_run(tmp_path):
    count = 200_000
    source = tmp_path / "events.jsonl"
    write_lines(source, count)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    port = free_port()
    serve = start_serve(tmp_path, SCHEMAS, store=url, forward=f"127.0.0.1:{port}")
    fluentd = start_fluentd(fluentd_config(source, port), tmp_path)
    try:
        wait_rows(url, 20_000, 120, what=fluentd.log())
        serve.kill()
        killed_at = rows(url)
        assert killed_at < count, "the kill came after the end of the run"
        time.sleep(2)  # fluentd's sends fail meanwhile; its buffer holds them
        serve = start_serve(tmp_path, SCHEMAS, store=url, forward=f"127.0.0.1:{port}")
        wait_rows(url, count, 180, what=f"\n{fluentd.log()}\n{serve.log()}")
        time.sleep(6)  # past ack_response_timeout: a resend of a committed chunk would show now
        assert serve.stop() == 0, serve.log()
    finally:
        fluentd.stop()
        serve.kill()
    check_stream(url, count)


@pytest.mark.slow
def test_mariadb_stopped_for_30_seconds_mid_run(tmp_path, private_server):
    count, before_outage = 50_000, 10_000
    source = tmp_path / "events.jsonl"
    write_lines(source, before_outage)
    url = private_server.url("fluentd")
    port = free_port()
    fluentd = None
    with start_serve(tmp_path, SCHEMAS, store=url, forward=f"127.0.0.1:{port}") as serve:
        try:
            fluentd = start_fluentd(fluentd_config(source, port), tmp_path)
            wait_rows(url, 5_000, 120, what=fluentd.log())
            private_server.stop(timeout=60)
            # The log grows while the database is away: those lines reach windvane during the outage
            # whatever the speed of the first part.
            write_lines(source, count, start=before_outage)
            time.sleep(30)  # windvane's commits fail, nothing is acknowledged, fluentd buffers and retries
            private_server.start(timeout=120)
            wait_rows(url, count, 240, what=f"\n{fluentd.log()}\n{serve.log()}")
            time.sleep(6)  # past ack_response_timeout
            assert "commit failed" in serve.log()
            assert serve.stop() == 0, serve.log()
        finally:
            if fluentd is not None:
                fluentd.stop()
    check_stream(url, count)


@pytest.mark.slow
def test_object_store_stopped_for_10_seconds_mid_run(tmp_path, s3_env):
    # Real fluentd into a store whose every value goes to the object store (blob_threshold=1): while the S3
    # server is down no commit can finish, so nothing is acknowledged and fluentd buffers and retries;
    # once it is back every line is stored exactly once.
    count = 50_000
    source = tmp_path / "events.jsonl"
    write_lines(source, count)
    bucket = s3_env.new_bucket()
    url = f"sqlite:///{tmp_path / 'store.db'}?blobs=s3://{bucket}/store&endpoint={s3_env.endpoint}&blob_threshold=1"
    port = free_port()
    fluentd = None
    with start_serve(tmp_path, SCHEMAS, store=url, forward=f"127.0.0.1:{port}") as serve:
        try:
            fluentd = start_fluentd(fluentd_config(source, port), tmp_path)
            wait_rows(url, 5_000, 120, what=fluentd.log())
            assert rows(url) < count, "the outage came after the end of the run"
            s3_env.stop()
            try:
                time.sleep(10)  # windvane's uploads fail and are retried; fluentd buffers and retries
            finally:
                s3_env.start()
            wait_rows(url, count, 240, what=f"\n{fluentd.log()}\n{serve.log()}")
            time.sleep(6)  # past ack_response_timeout: a resend of a committed chunk would show now
            assert serve.stop() == 0, serve.log()
        finally:
            if fluentd is not None:
                fluentd.stop()
    assert s3_env.objects(bucket), "the run's values went to the object store"
    check_stream(url, count)
