"""Decoding of the Forward protocol, against byte-for-byte messages of real senders.

tests/fixtures/forward/README.md says which program and command captured each
fixture (and, for the three no sender at hand writes, the source they follow).
"""

from __future__ import annotations

import gzip
import json
import struct
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zstandard

from windvane.connectors.forward import INVALID_TIME, ForwardDecoder, MalformedMessage, OversizeMessage, ack_bytes
from windvane.connectors.forward.decode import FrameReader, decode_message, decode_packed
from windvane.ingest.columns import batch_columns
from windvane.ingest.record_types import record_type
from windvane.ingest.schema import parse_schema
from windvane.ingest.times import not_a_time

FIXTURES = Path(__file__).parents[2] / "fixtures" / "forward"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


def decode_all(data: bytes, **limits) -> list:
    return list(ForwardDecoder(**limits).feed(data))


def one(data: bytes, **limits):
    (decoded,) = decode_all(data, **limits)
    return decoded


def packb(value) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def event_time(sec: int, nsec: int) -> msgpack.ExtType:
    return msgpack.ExtType(0, struct.pack(">II", sec, nsec))


def as_text(records: list) -> list:
    """Records with bin keys and values read as UTF-8 text, as ingest reads them."""

    def text(v):
        return v.decode() if isinstance(v, bytes) else v

    return [{text(k): text(v) for k, v in r.items()} for r in records]


@pytest.mark.parametrize(
    ("name", "mode"),
    [
        ("fluentd_packed_text.bin", "packed"),
        ("fluentd_packed_gzip.bin", "compressed"),
        ("fluentd_packed_zstd.bin", "compressed"),
    ],
)
def test_fluentd_out_forward_fixtures(name, mode):
    data = (FIXTURES / name).read_bytes()
    assert data[0] == 0x93 and b"\xdb" in data[:20]  # str32 entries, as out_forward writes them
    decoded = one(data)
    assert decoded.mode == mode
    assert decoded.batch.tag == "app.access"
    assert list(decoded.batch.times) == EXPECTED["times_ns"]
    # fluentd's worker packs what in_tail read as bin, field names included.
    assert all(type(k) is bytes for r in decoded.batch.records for k in r)
    assert as_text(decoded.batch.records) == EXPECTED["records"]
    chunk = EXPECTED["chunks"][name]
    assert decoded.chunk == chunk and chunk.endswith("\n")
    assert decoded.key == chunk.encode()
    # The ack echoes the chunk byte for byte, trailing newline included.
    assert msgpack.unpackb(ack_bytes(decoded.chunk)) == {"ack": chunk}
    assert ack_bytes(decoded.chunk) == b"\x81\xa3ack\xb9" + chunk.encode()


def test_fluentd_packed_raw_is_verbatim():
    data = (FIXTURES / "fluentd_packed_text.bin").read_bytes()
    batch = one(data).batch
    raws = [batch.raw(i) for i in range(len(batch))]
    assert b"".join(raws) in data
    assert as_text([msgpack.unpackb(raws[1], ext_hook=lambda c, d: (c, d))[1]]) == EXPECTED["records"][1:]


def test_fluentbit_forward_mode_with_metadata_time_form():
    decoded = one((FIXTURES / "fluentbit_forward.bin").read_bytes())
    assert decoded.mode == "forward"
    assert list(decoded.batch.times) == EXPECTED["times_ns"]
    assert decoded.batch.records == EXPECTED["records"]
    assert decoded.chunk == EXPECTED["chunks"]["fluentbit_forward.bin"]
    # raw(i) keeps the [[EventTime, {metadata}], record] entry, metadata included.
    raw = msgpack.unpackb(decoded.batch.raw(1), ext_hook=lambda c, d: (c, d))
    assert raw[0][1] == {} and raw[1] == EXPECTED["records"][1]


def test_fluentbit_compressed_packed_forward_gzip():
    decoded = one((FIXTURES / "fluentbit_compressed_gzip.bin").read_bytes())
    assert decoded.mode == "compressed"
    assert list(decoded.batch.times) == EXPECTED["times_ns"]
    assert decoded.batch.records == EXPECTED["records"]
    assert decoded.chunk == EXPECTED["chunks"]["fluentbit_compressed_gzip.bin"]


