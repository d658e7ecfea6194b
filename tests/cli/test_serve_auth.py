"""``windvane serve``'s authentication, listener by listener: what protects each, said at start.

Real processes: ``--users`` alone, ``--shared-key`` alone, both; start-up
refusals are exit code 2 with the reason, never a traceback.
"""

from __future__ import annotations

import base64

import pytest

from tests.cli.test_serve import column, post, schemas, serve, windvane  # noqa: F401 - schemas, serve: fixtures

#: What the start-up lines say each listener takes: Forward opens UDP too, and either is closed with "off".
FORWARD = "(TCP, and UDP for heartbeats; --forward off closes it)"
HTTP = "(TCP: posts, /health, /metrics, /streams, the console at /; --http off closes it)"
USERS = '[users.sender]\npassword = "right password"\ntokens = ["a-long-token"]\n'


@pytest.fixture
def users(tmp_path):
    path = tmp_path / "users.toml"
    path.write_text(USERS)
    return str(path)


def test_users_alone_with_forward_on_is_refused_with_the_reason_not_a_traceback(tmp_path, schemas, users):
    result = windvane(
        "serve",
        "--store",
        f"sqlite:///{tmp_path}/s.db",
        "--schemas",
        str(schemas),
        "--users",
        users,
        "--forward",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert (
        "--users without --shared-key: the Forward protocol checks users only inside its shared-key handshake "
        "(as fluentd's in_forward), so Forward would be open to anyone while HTTP asks for credentials; give "
        "--shared-key too, or --forward off to serve HTTP alone"
    ) in result.stderr


def test_users_alone_protect_http(serve, store_url, users):
    s = serve("--users", users, "--forward", "off")
    assert s.lines == [f"http: 127.0.0.1:{s.http_port} {HTTP}  auth: users (Basic or Bearer)", "ready"]
    status, headers, reply = post(s.http_port, "/app/auth", b'{"seq": 1}\n')
    assert status == 401 and reply["error"] == "unauthorized" and "WWW-Authenticate" in headers
    right = base64.b64encode(b"sender:right password").decode()
    assert post(s.http_port, "/app/auth", b'{"seq": 2}\n', {"Authorization": f"Basic {right}"})[:3:2] == (
        200,
        {"accepted": 1, "quarantined": 0},
    )
    assert post(s.http_port, "/app/auth", b'{"seq": 3}\n', {"Authorization": "Bearer a-long-token"})[0] == 200
    assert column(store_url, "app.auth", "seq") == [2, 3]


def test_shared_key_alone_with_http_on_is_refused(tmp_path, schemas):
    result = windvane(
        "serve",
        "--store",
        f"sqlite:///{tmp_path}/s.db",
        "--schemas",
        str(schemas),
        "--shared-key",
        "the key",
        "--forward",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
    )
    assert result.returncode == 2, result.stderr
    assert (
        "--shared-key protects Forward only: HTTP would be open to anyone who can connect to 127.0.0.1:0; give "
        "--users FILE for HTTP Basic/Bearer credentials, --http off, or --http-auth none to serve HTTP "
        "unauthenticated on purpose"
    ) in result.stderr
    result = windvane(
        "serve",
        "--store",
        f"sqlite:///{tmp_path}/s.db",
        "--schemas",
        str(schemas),
        "--http-auth",
        "users",
        "--forward",
        "off",
        "--http",
        "127.0.0.1:0",
    )
    assert result.returncode == 2 and "--http-auth users needs --users FILE" in result.stderr


def test_each_listener_says_what_protects_it(serve, users):
    s = serve("--shared-key", "the key", "--http-auth", "none")
    assert s.lines == [
        f"forward: 127.0.0.1:{s.forward_port} {FORWARD}  auth: shared key (handshake)",
        f"http: 127.0.0.1:{s.http_port} {HTTP}  auth: none: open to anyone who can connect",
        "ready",
    ]
    assert post(s.http_port, "/app/open", b'{"seq": 1}\n')[0] == 200  # open, as asked
    s = serve("--shared-key", "the key", "--users", users)
    assert s.lines == [
        f"forward: 127.0.0.1:{s.forward_port} {FORWARD}  auth: shared key and user passwords (handshake)",
        f"http: 127.0.0.1:{s.http_port} {HTTP}  auth: users (Basic or Bearer)",
        "ready",
    ]
    assert post(s.http_port, "/app/closed", b'{"seq": 1}\n')[0] == 401
    s = serve()
    assert s.lines == [
        f"forward: 127.0.0.1:{s.forward_port} {FORWARD}  auth: none: open to anyone who can connect",
        f"http: 127.0.0.1:{s.http_port} {HTTP}  auth: none: open to anyone who can connect",
        "ready",
    ]
