"""Records to columns: what fits is stored exactly, what does not is rejected verbatim with the reason."""

from __future__ import annotations

import math

import msgpack
import numpy as np
import pyarrow as pa
import pytest

from windvane.arrays import VLenRows
from windvane.ingest import Batch
from windvane.ingest.columns import batch_columns, concat_columns
from windvane.ingest.schema import parse_schema

LOG = parse_schema(
    {
        "kind": "log",
        "tags": ["app.**"],
        "fields": [
            {"name": "seq", "dtype": "int64", "required": True},
            {"name": "msg", "dtype": "str"},
            {"name": "value", "dtype": "float32"},
            {"name": "code", "dtype": "int16", "fill": -1},
            {"name": "ok", "dtype": "bool", "fill": False},
            {"name": "blob", "dtype": "bytes"},
        ],
    },
    name="log",
)


def test_clean_batch_is_columns_in_order():
    records = [
        {"seq": i, "msg": f"m{i}", "value": i / 2, "code": i, "ok": i % 2 == 0, "blob": bytes([i])} for i in range(5)
    ]
    columns, rejected = batch_columns(LOG, Batch("app", [10, 11, 12, 13, 14], records))
    assert rejected == []
    c = columns.columns
    assert columns.rows == 5
    assert c["time"].tolist() == [10, 11, 12, 13, 14] and c["time"].dtype == np.int64
    assert c["seq"].tolist() == [0, 1, 2, 3, 4]
    assert c["msg"] == ["m0", "m1", "m2", "m3", "m4"]
    assert c["value"].dtype == np.float32 and c["value"].tolist() == [0, 0.5, 1, 1.5, 2]
    assert c["code"].dtype == np.int16 and c["ok"].tolist() == [True, False, True, False, True]
    assert c["blob"] == [b"\0", b"\1", b"\2", b"\3", b"\4"]
    assert c["extra"] == [""] * 5


def test_missing_optional_fields_get_their_fill():
    columns, rejected = batch_columns(LOG, Batch("app", [1], [{"seq": 1}]))
    assert rejected == []
    c = columns.columns
    assert c["msg"] == [""] and math.isnan(c["value"][0]) and c["code"].tolist() == [-1]
    assert c["ok"].tolist() == [False] and c["blob"] == [b""]


@pytest.mark.parametrize(
    "record, reason",
    [
        ({"msg": "no seq"}, "required field 'seq' is missing"),
        ({"seq": "7"}, "field 'seq': expected int64, got str '7'"),
        ({"seq": 1.5}, "field 'seq': expected int64, got float 1.5"),
        ({"seq": True}, "field 'seq': expected int64, got bool True"),
        ({"seq": 1, "value": "1.5"}, "field 'value': expected float32, got str '1.5'"),
        ({"seq": 1, "code": 70000}, "field 'code': 70000 does not fit in int16"),
        ({"seq": 1, "msg": 5}, "field 'msg': expected str, got int 5"),
        ({"seq": 1, "ok": 1}, "field 'ok': expected bool, got int 1"),
        (["not", "a", "map"], "a record must be a map of field names to values, not list"),
        ("text", "a record must be a map of field names to values, not str"),
    ],
)
def test_bad_records_are_rejected_with_the_reason_and_the_rest_kept(record, reason):
    good = [{"seq": 1, "msg": "a"}, {"seq": 3, "msg": "c"}]
    raws = [b"r0", b"r1", b"r2"]
    batch = Batch("app", [100, 200, 300], [good[0], record, good[1]], raw=raws.__getitem__, source="test")
    columns, rejected = batch_columns(LOG, batch)
    assert len(rejected) == 1
    r = rejected[0]
    assert reason in r.reason
    assert (r.time, r.raw, r.source) == (200, b"r1", "test")
    assert columns.rows == 2
    assert columns.columns["time"].tolist() == [100, 300]
    assert columns.columns["seq"].tolist() == [1, 3]
    assert columns.columns["msg"] == ["a", "c"]


def test_rejected_record_without_raw_bytes_is_kept_as_msgpack():
    _, rejected = batch_columns(LOG, Batch("app", [5], [{"seq": "x", "nested": {"a": [1, 2]}}]))
    assert msgpack.unpackb(rejected[0].raw) == [5, {"seq": "x", "nested": {"a": [1, 2]}}]


