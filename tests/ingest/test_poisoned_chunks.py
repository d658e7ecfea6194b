"""A record's content never stalls its sender: defective records go to quarantine, the chunk is acknowledged.

Each test runs a real ``windvane serve`` (decode workers on, as by default)
on a real SQLite store. Chunks are written as fluentd writes them (keys and
text as msgpack bin; out_forward's str32 entries and ``chunk`` option), with
records of every kind of defect among good ones; the last test has real
fluentd send them from a file it tails. Every test checks that the chunk was
acknowledged, the good rows stored, and each bad record quarantined verbatim
with a reason that names its defect.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time
import urllib.request

import msgpack
import pytest

from tests.fluent_programs import start_fluentd
from tests.serve_process import Serve, event_schema, free_port, start_serve
from windvane import arrays, neostore
from windvane.ingest.prepare import INVALID_TAG

pytestmark = pytest.mark.timeout(240)


LONG_TAG = "app." + "t" * 740  # over the 255-byte limit of a stream name
SCHEMA = event_schema("app.**", LONG_TAG, extra="keep")


def _bin(b: bytes) -> bytes:
    return msgpack.packb(b, use_bin_type=True)


def _map(pairs: list[tuple[bytes, bytes]]) -> bytes:
    """A msgpack map of already-packed keys and values (so invalid UTF-8 can be written as str)."""
    assert len(pairs) < 16
    return bytes([0x80 | len(pairs)]) + b"".join(k + v for k, v in pairs)


def _entry(seconds: int, record: bytes) -> bytes:
    return b"\x92\xd7\x00" + struct.pack(">II", seconds, 0) + record


def _good(seq: int) -> bytes:
    return _map(
        [
            (_bin(b"seq"), msgpack.packb(seq)),
            (_bin(b"msg"), _bin(f"good {seq} é✓".encode())),
            (_bin(b"value"), msgpack.packb(seq / 4)),
        ]
    )


def _nested(depth: int) -> bytes:
    inner = msgpack.packb(1)
    for _ in range(depth):
        inner = b"\x81" + _bin(b"n") + inner
    return inner


#: (what, record bytes, a word the quarantine reason must hold); seq 1000 + i
DEFECTS = [
    (
        "str that is not UTF-8",
        _map([(_bin(b"seq"), msgpack.packb(1000)), (_bin(b"msg"), b"\xa4ab\xff\xfe")]),
        "not valid UTF-8",
    ),
    (
        "bin that is not UTF-8",
        _map([(_bin(b"seq"), msgpack.packb(1001)), (_bin(b"msg"), _bin(b"\xc3\x28"))]),
        "not valid UTF-8",
    ),
    (
        "field name that is not UTF-8",
        _map([(_bin(b"seq"), msgpack.packb(1002)), (_bin(b"\xff"), _bin(b"x"))]),
        "field name",
    ),
    ("wrong type", _map([(_bin(b"seq"), _bin(b"one thousand and three"))]), "expected int64"),
    ("missing field", _map([(_bin(b"msg"), _bin(b"no seq"))]), "required field 'seq'"),
    (
        "nested 1000 maps deep",
        _map([(_bin(b"seq"), msgpack.packb(1005)), (_bin(b"deep"), _nested(1000))]),
        "nested too deeply",
    ),
    (
        "undeclared text not UTF-8",
        _map([(_bin(b"seq"), msgpack.packb(1006)), (b"\xa1k", b"\xa2\xed\xa0")]),
        "not valid UTF-8",
    ),
    ("not a map", msgpack.packb([1, 2, 3]), "must be a map"),
]
HUGE = "h" * (4 << 20)  # a 4 MiB string: stored, it is a valid value


def _chunk(tag: str, entries: list[bytes], chunk_id: bytes) -> bytes:
    body = b"".join(entries)
    option = {"size": len(entries), "compressed": "text", "chunk": base64.encodebytes(chunk_id).decode()}
    return b"\x93" + msgpack.packb(tag) + b"\xdb" + struct.pack(">I", len(body)) + body + msgpack.packb(option)


def _send_and_wait_acks(port: int, chunks: list[bytes], timeout: float = 60) -> list[dict]:
    acks = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        for chunk in chunks:
            sock.sendall(chunk)
        unpacker = msgpack.Unpacker(raw=False)
        deadline = time.monotonic() + timeout
        while len(acks) < len(chunks) and time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break
            unpacker.feed(data)
            acks.extend(unpacker)
    return acks


@pytest.fixture
def serve(tmp_path):
    with start_serve(tmp_path, {"app.toml": SCHEMA}, forward=f"127.0.0.1:{free_port()}") as server:
        yield server


def _read(url: str, tag: str, quarantine: bool = False) -> dict:
    store = neostore.open(url, read_only=True)
    try:
        with arrays.open_stream(store, tag, quarantine=quarantine) as s:
            return {"time": s["time"][:], **{name: list(s[name][:]) for name in s.columns}}
    finally:
        store.close()


def _metrics(server: Serve) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics", timeout=10) as r:
        return r.read().decode()


def test_a_chunk_of_good_and_defective_records_is_acknowledged(serve):
    entries, expect_good = [], []
    for i in range(5):
        entries.append(_entry(1_700_000_000 + i, _good(i)))
        expect_good.append(i)
    for i, (_, record, _) in enumerate(DEFECTS):
        entries.append(_entry(1_700_000_100 + i, record))
    entries.append(_entry(1_700_000_200, _map([(_bin(b"seq"), msgpack.packb(7)), (_bin(b"msg"), _bin(HUGE.encode()))])))
    expect_good.append(7)
    acks = _send_and_wait_acks(serve.forward_port, [_chunk("app.poison", entries, b"P" * 16)])
    assert acks == [{"ack": base64.encodebytes(b"P" * 16).decode()}], serve.log()

    rows = _read(serve.url, "app.poison")
    assert list(rows["seq"]) == expect_good
    assert rows["msg"][:5] == [f"good {i} é✓" for i in range(5)]
    assert rows["msg"][5] == HUGE
    q = _read(serve.url, "app.poison", quarantine=True)
    assert len(q["reason"]) == len(DEFECTS)
    for (what, record, word), reason, raw, t in zip(DEFECTS, q["reason"], q["raw"], q["time"]):
        assert word in reason, (what, reason)
        assert raw == _entry(int(t) // 10**9, record), what  # verbatim, as it arrived
    assert "windvane_internal_errors_total 0" in _metrics(serve)


def test_unnameable_tags_and_poisoned_chunks_do_not_stall_a_normal_sender(serve):
    # A hostile sender keeps sending chunks that once made every commit fail; a normal sender on
    # another connection is acknowledged throughout, and every hostile chunk is acknowledged too.
    hostile = [_chunk(LONG_TAG, [_entry(1_700_000_000, _good(i))], b"L%015d" % i) for i in range(20)]
    hostile += [
        _chunk("app.bad", [_entry(1_700_000_000, DEFECTS[j % len(DEFECTS)][1])], b"B%015d" % j) for j in range(40)
    ]
    normal = [_chunk("app.normal", [_entry(1_700_000_000 + n, _good(n))], b"N%015d" % n) for n in range(50)]
    result: dict[str, list] = {}

    def run(name: str, chunks: list[bytes]) -> None:
        result[name] = _send_and_wait_acks(serve.forward_port, chunks)

    threads = [threading.Thread(target=run, args=(n, c)) for n, c in (("hostile", hostile), ("normal", normal))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(result["hostile"]) == len(hostile), serve.log()
    assert len(result["normal"]) == len(normal), serve.log()
    assert list(_read(serve.url, "app.normal")["seq"]) == list(range(50))
    invalid = _read(serve.url, INVALID_TAG, quarantine=True)
    assert len(invalid["reason"]) == 20 and "255" in invalid["reason"][0]
    assert len(_read(serve.url, "app.bad", quarantine=True)["reason"]) == 40


def test_http_records_that_once_failed_the_commit_are_quarantined_not_500(serve):
    # Nested deeper than Python's JSON parser recurses is a 400 naming it; 200 levels parse and are kept.
    deep = '{"seq": 3, "deep": ' + '{"n": ' * 200 + "1" + "}" * 200 + "}"
    body = ('[{"seq": 1, "msg": "fine"}, {"seq": 2, "msg": "\\udc80 lone surrogate"}, ' + deep + "]").encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{serve.http_port}/app.http", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            status, reply = r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        status, reply = exc.code, json.loads(exc.read())
    assert status == 200, reply
    assert (reply["accepted"], reply["quarantined"]) == (2, 1), reply
    rows = _read(serve.url, "app.http")
    assert list(rows["seq"]) == [1, 3]
    assert json.loads(rows["extra"][1])["deep"]["n"]["n"]["n"] is not None
    reasons = _read(serve.url, "app.http", quarantine=True)["reason"]
    assert len(reasons) == 1 and "not valid UTF-8" in reasons[0]


RAW_SCHEMA = """\
kind = "log"
tags = ["raw.**"]

