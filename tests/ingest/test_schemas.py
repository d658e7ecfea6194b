"""Schema files: the shipped examples load, tag patterns match like fluentd's, bad files are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from windvane.ingest import SchemaError
from windvane.ingest.schema import load_schema, load_schemas, parse_schema, tag_pattern

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def test_shipped_examples_cover_every_kind():
    schemas = load_schemas(SCHEMAS)
    assert {s.kind for s in schemas} == {"sensor", "vibration", "log"}
    assert schemas.for_tag("turbine.R80736.scada").name == "turbine_scada"
    assert schemas.for_tag("turbine.R80736.vibration").vibration.channels == 3
    assert schemas.for_tag("app.web.access").name == "server_logs"
    assert schemas.for_tag("unknown.tag") is None
    scada = schemas.for_tag("turbine.R80711.scada")
    assert scada.field("power").unit == "kW" and scada.field("power").required


@pytest.mark.parametrize(
    "pattern, tag, matches",
    [
        ("a.*", "a.b", True),
        ("a.*", "a", False),
        ("a.*", "a.b.c", False),
        ("a.**", "a", True),
        ("a.**", "a.b.c", True),
        ("a.**", "ab", False),
        ("**", "anything.at.all", True),
        ("**.log", "log", True),
        ("**.log", "x.y.log", True),
        ("**.log", "x.logs", False),
        ("{a,b}.x", "b.x", True),
        ("{a,b}.x", "c.x", False),
        ("a.{b,c.*}", "a.c.d", True),
        ("x+y.z", "x+y.z", True),
    ],
)
def test_tag_patterns_match_like_fluentd(pattern, tag, matches):
    assert bool(tag_pattern(pattern).fullmatch(tag)) is matches


def _schema(**doc):
    base = {"kind": "sensor", "tags": ["t.**"]}
    base.update(doc)
    return parse_schema(base, name="test")


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"kind": "radar"}, "kind 'radar' is not one of sensor, vibration, log"),
        ({"tags": []}, "'tags' must be a non-empty list"),
        ({"tags": ["{a,b"]}, "unclosed"),
        ({"fields": [{"name": "time", "dtype": "float32"}]}, "not one of time, extra"),
        ({"fields": [{"name": "x", "dtype": "float16"}]}, "dtype 'float16' is not one of"),
        ({"fields": [{"name": "x", "dtype": "int32"}]}, "an optional int32 field needs 'fill'"),
        ({"fields": [{"name": "x", "dtype": "int8", "fill": 300}]}, "fill 300 is not a int8"),
        ({"fields": [{"name": "x", "dtype": "float32", "required": "yes"}]}, "'required' must be true or false"),
        ({"fields": [{"name": "x", "dtype": "str"}, {"name": "x", "dtype": "str"}]}, "declared more than once"),
        ({"chunk_rows": 0}, "chunk_rows must be at least 1"),
        ({"chunk_rows": True}, "'chunk_rows' must be an integer"),
        ({"colour": "red"}, "unknown key(s) 'colour'"),
        ({"kind": "vibration"}, "needs a [vibration] table"),
        ({"kind": "vibration", "vibration": {"channels": 0}}, "channels must be at least 1"),
        ({"vibration": {"channels": 3}}, "only belongs to kind"),
    ],
)
def test_invalid_schemas_name_the_problem(doc, message):
    with pytest.raises(SchemaError) as info:
        _schema(**doc)
    assert message in str(info.value)


def test_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "broken.toml"
    bad.write_text("kind = \n")
    with pytest.raises(SchemaError, match=r"broken\.toml is not valid TOML"):
        load_schema(bad)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SchemaError, match=r"has no \*\.toml schema files"):
        load_schemas(empty)
    with pytest.raises(SchemaError, match="does not exist"):
        load_schemas(tmp_path / "missing")
    (tmp_path / "a.toml").write_text('kind = "log"\ntags = ["x"]\n[[fields]]\nname = "n"\ndtype = "int64"\n')
    with pytest.raises(SchemaError, match=r"a.toml \[\[fields\]\] #1 \('n'\): an optional int64 field needs 'fill'"):
        load_schema(tmp_path / "a.toml")


def test_first_matching_file_wins(tmp_path):
    (tmp_path / "10_specific.toml").write_text('kind = "log"\ntags = ["app.db"]\n')
    (tmp_path / "20_general.toml").write_text('kind = "log"\ntags = ["app.**"]\n')
    schemas = load_schemas(tmp_path)
    assert schemas.for_tag("app.db").name == "10_specific"
    assert schemas.for_tag("app.web").name == "20_general"


def test_number_codecs_follow_the_schema_with_lz4_for_vibration(sqlite_url):
    import json

    from windvane import arrays, neostore
    from windvane.arrays.keys import Snapshot
    from windvane.ingest.streams import LZ4_CODEC, schema_columns

    vibration = {"kind": "vibration", "tags": ["v"], "vibration": {"channels": 3, "sample_rate": 100}}
    sensor = {
        "kind": "sensor",
        "tags": ["s"],
        "fields": [{"name": "p", "dtype": "float32"}, {"name": "site", "dtype": "str"}],
    }
    assert schema_columns(parse_schema(vibration, name="v"))[0].codec == LZ4_CODEC
    assert schema_columns(parse_schema({**vibration, "codec": "blosc"}, name="v"))[0].codec == "blosc"
    sensor_columns = schema_columns(parse_schema(sensor, name="s"))
    assert sensor_columns[0].codec is None  # blosc (zstd inside) by default
    assert sensor_columns[1].codec["name"] == "zstd"  # text: zstd whatever the schema says
    assert schema_columns(parse_schema({**sensor, "codec": "lz4"}, name="s"))[0].codec == LZ4_CODEC
    with pytest.raises(SchemaError, match="blosc, lz4, zstd, none"):
        parse_schema({**sensor, "codec": "snappy"}, name="s")
    store = neostore.open(sqlite_url)
    try:
        arrays.create_stream(store, "v", schema_columns(parse_schema(vibration, name="v"))).close()
        meta = json.loads(Snapshot.latest(store).get("streams/v/samples/zarr.json"))
    finally:
        store.close()
    blosc = next(c for c in meta["codecs"] if c["name"] == "blosc")["configuration"]
    assert blosc["cname"] == "lz4" and blosc["shuffle"] == "shuffle"
