"""Which fluentd <parse> section the import and tail options say (windvane.cli.parsing.fluent_config)."""

from __future__ import annotations

import pytest

from windvane.cli.parsing import fluent_config
from windvane.cli.root import BadInput
from windvane.connectors.files.logs.fluent import ParseConfig

SCHEMA_PARSE = {"type": "regexp", "expression": "^(?<message>.*)$", "time_format": "%Y"}


def test_windvane_formats_stay_windvanes() -> None:
    for name in (None, "jsonl", "syslog3164", "rfc3164", "syslog5424", "combined", "common", "apache"):
        assert fluent_config(name, None, None, None) is None
    assert fluent_config("csv", None, None, None, own_formats=("csv", "parquet")) is None  # as `import` asks


def test_nginx_and_syslog_are_fluentds_parsers() -> None:
    assert fluent_config("nginx", None, None, None) == ParseConfig("nginx")
    assert fluent_config("apache2", None, None, None) == ParseConfig("apache2")
    assert fluent_config("apache_error", None, None, None) == ParseConfig("apache_error")
    assert fluent_config("syslog", None, None, None) == ParseConfig("syslog")


def test_the_help_names_every_fluentd_parser() -> None:
    from windvane.cli.parsing import FLUENTD_TYPES
    from windvane.connectors.files.logs.fluent import PARSERS

    assert sorted(FLUENTD_TYPES) == sorted(PARSERS)


def test_tail_csv_is_fluentds_csv_parser_which_needs_keys() -> None:
    # `import` names its file formats windvane's own (own_formats); `tail` has no table reader, so csv is fluentd's
    with pytest.raises(BadInput, match="csv parser: 'keys' parameter is required"):
        fluent_config("csv", None, None, None)


def test_a_fluentd_type_alone_is_fluentds_parser_with_its_defaults() -> None:
    assert fluent_config("none", None, None, None) == ParseConfig("none")


def test_inline_options_default_to_regexp() -> None:
    assert fluent_config(None, None, "(?<a>x)", "%s") == ParseConfig("regexp", expression="(?<a>x)", time_format="%s")


def test_the_schemas_parse_table_when_no_flag_says_otherwise() -> None:
    assert fluent_config(None, None, None, None, SCHEMA_PARSE) == ParseConfig.from_mapping(SCHEMA_PARSE)
    assert fluent_config("none", None, None, None, SCHEMA_PARSE) == ParseConfig("none")
    assert fluent_config("jsonl", None, None, None, SCHEMA_PARSE) is None


def test_timezone_is_the_zone_of_times_without_one_when_the_section_has_none() -> None:
    assert fluent_config(None, None, None, None, SCHEMA_PARSE, "Asia/Tokyo").timezone == "Asia/Tokyo"
    utc = {**SCHEMA_PARSE, "utc": True}
    assert fluent_config(None, None, None, None, utc, "Asia/Tokyo").timezone is None
    assert fluent_config("none", None, None, None, None, "Asia/Tokyo").timezone is None  # no time_format


def test_a_bad_schema_parse_table_is_bad_input() -> None:
    with pytest.raises(BadInput, match="the schema's \\[parse\\]: unknown option"):
        fluent_config(None, None, None, None, {"type": "regexp", "expr": "x"})


def test_a_schema_keeps_its_parse_table_as_given() -> None:
    from windvane.ingest.errors import SchemaError
    from windvane.ingest.schema import parse_schema

    schema = parse_schema({"kind": "log", "tags": ["a"], "parse": SCHEMA_PARSE}, name="a")
    assert schema.parse == SCHEMA_PARSE
    assert parse_schema({"kind": "log", "tags": ["a"]}, name="a").parse is None
    with pytest.raises(SchemaError, match="parse"):
        parse_schema({"kind": "log", "tags": ["a"], "parse": "regexp"}, name="a")