[[fields]]
name = "message"
dtype = "str"
required = true
"""


def _defect_lines() -> tuple[list[bytes], list[int], int]:
    """JSON lines for fluentd to tail: good ones, and one of each defect it can carry; (lines, good seqs, bad)."""
    good = [
        json.dumps({"seq": i, "msg": f"line {i} Grüße 温度 ✓", "value": i * 0.25}, ensure_ascii=False).encode()
        for i in range(20)
    ]
    deep = b'{"seq": 105, "deep": ' + b'{"n": ' * 900 + b"1" + b"}" * 900 + b"}"
    bad = [
        b'{"seq": "one hundred and one", "msg": "wrong type"}',
        b'{"msg": "no seq at all"}',
        b'{"seq": 103, "value": "not a number"}',
        deep,
    ]
    # fluentd's own JSON parser drops lines that are not UTF-8 ("pattern not matched"): they never reach us.
    dropped = [b'{"seq": 100, "msg": "latin-1 bytes: caf\xe9"}', b'{"seq": 104, "x": "\xff\xfe not UTF-8"}']
    huge = json.dumps({"seq": 50, "msg": "x" * (1 << 20)}).encode()
    lines = good[:10] + bad[:2] + dropped + [huge] + good[10:] + bad[2:]
    return lines, [*range(10), 50, *range(10, 20)], len(bad)


#: Raw lines (fluentd's ``none`` parser sends each as ``message``, bin): UTF-8 ones and Latin-1 ones.
RAW_LINES = [f"plain line {i} ✓".encode() for i in range(5)] + [
    b"caf\xe9 latin-1 " + bytes([0xE0 + i]) for i in range(3)
]


@pytest.mark.clients
def test_real_fluentd_chunk_with_defective_records_is_acknowledged(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    lines, good, bad_count = _defect_lines()
    source, raw_source = tmp_path / "events.jsonl", tmp_path / "raw.log"
    port = free_port()
    config = f"""
