"""``windvane serve`` over HTTP and Forward: one bad NDJSON line and one bad time cost their own record only.

Real server, real requests, then the store read back: what was accepted,
what was quarantined, verbatim and with which reason.
"""

from __future__ import annotations

import msgpack
import pytest

from tests.cli.test_serve import column, forward_send, post, schemas
from tests.forward_sender import chunk_id
from tests.serve_process import Serve

_ = schemas


@pytest.fixture
def server(sqlite_url, schemas, tmp_path):
    s = Serve(sqlite_url, schemas, tmp_path / "serve.log")
    yield s
    if s.process.poll() is None:
        assert s.stop() == 0, s.log()


def test_bad_ndjson_lines_are_quarantined_with_their_line_numbers_and_the_rest_stored(server, sqlite_url):
    lines = [
        b'{"seq": 1, "message": "one"}',
        b'{"seq": 2, "message": ',
        b'{"seq": 3}',
        b"",
        b"not json at all",
        b'{"seq": 6}',
    ]
    status, _, reply = post(server.http_port, "/app/lines", b"\n".join(lines) + b"\n")
    assert status == 200, reply
    assert reply == {
        "accepted": 3,
        "quarantined": 2,
        "reasons": [
            "line 2 of the NDJSON body is not valid JSON: column 23: Expecting value",
            "line 5 of the NDJSON body is not valid JSON: column 1: Expecting value",
        ],
    }
    assert column(sqlite_url, "app.lines", "seq") == [1, 3, 6]
    assert column(sqlite_url, "app.lines", "raw", quarantine=True) == [lines[1], lines[4]]
    assert column(sqlite_url, "app.lines", "reason", quarantine=True) == reply["reasons"]
    assert column(sqlite_url, "app.lines", "source", quarantine=True) == ["http", "http"]


def test_a_body_that_is_not_json_at_all_is_a_400_naming_the_problem(server, sqlite_url):
    status, _, reply = post(server.http_port, "/app/lines", b"GET / HTTP/1.0\nhello\n")
    assert status == 400
    assert reply == {
        "error": "bad_json",
        "message": "the NDJSON body has no valid JSON line: line 1 of the "
        "NDJSON body is not valid JSON: column 1: Expecting value",
    }
    status, _, reply = post(server.http_port, "/app/lines", b'{"seq": 1', {"Content-Type": "application/json"})
    assert status == 400 and reply["error"] == "bad_json" and "line 1, column 10" in reply["message"]


def test_iso_8601_time_over_http_is_the_event_time_and_a_bad_time_is_quarantined(server, sqlite_url):
    lines = [
        b'{"seq": 1, "time": "2024-05-01T12:00:00.5Z"}',
        b'{"seq": 2, "time": "2024-05-01 14:00:00+02:00"}',
        b'{"seq": 3, "time": 1714564800}',
        b'{"seq": 4, "time": 1714564800250}',
        b'{"seq": 5, "time": "the day before yesterday"}',
    ]
    status, _, reply = post(server.http_port, "/app/times", b"\n".join(lines) + b"\n")
    assert status == 200, reply
    assert reply["accepted"] == 4 and reply["quarantined"] == 1
    noon = 1714564800 * 10**9
    assert column(sqlite_url, "app.times", "time") == [noon + 500_000_000, noon, noon, noon + 250_000_000]
    assert column(sqlite_url, "app.times", "seq") == [1, 2, 3, 4]
    assert column(sqlite_url, "app.times", "raw", quarantine=True) == [lines[4]]
    reason = (
        "the event time 'the day before yesterday' is not a time: give epoch seconds, ms, us or ns, "
        "ISO 8601 text (2024-05-01T12:00:00Z) or a fluentd EventTime"
    )
    assert reply["reasons"] == [reason]
    assert column(sqlite_url, "app.times", "reason", quarantine=True) == [reason]


def test_forward_reads_times_by_the_same_rule_and_names_a_bad_one(server, sqlite_url):
    """A Forward message (Forward mode) whose times are ISO 8601 text, epoch ms and a word."""
    cid = chunk_id().decode()
    entries = [["2024-05-01T12:00:00Z", {"seq": 1}], [1714564800250, {"seq": 2}], ["soon", {"seq": 3}]]
    message = msgpack.packb(["app.fwd", entries, {"chunk": cid}])
    assert forward_send(server.forward_port, message, expect_ack=True) == cid.encode()
    noon = 1714564800 * 10**9
    assert column(sqlite_url, "app.fwd", "time") == [noon, noon + 250_000_000]
    assert column(sqlite_url, "app.fwd", "seq") == [1, 2]
    assert column(sqlite_url, "app.fwd", "reason", quarantine=True) == [
        "the event time 'soon' is not a time: give epoch seconds, ms, us or ns, ISO 8601 text "
        "(2024-05-01T12:00:00Z) or a fluentd EventTime"
    ]
    assert column(sqlite_url, "app.fwd", "raw", quarantine=True) == [msgpack.packb(entries[2])]  # the entry as sent