def test_extra_fields_policies():
    batch = Batch("app", [1, 2], [{"seq": 1, "host": "h1", "n": 2}, {"seq": 2}])
    keep, _ = batch_columns(LOG, batch)
    assert keep.columns["extra"] == ['{"host":"h1","n":2}', ""]
    drop = parse_schema(
        {
            "kind": "log",
            "tags": ["x"],
            "extra": "drop",
            "fields": [{"name": "seq", "dtype": "int64", "required": True}],
        },
        name="d",
    )
    columns, rejected = batch_columns(drop, batch)
    assert rejected == [] and set(columns.columns) == {"time", "seq"}
    strict = parse_schema(
        {
            "kind": "log",
            "tags": ["x"],
            "extra": "reject",
            "fields": [{"name": "seq", "dtype": "int64", "required": True}],
        },
        name="strict",
    )
    columns, rejected = batch_columns(strict, batch)
    assert columns.columns["seq"].tolist() == [2]
    assert "undeclared field(s) host, n (schema strict declares: seq)" in rejected[0].reason


def test_every_record_bad_gives_no_columns():
    columns, rejected = batch_columns(LOG, Batch("app", [1, 2], [{}, {"seq": None}]))
    assert columns is None and len(rejected) == 2


VIB = parse_schema(
    {"kind": "vibration", "tags": ["v"], "vibration": {"channels": 2, "dtype": "float32", "sample_rate": 1000}},
    name="vib",
)


def test_vibration_blocks_become_sample_rows_with_times():
    block = np.arange(8, dtype="<f4").reshape(4, 2)
    batch = Batch(
        "v",
        [1_000_000_000, 2_000_000_000],
        [
            {"samples": block.tobytes(), "sample_rate": 1000},
            {"samples": [[9.0, 10.0], [11.0, 12.0]]},
        ],
    )
    columns, rejected = batch_columns(VIB, batch)
    assert rejected == []
    assert columns.rows == 6
    np.testing.assert_array_equal(columns.columns["samples"][:4], block)
    np.testing.assert_array_equal(columns.columns["samples"][4:], [[9, 10], [11, 12]])
    assert columns.columns["time"].tolist() == [
        1_000_000_000,
        1_001_000_000,
        1_002_000_000,
        1_003_000_000,
        2_000_000_000,
        2_001_000_000,
    ]


@pytest.mark.parametrize(
    "record, reason",
    [
        ({"samples": b"\0" * 7}, "7 bytes is not a whole number of frames of 2 x float32"),
        ({"samples": [[1, 2, 3]]}, "shape (1, 3) is not (samples, 2)"),
        ({"samples": "abc"}, "expected float32 bytes or a list of lists"),
        ({"samples": b"\0" * 8, "sample_rate": 2000}, "differs from the schema's sample_rate 1000"),
        ({"samples": b"\0" * 8, "sample_rate": -1}, "expected a positive number"),
        ({"other": 1}, "has no 'samples' field"),
        ({"samples": b""}, "holds no samples"),
    ],
)
def test_bad_vibration_blocks_are_rejected(record, reason):
    good = {"samples": b"\0" * 8}
    columns, rejected = batch_columns(VIB, Batch("v", [1, 2], [good, record]))
    assert columns.rows == 1
    assert len(rejected) == 1 and reason in rejected[0].reason


@pytest.mark.parametrize("rate", [1e-215, 1e-10])
def test_a_rate_that_spaces_samples_beyond_nanoseconds_is_rejected(rate):
    """A rate so small that a block's samples would lie past the int64 nanoseconds of times rejects its record."""
    schema = parse_schema({"kind": "vibration", "tags": ["v"], "vibration": {"channels": 2}}, name="vib_rates")
    good = {"samples": b"\0" * 16, "sample_rate": 1000}
    columns, rejected = batch_columns(schema, Batch("v", [1, 2], [good, {"samples": b"\0" * 16, "sample_rate": rate}]))
    assert columns.rows == 2
    assert len(rejected) == 1
    assert "samples per second spaces the block's 2 samples beyond the time range" in rejected[0].reason