@pytest.mark.parametrize("name", ["fluentbit_message.bin", "fluentbit_message_metadata.bin"])
def test_fluentbit_message_mode_with_options(name):
    decoded = one((FIXTURES / name).read_bytes())
    assert decoded.mode == "message"
    assert decoded.batch.tag == "app.web-01"
    assert list(decoded.batch.times) == EXPECTED["times_ns"][:1]
    assert decoded.batch.records == EXPECTED["records"][:1]
    assert decoded.chunk == EXPECTED["chunks"][name] and len(decoded.chunk) == 24


def test_ext8_event_time():
    decoded = one((FIXTURES / "message_ext8_time.bin").read_bytes())
    assert list(decoded.batch.times) == EXPECTED["times_ns"][1:]


def test_fluent_logger_python_messages_back_to_back():
    decoded = decode_all((FIXTURES / "fluent_logger_python.bin").read_bytes())
    assert [d.batch.tag for d in decoded] == ["app.python", "app.python"]
    assert [d.batch.records[0] for d in decoded] == [{"a": 1}, {"a": 2}]
    assert [d.batch.times[0] for d in decoded] == [1767225600 * 10**9, 1767225601 * 10**9]
    assert all(d.chunk is None for d in decoded)


def test_packed_entries_as_bin_and_str():
    entries = packb([1700000000, {"a": 1}]) + packb([event_time(1700000001, 5), {"b": b"\xff\x00"}])
    as_bin = packb(["t", entries, {"chunk": "c1"}])
    as_str8 = b"\x93\xa1t\xd9" + bytes([len(entries)]) + entries + packb({"chunk": "c1"})
    for data in (as_bin, as_str8):
        batch = one(data).batch
        assert list(batch.times) == [1700000000 * 10**9, 1700000001 * 10**9 + 5]
        assert batch.records == [{"a": 1}, {"b": b"\xff\x00"}]


def test_multi_member_gzip():
    entries = [packb([1700000000 + i, {"i": i}]) for i in range(5)]
    payload = b"".join(gzip.compress(e) for e in entries)
    batch = one(packb(["t", payload, {"compressed": "gzip"}])).batch
    assert [r["i"] for r in batch.records] == list(range(5))


def test_zstd_multi_frame():
    entries = b"".join(packb([1700000000, {"i": i}]) for i in range(100))
    payload = zstandard.ZstdCompressor().compress(entries[:500]) + zstandard.ZstdCompressor().compress(entries[500:])
    batch = one(packb(["t", payload, {"compressed": "zstd"}])).batch
    assert [r["i"] for r in batch.records] == list(range(100))


def test_truncated_gzip_is_malformed():
    payload = gzip.compress(packb([1, {"a": 1}]) * 50)[:-10]
    with pytest.raises(MalformedMessage, match="truncated"):
        one(packb(["t", payload, {"compressed": "gzip", "chunk": "x"}]))


def test_truncated_zstd_is_malformed():
    payload = zstandard.ZstdCompressor().compress(packb([1, {"a": 1}]) * 50)[:-3]
    with pytest.raises(MalformedMessage, match="truncated"):
        one(packb(["t", payload, {"compressed": "zstd"}]))


def test_decompressed_size_limit():
    payload = gzip.compress(packb([1, {"a": "x" * 1000}]) * 2000)
    with pytest.raises(OversizeMessage) as info:
        one(packb(["big.tag", payload, {"compressed": "gzip"}]), decompressed_size_limit=100_000)
    assert info.value.tag == "big.tag" and info.value.limit == 100_000
    assert "big.tag" in str(info.value) and "100000" in str(info.value)


def test_unknown_compression_is_malformed():
    with pytest.raises(MalformedMessage, match="compressed"):
        one(packb(["t", b"", {"compressed": "lz4"}]))


