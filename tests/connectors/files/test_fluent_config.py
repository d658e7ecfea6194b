"""A fluentd <parse> section as ParseConfig: from a mapping or TOML, back to fluentd's text, refusing what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from windvane.connectors.files.logs.fluent import ParseConfig, ParseConfigError


def test_from_mapping_takes_fluentd_names_and_defaults() -> None:
    config = ParseConfig.from_mapping(
        {"@type": "regexp", "expression": "/(?<a>.)/", "types": "a:integer, b:time:%Y", "keep_time_key": "true"}
    )
    assert config.type == "regexp"
    assert config.types == {"a": "integer", "b": "time:%Y"}
    assert config.keep_time_key is True
    assert (config.time_type, config.localtime, config.utc, config.estimate_current_event) == (
        "string",
        True,
        False,
        True,
    )
    assert config.effective_time_key == "time"
    assert ParseConfig("none").effective_time_key is None
    assert ParseConfig("regexp", time_key="ts").effective_time_key == "ts"


def test_numbered_formats_and_lists() -> None:
    config = ParseConfig.from_mapping({"type": "multiline", "format2": "/b/", "format1": "/a/", "keys": "x, y"})
    assert config.formats == ("/a/", "/b/")
    assert config.keys == ("x", "y")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"type": "regexp", "expresion": "x"}, "unknown option.*expresion.*known: type, expression"),
        ({"expression": "x"}, "no type"),
        ({"type": "regexp", "keep_time_key": "yes please"}, "keep_time_key = 'yes please' is not bool"),
        ({"type": "regexp", "time_type": "epoch"}, "time_type 'epoch' is not one of string, unixtime, float"),
        ({"type": "regexp", "types": {"a": 1}}, "types maps each field"),
    ],
)
def test_wrong_sections_are_refused(doc: dict, message: str) -> None:
    with pytest.raises(ParseConfigError, match=message):
        ParseConfig.from_mapping(doc)


def test_from_toml_top_level_or_parse_table(tmp_path: Path) -> None:
    flat = tmp_path / "p.toml"
    flat.write_text("type = 'regexp'\nexpression = '^(?<a>\\S+)$'\ntime_format = '%d/%b/%Y'\n")
    assert ParseConfig.from_toml(flat).expression == "^(?<a>\\S+)$"
    nested = tmp_path / "s.toml"
    nested.write_text("[parse]\ntype = 'none'\nmessage_key = 'log'\n")
    assert ParseConfig.from_toml(nested) == ParseConfig("none", message_key="log")
    broken = tmp_path / "b.toml"
    broken.write_text("type = \n")
    with pytest.raises(ParseConfigError, match=r"b\.toml"):
        ParseConfig.from_toml(broken)


def test_to_fluentd_writes_the_options_not_at_their_default() -> None:
    config = ParseConfig(
        "regexp",
        expression="/^(?<time>\\S+) (?<n>\\d+)$/",
        time_format="%Y-%m-%dT%H:%M:%S%z",
        types={"n": "integer"},
        keep_time_key=True,
        keys=("a", "b"),
    )
    assert config.to_fluentd() == (
        "<parse>\n  @type regexp\n  expression /^(?<time>\\S+) (?<n>\\d+)$/\n  time_format %Y-%m-%dT%H:%M:%S%z\n"
        "  keep_time_key true\n  types n:integer\n  keys a,b\n</parse>\n"
    )
    assert ParseConfig("multiline", formats=("/a/", "/b/")).to_fluentd() == (
        "<parse>\n  @type multiline\n  format1 /a/\n  format2 /b/\n</parse>\n"
    )


def test_to_fluentd_quotes_text_that_bare_would_lose_its_spaces() -> None:
    assert '  delimiter " "\n' in ParseConfig("csv", delimiter=" ").to_fluentd()
    assert '  delimiter "\\t"\n' in ParseConfig("tsv", delimiter="\t").to_fluentd()
    assert "  expression /^(?<a>\\S+) x$/\n" in ParseConfig("regexp", expression="/^(?<a>\\S+) x$/").to_fluentd()
