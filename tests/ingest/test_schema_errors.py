"""Every message a schema file can be refused with: one real TOML file per defect, its whole message checked.

A message names the file, the table ([[fields]] #n with the field's name, [vibration]) and the key, and says
what the key takes; see schemas/README.md for the format.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from windvane.ingest import IngestError, SchemaError
from windvane.ingest.schema import load_schema, load_schemas

SENSOR = 'kind = "sensor"\ntags = ["t.**"]\n'
VIBRATION = 'kind = "vibration"\ntags = ["v"]\n'
FIELD = SENSOR + '[[fields]]\nname = "x"\n'
VIBRATION_TABLE = VIBRATION + "[vibration]\n"
LONG = "x" * 300

CASES = [
    pytest.param(
        SENSOR + 'colour = "red"\n',
        ": unknown key(s) 'colour'; allowed: chunk_rows, codec, description, extra, fields, kind, parse, retention, tags, vibration",
        id="unknown key",
    ),
    pytest.param(
        SENSOR + 'colour = "red"\nsize = 3\n',
        ": unknown key(s) 'colour', 'size'; allowed: chunk_rows, codec, description, extra, fields, kind, parse, retention, tags, vibration",
        id="unknown keys",
    ),
    pytest.param(
        FIELD + 'dtype = "str"\ncolor = "red"\n',
        " [[fields]] #1: unknown key(s) 'color'; allowed: description, dtype, fill, name, required, unit",
        id="unknown field key",
    ),
    pytest.param(
        VIBRATION_TABLE + "channels = 3\nrate = 4\n",
        " [vibration]: unknown key(s) 'rate'; allowed: channels, dtype, rate_field, sample_rate, samples_field, unit",
        id="unknown vibration key",
    ),
    pytest.param(
        'tags = ["t"]\n',
        ": 'kind' is required",
        id="kind required",
    ),
    pytest.param(
        'kind = "log"\n',
        ": 'tags' is required",
        id="tags required",
    ),
    pytest.param(
        SENSOR + '[[fields]]\ndtype = "str"\n',
        " [[fields]] #1: 'name' is required",
        id="field name required",
    ),
    pytest.param(
        FIELD,
        " [[fields]] #1 ('x'): 'dtype' is required",
        id="field dtype required",
    ),
    pytest.param(
        VIBRATION_TABLE + 'dtype = "int16"\n',
        " [vibration]: 'channels' is required",
        id="channels required",
    ),
    pytest.param(
        'kind = 3\ntags = ["t"]\n',
        ": 'kind' must be a string, not 3",
        id="kind type",
    ),
    pytest.param(
        'kind = "log"\ntags = "t.**"\n',
        ": 'tags' must be a list, not 't.**'",
        id="tags type",
    ),
    pytest.param(
        SENSOR + "description = 1\n",
        ": 'description' must be a string, not 1",
        id="description type",
    ),
    pytest.param(
        SENSOR + "extra = false\n",
        ": 'extra' must be a string, not False",
        id="extra type",
    ),
    pytest.param(
        SENSOR + "chunk_rows = 2.0\n",
        ": 'chunk_rows' must be an integer, not 2.0",
        id="chunk_rows float",
    ),
    pytest.param(
        SENSOR + "chunk_rows = true\n",
        ": 'chunk_rows' must be an integer, not True",
        id="chunk_rows bool",
    ),
    pytest.param(
        SENSOR + "codec = 1\n",
        ": 'codec' must be a string, not 1",
        id="codec type",
    ),
    pytest.param(
        SENSOR + 'fields = "x"\n',
        ": 'fields' must be a list, not 'x'",
        id="fields type",
    ),
    pytest.param(
        SENSOR + "retention = 90\n",
        ": 'retention' must be a string, not 90",
        id="retention type",
    ),
    pytest.param(
        'kind = "log"\ntags = ["t"]\nparse = "regexp"\n',
        ": 'parse' must be a table, not 'regexp'",
        id="parse type",
    ),
    pytest.param(
        SENSOR + '[[fields]]\nname = 1\ndtype = "str"\n',
        " [[fields]] #1: 'name' must be a string, not 1",
        id="field name type",
    ),
    pytest.param(
        FIELD + "dtype = 32\n",
        " [[fields]] #1 ('x'): 'dtype' must be a string, not 32",
        id="field dtype type",
    ),
    pytest.param(
        FIELD + 'dtype = "float32"\nunit = 1\n',
        " [[fields]] #1 ('x'): 'unit' must be a string, not 1",
        id="field unit type",
    ),
    pytest.param(
        FIELD + 'dtype = "float32"\nrequired = "yes"\n',
        " [[fields]] #1 ('x'): 'required' must be true or false, not 'yes'",
        id="field required type",
    ),
    pytest.param(
        FIELD + 'dtype = "float32"\ndescription = 2024-01-01\n',
        " [[fields]] #1 ('x'): 'description' must be a string, not datetime.date(2024, 1, 1)",
        id="field description type",
    ),
    pytest.param(
        VIBRATION_TABLE + 'channels = "3"\n',
        " [vibration]: 'channels' must be an integer, not '3'",
        id="channels type",
    ),
    pytest.param(
        VIBRATION_TABLE + "channels = 3\ndtype = 16\n",
        " [vibration]: 'dtype' must be a string, not 16",
        id="vibration dtype type",
    ),
    pytest.param(
        VIBRATION_TABLE + "channels = 3\nsample_rate = true\n",
        " [vibration]: 'sample_rate' must be an integer or a number, not True",
        id="sample_rate type",
    ),
    pytest.param(
        VIBRATION_TABLE + "channels = 3\nunit = 1\n",
        " [vibration]: 'unit' must be a string, not 1",
        id="vibration unit type",
    ),
    pytest.param(
        VIBRATION_TABLE + "channels = 3\nsamples_field = 1\n",
        " [vibration]: 'samples_field' must be a string, not 1",
        id="samples_field type",
    ),
    pytest.param(
        VIBRATION_TABLE + "channels = 3\nrate_field = [1]\n",
        " [vibration]: 'rate_field' must be a string, not [1]",
        id="rate_field type",
    ),
    pytest.param(
        'kind = "radar"\ntags = ["t"]\n',
        ": kind 'radar' is not one of sensor, vibration, log",
        id="kind choice",
    ),
    pytest.param(
        FIELD + 'dtype = "float16"\n',
        " [[fields]] #1 ('x'): dtype 'float16' is not one of bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64, str, bytes",
        id="field dtype choice",
    ),
    pytest.param(
        SENSOR + 'extra = "ignore"\n',
        ": extra 'ignore' is not one of keep, drop, reject",
        id="extra choice",
    ),
    pytest.param(
        SENSOR + 'codec = "snappy"\n',
        ": codec 'snappy' is not one of blosc, lz4, zstd, none",
        id="codec choice",
    ),
    pytest.param(
        VIBRATION_TABLE + 'channels = 3\ndtype = "int8"\n',
        " [vibration]: dtype 'int8' is not one of int16, int32, float32, float64",
        id="vibration dtype choice",
    ),
    pytest.param(
        'kind = "log"\ntags = []\n',
        ": 'tags' must be a non-empty list of tag patterns such as \"turbine.*.scada\"",
        id="tags empty",
    ),
    pytest.param(
        'kind = "log"\ntags = ["a", 1]\n',
        ": 'tags' must be a non-empty list of tag patterns such as \"turbine.*.scada\"",
        id="tags not text",
    ),
    pytest.param(
        'kind = "log"\ntags = [" a"]\n',
        ": tag pattern ' a' is empty or has surrounding spaces",
        id="tag pattern blank",
    ),
    pytest.param(
        'kind = "log"\ntags = ["{a,b"]\n',
        ": tag pattern '{a,b' has an unclosed '{'",
        id="tag pattern unclosed",
    ),
    pytest.param(
        SENSOR + "fields = [1]\n",
        " [[fields]] #1: each [[fields]] entry must be a table",
        id="fields entry not a table",
    ),
    pytest.param(
        VIBRATION + "vibration = 3\n",
        " [vibration]: must be a table",
        id="vibration not a table",
    ),
    pytest.param(
        SENSOR + '[[fields]]\nname = "time"\ndtype = "float32"\n',
        " [[fields]] #1 ('time'): a field name is printable text, not blank and not one of time, extra (a name a store key cannot hold is stored escaped: see arrays.column_key)",
        id="field name reserved",
    ),
    pytest.param(
        SENSOR + '[[fields]]\nname = " "\ndtype = "float32"\n',
        " [[fields]] #1 (' '): a field name is printable text, not blank and not one of time, extra (a name a store key cannot hold is stored escaped: see arrays.column_key)",
        id="field name blank",
    ),
    pytest.param(
        SENSOR + '[[fields]]\nname = "a\\tb"\ndtype = "float32"\n',
        " [[fields]] #1 ('a\\tb'): a field name is printable text, not blank and not one of time, extra (a name a store key cannot hold is stored escaped: see arrays.column_key)",
        id="field name unprintable",
    ),
    pytest.param(
        FIELD + 'dtype = "float32"\nrequired = true\nfill = 0.0\n',
        " [[fields]] #1 ('x'): a required field has no use for 'fill'",
        id="fill of a required field",
    ),
    pytest.param(
        FIELD + 'dtype = "int32"\n',
        " [[fields]] #1 ('x'): an optional int32 field needs 'fill', the value stored when it is missing (or make it required = true)",
        id="optional int without fill",
    ),
    pytest.param(
        FIELD + 'dtype = "bool"\n',
        " [[fields]] #1 ('x'): an optional bool field needs 'fill', the value stored when it is missing (or make it required = true)",
        id="optional bool without fill",
    ),
    pytest.param(
        FIELD + 'dtype = "str"\nfill = 1\n',
        " [[fields]] #1 ('x'): fill 1 is not a str: expected a string",
        id="fill not a string",
    ),
    pytest.param(
        FIELD + 'dtype = "bytes"\nfill = 1\n',
        " [[fields]] #1 ('x'): fill 1 is not a bytes: expected a string (stored as its UTF-8 bytes)",
        id="fill not bytes",
    ),
    pytest.param(
        FIELD + 'dtype = "bool"\nfill = 1\n',
        " [[fields]] #1 ('x'): fill 1 is not a bool: expected true or false",
        id="fill not a bool",
    ),
    pytest.param(
        FIELD + 'dtype = "int8"\nfill = true\n',
        " [[fields]] #1 ('x'): fill True is not a int8: expected a number",
        id="fill a bool for a number",
    ),
    pytest.param(
        FIELD + 'dtype = "int8"\nfill = 300\n',
        " [[fields]] #1 ('x'): fill 300 is not a int8: it does not fit in int8",
        id="fill does not fit",
    ),
    pytest.param(
        FIELD + 'dtype = "int32"\nfill = 1.5\n',
        " [[fields]] #1 ('x'): fill 1.5 is not a int32: it does not fit in int32",
        id="fill a fraction for an integer",
    ),
    pytest.param(
        FIELD + 'dtype = "float32"\nfill = "n/a"\n',
        " [[fields]] #1 ('x'): fill 'n/a' is not a float32: could not convert string to float: np.str_('n/a')",
        id="fill text for a number",
    ),
    pytest.param(
        FIELD + 'dtype = "float32"\nfill = {a = 1}\n',
        " [[fields]] #1 ('x'): fill {'a': 1} is not a float32: float() argument must be a string or a real number, not 'dict'",
        id="fill a table for a number",
    ),
    pytest.param(
        FIELD + 'dtype = "uint64"\nfill = -1\n',
        " [[fields]] #1 ('x'): fill -1 is not a uint64: it does not fit in uint64",
        id="fill too large for numpy",
    ),
    pytest.param(
        SENSOR + '[[fields]]\nname = "x"\ndtype = "str"\n[[fields]]\nname = "x"\ndtype = "str"\n',
        ": field(s) x declared more than once",
        id="duplicate fields",
    ),
    pytest.param(
        SENSOR + "chunk_rows = 0\n",
        ": chunk_rows must be at least 1",
        id="chunk_rows below 1",
    ),
    pytest.param(
        VIBRATION,
        ": a vibration schema needs a [vibration] table (channels, dtype, sample_rate)",
        id="vibration table missing",
    ),
    pytest.param(
        VIBRATION_TABLE + "channels = 0\n",
        " [vibration]: channels must be at least 1",
        id="channels below 1",
    ),
    pytest.param(
        VIBRATION_TABLE + "channels = 3\nsample_rate = 0\n",
        " [vibration]: sample_rate must be positive (samples per second)",
        id="sample_rate zero",
    ),
    pytest.param(
        VIBRATION_TABLE + "channels = 3\nsample_rate = -1.5\n",
        " [vibration]: sample_rate must be positive (samples per second)",
        id="sample_rate negative",
    ),
    pytest.param(
        VIBRATION_TABLE + "channels = 3\nsample_rate = nan\n",
        " [vibration]: sample_rate must be positive (samples per second)",
        id="sample_rate nan",
    ),
    pytest.param(
        VIBRATION + '[[fields]]\nname = "x"\ndtype = "str"\n[vibration]\nchannels = 3\n',
        ": a vibration stream holds time and samples only; remove [[fields]] and send other values to a sensor stream",
        id="vibration with fields",
    ),
    pytest.param(
        SENSOR + "[vibration]\nchannels = 3\n",
        ': [vibration] only belongs to kind = "vibration"',
        id="vibration in a sensor schema",
    ),
    pytest.param(
        SENSOR + 'retention = "90 days"\n',
        ': retention \'90 days\' is not a duration: give a positive number and a unit, s, m, h, d or w ("90d", "12h", "2w")',
        id="retention not a duration",
    ),
    pytest.param(
        SENSOR + 'retention = "0d"\n',
        ': retention \'0d\' is not a duration: give a positive number and a unit, s, m, h, d or w ("90d", "12h", "2w")',
        id="retention zero",
    ),
    pytest.param(
        SENSOR + f'[[fields]]\nname = "{LONG}"\ndtype = "float32"\n',
        f" [[fields]] #1 ({LONG!r}): column name {LONG[:40]!r}... is 300 bytes of UTF-8; the limit is 255",
        id="field name too long for a key",
    ),
]


def refused(path: Path) -> SchemaError:
    with pytest.raises(SchemaError) as info:
        load_schema(path)
    assert type(info.value) is SchemaError and isinstance(info.value, IngestError)
    return info.value


@pytest.mark.parametrize("text, message", CASES)
def test_a_schema_file_with_a_defect_is_refused_naming_the_file_the_table_and_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "plant.toml"
    path.write_text(text)
    assert str(refused(path)) == f"{path}{message}"


def test_a_schema_file_that_is_not_toml_is_named_with_the_parser_s_reason(tmp_path: Path) -> None:
    path = tmp_path / "plant.toml"
    path.write_text("kind = \n")
    assert str(refused(path)) == f"schema {path} is not valid TOML: Invalid value (at line 1, column 8)"


def test_a_schema_file_that_cannot_be_read_is_named_with_the_system_s_reason(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    assert str(refused(missing)) == f"cannot read schema {missing}: No such file or directory"
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "a.toml").write_text(SENSOR)
    with pytest.raises(SchemaError) as info:
        load_schemas(tmp_path / "schemas", [missing])
    assert str(info.value) == f"cannot read schema {missing}: No such file or directory"


def test_a_schema_directory_must_exist_and_hold_schema_files(tmp_path: Path) -> None:
    with pytest.raises(SchemaError) as info:
        load_schemas(tmp_path / "missing")
    assert str(info.value) == f"schema directory {tmp_path / 'missing'} does not exist or is not a directory"
    (tmp_path / "plant.toml").write_text(SENSOR)
    with pytest.raises(SchemaError) as info:
        load_schemas(tmp_path / "plant.toml")
    assert str(info.value) == f"schema directory {tmp_path / 'plant.toml'} does not exist or is not a directory"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text(SENSOR)
    with pytest.raises(SchemaError) as info:
        load_schemas(tmp_path / "empty")
    assert str(info.value) == f"schema directory {tmp_path / 'empty'} has no *.toml schema files"
    assert type(info.value) is SchemaError