def test_chunk_size_limit_complete_and_incomplete():
    msg = packb(["big.tag", [[1, {"a": "x" * 5000}]]])
    with pytest.raises(OversizeMessage) as info:
        decode_all(msg, chunk_size_limit=1000)
    assert info.value.tag == "big.tag"
    decoder = ForwardDecoder(chunk_size_limit=1000)
    with pytest.raises(OversizeMessage) as info:
        list(decoder.feed(msg[:2000]))  # incomplete already over the limit
    assert info.value.tag == "big.tag"


def bulk_message(tag: str, count: int, *, option=None, items: int = 3, as_bin: bool = False) -> bytes:
    """PackedForward of ``count`` events of 20 KiB each, entries framed str32 (as out_forward writes them) or
    bin32 (as Fluent Bit does): the bulk messages the framer gathers in pieces."""
    entries = b"".join(
        packb([event_time(1_700_000_000 + i, i), {"blob": bytes([i % 251]) * 20_000, "i": i}]) for i in range(count)
    )
    head = (b"\x93" if items == 3 else b"\x92") + packb(tag) + (b"\xc6" if as_bin else b"\xdb")
    message = head + struct.pack(">I", len(entries)) + entries
    return message + packb(option) if items == 3 else message


def events(decoded: list) -> list:
    return [(d.batch.tag, list(d.batch.times), d.batch.records, d.chunk) for d in decoded]


BULK_STREAM = b"".join(
    [
        packb(["small.first", [[1, {"a": 1}]]]),
        bulk_message("bulk.str", 8, option={"chunk": "c1", "size": 8}),
        bulk_message("bulk.bin", 5, option={"chunk": "c2"}, as_bin=True),
        b"\xc0",  # a heartbeat between two bulk messages
        bulk_message("bulk.two", 4, items=2),
        bulk_message("bulk.nil", 4, option=None),
        packb(["small.last", 5, {"b": 2}, {"chunk": "c3"}]),
    ]
)


def test_bulk_messages_cut_anywhere_decode_as_whole():
    whole = events(decode_all(BULK_STREAM))
    assert [w[0] for w in whole] == ["small.first", "bulk.str", "bulk.bin", "bulk.two", "bulk.nil", "small.last"]
    assert whole[1][3] == "c1" and whole[2][3] == "c2" and whole[5][3] == "c3"
    assert [r["i"] for r in whole[1][2]] == list(range(8)) and whole[2][2][4]["blob"] == bytes([4]) * 20_000
    for split in (1, 7, 4096, 65_536, 100_003, 262_144, len(BULK_STREAM)):
        decoder = ForwardDecoder()
        got = [d for i in range(0, len(BULK_STREAM), split) for d in decoder.feed(BULK_STREAM[i : i + split])]
        assert events(got) == whole, f"split every {split} bytes"


def receive(reader: FrameReader, stream: bytes, step: int) -> list:
    """``stream`` as a server reads it: into :meth:`FrameReader.room` while it offers one (at most ``step``
    bytes at a time), else fed in pieces of ``step`` bytes."""
    frames, at = [], 0
    while at < len(stream):
        room = reader.room()
        if room is None:
            frames += reader.feed(stream[at : at + step])
            at += step
            continue
        n = min(len(room), step, len(stream) - at)
        room[:n] = stream[at : at + n]
        at += n
        frames += reader.filled(n)
    return frames


def test_bulk_messages_received_in_place_are_the_messages_sent():
    big_option = {"chunk": "c9", "size": 4, "note": "x" * 10_000}  # past the room kept for an option
    stream = BULK_STREAM + bulk_message("bulk.long", 4, option=big_option)
    sent = events(decode_all(stream))
    for step in (1_000, 65_536, 262_144, 1 << 20):
        reader = FrameReader()
        frames = receive(reader, stream, step)
        assert [bytes(f) for f in frames] == [bytes(f) for f in FrameReader().feed(stream)]
        assert events([d for f in frames if (d := decode_message(f)) is not None]) == sent, f"{step} bytes a read"
        assert reader.buffered == 0 and reader.room() is None