<source>
  @type tail
  path {source}
  pos_file {tmp_path / "events.pos"}
  read_from_head true
  tag app.fluentd
  <parse>
    @type json
  </parse>
</source>
<source>
  @type tail
  path {raw_source}
  pos_file {tmp_path / "raw.pos"}
  read_from_head true
  tag raw.fluentd
  <parse>
    @type none
  </parse>
</source>
<match **>
  @type forward
  require_ack_response true
  ack_response_timeout 3
  <buffer>
    flush_interval 1s
    retry_wait 1s
    retry_max_interval 2s
  </buffer>
  <server>
    host 127.0.0.1
    port {port}
  </server>
</match>
"""
    expected = {
        ("app.fluentd", False): len(good),
        ("app.fluentd", True): bad_count,
        ("raw.fluentd", False): 5,
        ("raw.fluentd", True): 3,
    }
    schemas = {"app.toml": SCHEMA, "raw.toml": RAW_SCHEMA}
    with start_serve(tmp_path, schemas, store=url, forward=f"127.0.0.1:{port}") as serve:
        # in_tail reads each whole file at start (read_from_head): one buffer chunk per tag.
        source.write_bytes(b"\n".join(lines) + b"\n")
        raw_source.write_bytes(b"\n".join(RAW_LINES) + b"\n")
        fluentd = start_fluentd(config, tmp_path)
        try:
            deadline = time.monotonic() + 90
            counts: dict = {}
            while time.monotonic() < deadline and counts != expected:
                time.sleep(0.5)
                for tag, quarantine in expected:
                    try:
                        counts[tag, quarantine] = len(_read(url, tag, quarantine)["time"])
                    except Exception:  # noqa: BLE001 - a stream appears with its first commit
                        pass
            time.sleep(5)  # past ack_response_timeout: an unacknowledged chunk would be resent by now
            log = fluentd.log(200_000)
        finally:
            fluentd.stop()
        rows = _read(url, "app.fluentd")
        q = _read(url, "app.fluentd", quarantine=True)
        assert list(rows["seq"]) == good, (serve.log(), log)
        assert rows["msg"][0] == "line 0 Grüße 温度 ✓" and rows["msg"][10] == "x" * (1 << 20)
        assert len(q["reason"]) == bad_count, q["reason"]
        reasons = " | ".join(q["reason"])
        for word in ("expected int64", "required field 'seq'", "expected float64", "nested too deeply"):
            assert word in reasons, reasons
        assert log.count("pattern not matched") == 2, log[-3000:]
        raw = _read(url, "raw.fluentd")
        assert raw["message"] == [line.decode() for line in RAW_LINES[:5]]
        raw_q = _read(url, "raw.fluentd", quarantine=True)
        assert all("not valid UTF-8" in r for r in raw_q["reason"]), raw_q["reason"]
        # Verbatim: the entry as fluentd packed it, the line's bytes as bin.
        assert [msgpack.unpackb(r, raw=True)[1] for r in raw_q["raw"]] == [{b"message": line} for line in RAW_LINES[5:]]
        assert "no response from node" not in log and "failed to flush" not in log, log[-3000:]
        assert "windvane_internal_errors_total 0" in _metrics(serve)