def test_events_with_unreadable_times_are_quarantined():
    from windvane.ingest import INVALID_TIME

    raws = [b"a", b"b", b"c"]
    batch = Batch("app", [5, INVALID_TIME, 7], [{"seq": 1}, {"seq": 2}, {"seq": 3}], raw=raws.__getitem__)
    columns, rejected = batch_columns(LOG, batch)
    assert columns.columns["seq"].tolist() == [1, 3] and columns.columns["time"].tolist() == [5, 7]
    assert [(r.raw, r.reason) for r in rejected] == [
        (b"b", "the event time is not an integer, a float or an EventTime within range")
    ]


# -- text as msgpack bin (fluentd's worker runs in ASCII-8BIT: in_tail's text arrives as bin) ----------


def _as_bin(value):
    """``value`` as a sender in ASCII-8BIT packs it: every str, map keys included, as bytes."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, dict):
        return {_as_bin(k): _as_bin(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_bin(v) for v in value]
    return value


BIN_RECORDS = [
    {"seq": 1, "msg": "Grüße 温度 ✓", "value": 0.5, "blob": b"\x00\xff"},
    {"seq": 2, "msg": "", "note": {"nested": ["a", {"k": "é"}]}},
    {"seq": 3, "ok": True, "code": 7},
]


@pytest.mark.parametrize("mixed", [False, True], ids=["all-bin", "bin-and-str-names"])
def test_bin_names_and_text_store_as_their_str_twins(mixed):
    records = [_as_bin(r) for r in BIN_RECORDS]
    if mixed:  # one record from a sender that packs str: the batch mixes both kinds of names
        records[2] = BIN_RECORDS[2]
    expected, _ = batch_columns(LOG, Batch("app", [1, 2, 3], BIN_RECORDS))
    got, rejected = batch_columns(LOG, Batch("app", [1, 2, 3], records))
    assert rejected == []
    for name, column in expected.columns.items():
        if isinstance(column, np.ndarray):
            np.testing.assert_array_equal(got.columns[name], column)
        else:
            assert got.columns[name] == column, name
    assert got.columns["extra"][1] == '{"note":{"nested":["a",{"k":"é"}]}}'


@pytest.mark.parametrize(
    "record, reason",
    [
        ({b"seq": 1, b"msg": b"caf\xe9"}, "field 'msg': bytes that are not valid UTF-8 text"),
        ({b"seq": 1, b"\xff\xfe": b"x"}, "field name bytes b'\\xff\\xfe' is not valid UTF-8"),
        ({"seq": 1, "msg": "lone \udc80"}, "field 'msg': text that is not valid UTF-8"),
        ({"seq": 1, "blob": "lone \udc80"}, "field 'blob': text that is not valid UTF-8"),
        ({"seq": 1, "other": "lone \udc80"}, "undeclared fields hold text that is not valid UTF-8"),
        ({b"seq": b"1"}, "field 'seq': expected int64, got bytes b'1'"),
    ],
)
def test_text_that_is_not_utf8_rejects_its_record_only(record, reason):
    good = _as_bin({"seq": 9, "msg": "fine"})
    raw = msgpack.packb([5, record], use_bin_type=True, unicode_errors="surrogateescape")
    columns, rejected = batch_columns(LOG, Batch("app", [4, 5], [good, record], raw=lambda i: [b"good", raw][i]))
    assert columns.columns["seq"].tolist() == [9] and columns.columns["msg"] == ["fine"]
    assert [(r.time, r.raw) for r in rejected] == [(5, raw)]
    assert rejected[0].reason.startswith(reason), rejected[0].reason


def test_undeclared_fields_nested_too_deeply_for_json_reject_their_record_only():
    deep: dict = {}
    inner = deep
    for _ in range(5000):
        inner[b"n"] = {}
        inner = inner[b"n"]
    columns, rejected = batch_columns(
        LOG, Batch("app", [1, 2], [{b"seq": 1, b"deep": deep}, {b"seq": 2}], raw=lambda i: b"raw%d" % i)
    )
    assert columns.columns["seq"].tolist() == [2]
    assert [(r.reason, r.raw) for r in rejected] == [
        ("undeclared fields are nested too deeply to keep as JSON", b"raw0")
    ]


def test_batches_validated_together_give_what_each_gives_alone():
    """``validate_many`` validates a schema's batches in one pass (thousands of sensors' one-event chunks)
    and gives each exactly what ``validate`` gives it alone: its own rows, and where a set holds a record
    that does not fit, each batch its own rejections. Tags no schema takes, tags that cannot name a
    stream, vibration and typed batches go their own ways."""
    import msgspec

    from windvane.ingest.prepare import validate, validate_many
    from windvane.ingest.record_types import record_type
    from windvane.ingest.schema import SchemaSet

    vibration = parse_schema(
        {"kind": "vibration", "tags": ["vib.**"], "vibration": {"channels": 2, "sample_rate": 100}}, name="vibration"
    )
    schemas = SchemaSet((LOG, vibration))
    typed = record_type(LOG)
    block = {"samples": np.arange(4, dtype="<f4").tobytes()}

    def batches(misfit: bool) -> list[Batch]:
        out = [
            Batch(
                f"app.s{k}",
                [k, k + 1],
                [{"seq": k, "msg": f"m{k}", "ok": True}, {"seq": -k, "blob": bytes([k]), "value": k / 4}],
            )
            for k in range(40)
        ]
        out += [
            Batch(
                f"app.t{k}",
                [100 + k],
                [msgspec.msgpack.decode(msgpack.packb({"seq": k, "msg": "typed"}), type=typed)],
                typed=True,
            )
            for k in range(5)
        ]
        out += [
            Batch("nobody.takes", [7], [{"seq": 1}]),
            Batch("bad/tag", [8], [{"seq": 2}]),
            Batch("vib.a", [9], [block]),
            Batch("app.empty", [], []),
        ]
        if misfit:
            out[17] = Batch("app.s17", [17, 18], [{"seq": 17}, {"seq": "seventeen"}])
        return out

    def outcome(v) -> tuple:
        columns = (
            None
            if v.columns is None
            else {k: [repr(x) for x in np.asarray(c).tolist()] for k, c in v.columns.columns.items()}
        )  # NaN == NaN
        return (
            v.tag,
            v.size,
            None if v.columns is None else v.columns.rows,
            columns,
            [(r.time, r.reason, r.raw) for r in v.rejected],
        )

    for misfit in (False, True):
        together = [outcome(v) for v in validate_many(schemas, batches(misfit))]
        alone = [outcome(validate(schemas, b)) for b in batches(misfit)]
        assert together == alone
        assert sum(len(o[4]) for o in together) == (3 if misfit else 2)  # no schema, bad tag (, the misfit)
    joint = validate_many(schemas, batches(False))
    seq = [v.columns.columns["seq"] for v in joint[:40]]
    assert all(np.shares_memory(seq[0].base, s) for s in seq)  # one pass: views of one array


@pytest.mark.parametrize("names", ["str", "bin"])
def test_an_undeclared_infinity_is_rejected_with_its_reason_whatever_its_names_are(names):
    record = {"seq": 1, "other": math.inf}
    if names == "bin":  # fluentd's worker packs names as msgpack bin
        record = {k.encode(): v for k, v in record.items()}
    columns, rejected = batch_columns(LOG, Batch("app", [1], [record], raw=lambda i: b"raw"))
    assert columns is None and len(rejected) == 1 and rejected[0].raw == b"raw"
    assert rejected[0].reason.startswith("undeclared field 'other' holds Infinity, which JSON (the extra column)")


def test_text_as_records_and_as_lists_join_into_records_of_the_same_values():
    """A group's batches of one stream: typed ones carry text as records (VLenRows), checked ones as lists."""
    typed = {"time": np.array([1, 2]), "msg": VLenRows.from_arrow(pa.array(["a", "é"])), "raw": [b"x", b"y"]}
    checked = {"time": np.array([3]), "msg": ["✓"], "raw": [b"z"]}
    joined = concat_columns([typed, checked, typed])
    assert type(joined["msg"]) is VLenRows and joined["msg"].tolist() == ["a", "é", "✓", "a", "é"]
    assert joined["raw"] == [b"x", b"y", b"z", b"x", b"y"] and joined["time"].tolist() == [1, 2, 3, 1, 2]
    blobs = concat_columns([{"raw": VLenRows.from_arrow(pa.array([b"\xff"]))}, {"raw": [b"\x00"]}])
    assert blobs["raw"].tolist() == [b"\xff", b"\x00"]