def test_bulk_message_is_held_once_and_counted():
    message = bulk_message("bulk.str", 8, option={"chunk": "c1"})
    reader = FrameReader()
    assert list(reader.feed(message[:100_000])) == []
    assert reader.buffered == 100_000  # its pieces, not also msgpack's buffer and a mirror
    (frame,) = reader.feed(message[100_000:])
    assert frame == message and reader.buffered == 0


def test_bulk_message_over_the_limit_is_refused_from_its_header():
    message = bulk_message("bulk.big", 8, option={"chunk": "c1"})
    reader = FrameReader(chunk_size_limit=100_000)
    with pytest.raises(OversizeMessage) as info:
        list(reader.feed(message[:64]))  # the entries announce 160 kB before any of them arrives
    assert info.value.tag == "bulk.big" and info.value.size > 100_000


def test_bulk_message_with_a_bad_or_endless_option():
    entries = b"\x93" + bulk_message("bulk.bad", 4, items=2)[1:]  # three items: an option follows
    entries_end = len(entries)
    bad = entries + b"\xc1"
    with pytest.raises(MalformedMessage, match=f"byte {entries_end}"):
        list(FrameReader().feed(bad))
    endless = entries + b"\xdb" + struct.pack(">I", 1 << 20)  # a str of 1 MiB as the option
    reader = FrameReader(chunk_size_limit=entries_end + 50_000)
    with pytest.raises(OversizeMessage, match="incomplete message"):
        for i in range(0, 300_000, 8192):
            list(reader.feed(endless[i : i + 8192] if i < len(endless) else b"x" * 8192))


VIBRATION = parse_schema(
    {"kind": "vibration", "tags": ["vib.**"], "vibration": {"channels": 3, "sample_rate": 25600}}, name="vibration"
)


def vibration_message(count: int, option=None, *, compressed: bool = False, odd: int | None = None) -> bytes:
    """PackedForward of ``count`` blocks of 25,600 x 3 float32 samples (307 kB), as a vibration sender's
    chunk; block ``odd`` is a list of lists instead (the checked way takes that)."""
    entries = b"".join(
        packb(
            [
                event_time(1_700_000_000 + i, 0),
                {"samples": [[0.5, 1.5, 2.5]] if i == odd else struct.pack("<3f", i, -i, 0.25) * 25_600},
            ]
        )
        for i in range(count)
    )
    if compressed:
        entries = gzip.compress(entries)
    return b"\x93" + packb("vib.x") + b"\xdb" + struct.pack(">I", len(entries)) + entries + packb(option)


def read_bulk(message: bytes, piece: int = 65_536) -> bytearray:
    reader = FrameReader()
    frames = [f for i in range(0, len(message), piece) for f in reader.feed(message[i : i + piece])]
    assert len(frames) == 1 and frames[0] == message
    return frames[0]


@pytest.mark.parametrize("option", [{"size": 4, "chunk": "c1"}, {"size": 3}, {"size": "4"}, {}, None])
def test_bulk_vibration_blocks_are_decoded_where_they_arrived(option):
    """A bulk message's blocks decode as views of the frame they arrived in: no copy of them is made, the
    frame is left as it came, and they store as the plain decode stores them. The event count the
    sender announces saves counting them; a wrong or missing one changes nothing."""
    message = vibration_message(4, option)
    frame = read_bulk(message)
    decoded = decode_message(frame, record_types=lambda tag: record_type(VIBRATION))
    assert bytes(frame) == message
    batch = decoded.batch
    assert batch.typed and len(batch) == 4
    whole = np.frombuffer(frame, np.uint8)
    assert all(
        type(r.samples) is memoryview and np.shares_memory(np.frombuffer(r.samples, np.uint8), whole)
        for r in batch.records
    )
    plain = decode_message(message).batch
    assert not plain.typed and list(plain.times) == list(batch.times)
    (columns, rejected), (plain_columns, _) = batch_columns(VIBRATION, batch), batch_columns(VIBRATION, plain)
    assert not rejected and columns.rows == 4 * 25_600
    assert (columns.columns["samples"] == plain_columns.columns["samples"]).all()
    assert (columns.columns["time"] == plain_columns.columns["time"]).all()


