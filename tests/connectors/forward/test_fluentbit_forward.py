"""Real Fluent Bit 5.1.1 delivers into ``windvane serve`` over the Forward protocol.

Fluent Bit tails the same JSON-lines file as the fluentd tests (text in
many scripts, a nanosecond time in the ``t`` field that its parser reads,
1 ns off now and then through a double)
and sends with ``out_forward`` and ``Require_ack_response``: plain, gzip,
shared key, TLS with the certificate checked. It sends Forward mode with
its 5.x events ``[[EventTime, metadata], record]``. Each test reads the
stream back and compares every value and every time with the file. The
last kills ``windvane serve`` with SIGKILL in the middle of a 200,000-line
run: Fluent Bit's retries resend, and every line is stored exactly once.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.connectors.forward.test_client_libraries import Cert, tls_cert  # noqa: F401 - a fixture
from tests.connectors.forward.test_fluentd_forward import (
    SCHEMAS,
    SHARED_KEY,
    check_stream,
    deliver,
    rows,
    wait_rows,
    write_lines,
)
from tests.fluent_programs import start_fluent_bit
from tests.serve_process import free_port, start_serve

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

TAG = "fb.events"
# Fluent Bit's parser reads %L through a double: it sends ...033000099 as ...033000098 (seen in its frames).
FLUENT_BIT_PARSE_NS = 1
PARSERS = """\
[PARSER]
    Name json_t
    Format json
    Time_Key t
    Time_Format %Y-%m-%dT%H:%M:%S.%L%z
"""


def fluent_bit_config(
    workdir: Path, source: Path, port: int, output: str = "", host: str = "127.0.0.1", service: str = ""
) -> str:
    parsers = workdir / "parsers.conf"
    parsers.write_text(PARSERS)
    # Retries without limit and at most 2 s apart: a commit that never got acknowledged is resent soon.
    return f"""
[SERVICE]
    Flush 1
    Log_Level info
    Parsers_File {parsers}
    scheduler.base 1
    scheduler.cap 2
    {service}

[INPUT]
    Name tail
    Path {source}
    Read_from_Head true
    Parser json_t
    Tag {TAG}
    Buffer_Max_Size 64k

[OUTPUT]
    Name forward
    Match fb.*
    Host {host}
    Port {port}
    Require_ack_response true
    Retry_Limit no_limits
    {output}
"""


def run(tmp_path: Path, count: int, *, output: str = "", host: str = "127.0.0.1", serve_args: tuple = ()) -> str:
    """Tail ``count`` lines through real Fluent Bit into a fresh ``windvane serve``; Fluent Bit's log."""
    return deliver(
        tmp_path,
        count,
        lambda source, port: start_fluent_bit(fluent_bit_config(tmp_path, source, port, output, host), tmp_path),
        tag=TAG,
        serve_args=serve_args,
        time_slack_ns=FLUENT_BIT_PARSE_NS,
    )


def test_plain(tmp_path):
    run(tmp_path, 3000)


def test_gzip(tmp_path):
    run(tmp_path, 3000, output="Compress gzip")


def test_shared_key(tmp_path):
    run(
        tmp_path,
        3000,
        output=f"Shared_Key {SHARED_KEY}\n    Self_Hostname fluent-bit-test",
        serve_args=("--shared-key", SHARED_KEY),
    )


def test_shared_key_with_users(tmp_path):
    users = tmp_path / "users.toml"
    users.write_text('[users.alice]\npassword = "s3cret-pässword"\n')
    run(
        tmp_path,
        3000,
        output=f"Shared_Key {SHARED_KEY}\n    Self_Hostname fluent-bit-test\n"
        "    Username alice\n    Password s3cret-pässword",
        serve_args=("--shared-key", SHARED_KEY, "--users", str(users)),
    )


def test_tls(tmp_path, tls_cert: Cert):
    # Fluent Bit checks the chain against the certificate as its CA, and the name it connected to.
    output = f"tls on\n    tls.verify on\n    tls.ca_file {tls_cert.cert}\n    tls.vhost localhost"
    run(
        tmp_path,
        3000,
        output=output,
        host="localhost",
        serve_args=("--tls-cert", str(tls_cert.cert), "--tls-key", str(tls_cert.key)),
    )


@pytest.mark.crash
@pytest.mark.slow
def test_kill_9_of_windvane_mid_run(tmp_path):
    count = 200_000
    source = tmp_path / "events.jsonl"
    write_lines(source, count)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    port = free_port()
    serve = start_serve(tmp_path, SCHEMAS, store=url, forward=f"127.0.0.1:{port}")
    fluent_bit = start_fluent_bit(fluent_bit_config(tmp_path, source, port), tmp_path)
    try:
        wait_rows(url, 20_000, 120, tag=TAG, what=fluent_bit.log())
        serve.kill()
        killed_at = rows(url, TAG)
        assert killed_at < count, "the kill came after the end of the run"
        time.sleep(2)  # Fluent Bit's flushes fail meanwhile; it keeps the chunks to retry
        serve = start_serve(tmp_path, SCHEMAS, store=url, forward=f"127.0.0.1:{port}")
        wait_rows(url, count, 180, tag=TAG, what=f"\n{fluent_bit.log()}\n{serve.log()}")
        time.sleep(5)  # a late resend of a committed chunk would show now
        assert serve.stop() == 0, serve.log()
    finally:
        fluent_bit.stop()
        serve.kill()
    check_stream(url, count, TAG, time_slack_ns=FLUENT_BIT_PARSE_NS)