def test_bulk_blocks_that_do_not_fit_or_arrive_compressed_decode_as_before():
    odd = vibration_message(4, {"size": 4}, odd=2)
    frame = read_bulk(odd)
    batch = decode_message(frame, record_types=lambda tag: record_type(VIBRATION)).batch
    assert not batch.typed and bytes(frame) == odd and batch.records[2]["samples"] == [[0.5, 1.5, 2.5]]
    zipped = vibration_message(4, {"size": 4, "compressed": "gzip"}, compressed=True)
    batch = decode_message(read_bulk(zipped), record_types=lambda tag: record_type(VIBRATION)).batch
    assert batch.typed and len(batch) == 4 and bytes(batch.records[3].samples[:12]) == struct.pack("<3f", 3, -3, 0.25)


def test_times_zero_nil_float_and_invalid():
    before = time.time_ns()
    entries = [
        [0, {}],
        [None, {}],
        [1.5, {}],
        ["yesterday", {}],
        [event_time(0, 0), {}],
        [2**63, {}],
        ["2024-05-01T12:00:00Z", {}],
        [1714564800250, {}],
    ]
    batch = one(packb(["t", entries])).batch
    t = list(batch.times)
    assert t[0] >= before and t[1] >= before and t[4] >= before
    assert t[2] == 1_500_000_000
    assert t[3] == INVALID_TIME and t[5] == INVALID_TIME
    assert t[6:] == [1714564800 * 10**9, 1714564800250 * 10**6]  # windvane's one time rule: ISO 8601, ms
    assert batch.faults == {3: not_a_time("yesterday"), 5: not_a_time(2**63)}


def test_invalid_records_reach_ingest():
    # Not maps, nil: ingest validates and quarantines them; the decoder keeps them.
    batch = one(packb(["t", [[1, "a string"], [2, None], [3, [1, 2]]]])).batch
    assert batch.records == ["a string", None, [1, 2]]


def test_message_mode_with_chunk_and_heartbeat():
    data = b"\xc0" + packb(["t", 1700000000, {"k": "v"}, {"chunk": "abc"}]) + b"\xc0"
    (decoded,) = decode_all(data)
    assert decoded.chunk == "abc" and decoded.batch.records == [{"k": "v"}]


def test_bin_chunk_is_echoed_as_bin():
    decoded = one(packb(["t", 1, {}, {"chunk": b"\x00\xff"}]))
    assert decoded.key == b"\x00\xff"
    assert ack_bytes(decoded.chunk) == b"\x81\xa3ack\xc4\x02\x00\xff"


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (packb({"not": "an array"}), "expected an array"),
        (packb([1, 2, 3]), "tag is int"),
        (packb(["t"]), "1 elements"),
        (packb(["t", 1, {}, {}, {}]), "5 elements"),
        (packb(["t", [1, 2]]), "Forward entry 0"),
        (packb(["t", packb([1, {}]) + b"\x92\x01"]), "truncated"),
        (packb(["t", packb([1, {}, 3])]), "PackedForward entry 0"),
        (packb(["t", 1, {}, "option"]), "option"),
        (packb(["t", 1, {}, {"chunk": 5}]), "chunk"),
        (b"\xc1", "unreadable msgpack"),
        (b"\x93\xa1t\xc4\x03\xff\xff\xff\xc1", "unreadable"),
        (b"\x92\xa2\xff\xfe\x90", "UTF-8"),
    ],
)
def test_malformed(data, what):
    with pytest.raises(MalformedMessage, match=what):
        decode_all(data)


def test_byte_by_byte_feeding_gives_the_same():
    data = b"".join(p.read_bytes() for p in sorted(FIXTURES.glob("*.bin")))
    whole = [(d.batch.tag, list(d.batch.times), d.batch.records, d.chunk) for d in decode_all(data)]
    decoder = ForwardDecoder()
    pieces = []
    for i in range(len(data)):
        pieces.extend(decoder.feed(data[i : i + 1]))
    assert [(d.batch.tag, list(d.batch.times), d.batch.records, d.chunk) for d in pieces] == whole


def test_json_stream():
    data = (
        b'["app.json", 1700000000, {"msg": "a \\"quoted\\" ] bracket"}, {"chunk": "j1"}]\n'
        b'["app.json", [[1700000001, {"n": 1}], [1700000002.25, {"n": 2}]]]'
    )
    decoder = ForwardDecoder()
    out = []
    for i in range(0, len(data), 7):
        out.extend(decoder.feed(data[i : i + 7]))
    assert decoder.json is True
    assert out[0].batch.records == [{"msg": 'a "quoted" ] bracket'}] and out[0].chunk == "j1"
    assert list(out[1].batch.times) == [1700000001 * 10**9, 1700000002_250_000_000]
    assert json.loads(ack_bytes("j1", json_mode=True)) == {"ack": "j1"}


def test_json_mode_times_are_exact_and_nan_is_not_json():
    message = decode_message(b'["t", [[1709294400.123456789, {"n": 1}]]]', json_mode=True)
    assert list(message.batch.times) == [1709294400_123456789]
    message = decode_message(b'["t", 1709294400.000000001, {"n": 1}]', json_mode=True)
    assert list(message.batch.times) == [1709294400_000000001]
    with pytest.raises(MalformedMessage, match=r"NaN is not a JSON number: .*: line 1 column 16"):
        decode_message(b'["t", 1, {"n": NaN}]', json_mode=True)


def test_an_event_time_whose_nanoseconds_reach_a_second_is_not_a_time():
    bad = msgpack.ExtType(0, struct.pack(">II", 1709294400, 10**9))
    message = decode_message(msgpack.packb(["t", bad, {"n": 1}]))
    assert list(message.batch.times) == [INVALID_TIME]
    assert message.batch.faults == {0: not_a_time(bad)}
    assert not_a_time(bad) == (
        "the event time is an EventTime of 1709294400 s and 1000000000 ns, which is not a time: "
        "its nanoseconds must be 0 to 999999999"
    )


def test_json_garbage_is_malformed():
    with pytest.raises(MalformedMessage):
        decode_all(b'["t", 1, {"a": }]')
    with pytest.raises(MalformedMessage):
        decode_all(b'["t", 1, {}] 42')


def test_decode_throughput_figure(capsys):
    """Prints decode-only events/s for a 1 MB PackedForward chunk of ~200-byte records (no assertion on speed)."""
    record = {"log": "x" * 140, "stream": "stdout", "host": "web-01", "level": "info"}
    entry = b"\x92" + packb(event_time(1700000000, 1)) + packb(record)
    payload = entry * ((1 << 20) // len(entry))
    message = b"\x93\xa7app.log\xdb" + struct.pack(">I", len(payload)) + payload + packb({"chunk": "x\n"})
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        (decoded,) = decode_all(message)
        best = min(best, time.perf_counter() - start)
    n = len(decoded.batch)
    assert n == len(payload) // len(entry) and decoded.batch.records[-1] == record
    with capsys.disabled():
        print(f"\nForward decode: {n} events of {len(entry)} bytes in 1 MiB: {n / best:,.0f} events/s")


def test_decode_packed_directly():
    batch = decode_packed("t", packb([1, {"a": 1}]))
    assert batch.source == "forward" and batch.raw(0) == packb([1, {"a": 1}])


def test_only_small_events_are_left_for_the_decode_workers():
    """Bulk binary events decode here (a copy); many small events go to ingest's workers undecoded."""
    from tests.forward_sender import chunk_id, packed_forward
    from windvane.connectors.forward.decode import DEFER_MAX_EVENT_BYTES, decode_message
    from windvane.ingest.batch import Batch, Undecoded

    small = packed_forward("logs", [(1, {"msg": "x" * 100})] * 50, chunk_id())
    big = packed_forward("vib", [(1, {"samples": b"\0" * (DEFER_MAX_EVENT_BYTES + 1)})] * 3, chunk_id())
    assert isinstance(decode_message(small, defer=True).batch, Undecoded)
    decoded = decode_message(big, defer=True).batch
    assert isinstance(decoded, Batch) and len(decoded) == 3
    assert isinstance(decode_message(small, defer=False).batch, Batch)
