"""``pattern not matched`` says where a line stopped matching a regexp-based parser's expression: the last of its
top-level fields the line matches and the first it does not (connectors/files/logs/fluent/stopped.py)."""

from __future__ import annotations

from windvane.connectors.files.logs import parse_log
from windvane.connectors.files.logs.fluent import ParseConfig, fluent_format
from windvane.connectors.files.logs.fluent.stopped import field_cuts
from windvane.parsers import parser_path


def reasons(config: ParseConfig, text: bytes) -> list[str]:
    return [r.reason for r in parse_log(fluent_format(config), text).rejected]


def test_cuts_follow_top_level_named_groups_only():
    source = r"^(?<a>[)|(]+)\) (?:\[(?<inner>\d+)\])?(?<b>x|y)? (?<c>\w{2,3}?)(?<!z)(?=q)?$"
    assert [(name, source[:end]) for name, end in field_cuts(source)] == [
        ("a", r"^(?<a>[)|(]+)"),
        ("b", r"^(?<a>[)|(]+)\) (?:\[(?<inner>\d+)\])?(?<b>x|y)?"),
        ("c", r"^(?<a>[)|(]+)\) (?:\[(?<inner>\d+)\])?(?<b>x|y)? (?<c>\w{2,3}?)"),
    ]
    assert field_cuts(r"^(?<a>\d+)|(?<b>x)$") == []  # a top-level | : cuts would not be prefixes
    assert field_cuts(r"^[]a](?<a>[^]|]+)") == [("a", len(r"^[]a](?<a>[^]|]+)"))]


def test_a_shipped_parser_says_which_field_a_line_stopped_at():
    asterisk = ParseConfig.from_toml(str(parser_path("asterisk")))
    lines = (
        b"[Jan 18 17:39:50] NOTICE[12049]\n"  # no source, no message
        b"[Jan 18 17:39:50] NOTICE{12049} manager.c: x\n"
        b"Jan 18 17:39:50 pbx\n"
        b"[2024-03-01 12:00:00] NOTICE[1] a.c: fine\n"
    )
    assert reasons(asterisk, lines) == [
        "line 1: pattern not matched: the line matches the expression through field 'pid', not through 'source'",
        "line 2: pattern not matched: the line matches the expression through field 'level', not through 'pid'",
        "line 3: pattern not matched: the line matches the expression through field 'time', not through 'level'",
    ]


def test_where_stopped_for_fluentds_own_expressions_and_non_ascii_lines():
    nginx = ParseConfig("nginx")
    lines = '1.2.3.4 - - [01/Mar/2024:12:00:00 +0000] "GET / HTTP/1.1" 200\nnot an access line ü\n'.encode()
    assert reasons(nginx, lines) == [
        "line 1: pattern not matched: the line matches the expression through field 'code', not through 'size'",
        "line 2: pattern not matched: the line matches the expression through field 'user', not through 'time'",
    ]
    regexp = ParseConfig.from_mapping({"type": "regexp", "expression": r"/^(?<a>é) (?<b>\d+)$/"})
    assert reasons(regexp, "x 1\né x\né 1 2\n".encode()) == [
        "line 1: pattern not matched: the line does not match the expression up to its first field 'a'",
        "line 2: pattern not matched: the line matches the expression through field 'a', not through 'b'",
        "line 3: pattern not matched: the line matches the expression through its last field 'b', not after it",
    ]
    either = ParseConfig.from_mapping({"type": "regexp", "expression": r"^(?<a>\d+)$|^(?<b>x)$"})
    assert reasons(either, b"y\n") == ["line 1: pattern not matched"]  # no cuts: fluentd's bare reason


def test_every_block_of_a_file_read_in_threads_says_where(tmp_path):
    from windvane.connectors.files import ReaderOptions
    from windvane.connectors.files.logs.reader import LogReader

    good = "[2024-03-01 12:00:00] NOTICE[1234] chan_sip.c: Registration from '100' failed - Wrong password\n"
    log = tmp_path / "full"
    log.write_text((good * 49 + "[2024-03-01 12:00:01] NOTICE{1234} x\n") * 2000)  # about 5 MB: 10 blocks
    fmt = fluent_format(ParseConfig.from_toml(str(parser_path("asterisk"))))
    reader = LogReader(log, fmt, ReaderOptions(block_bytes=512 << 10))
    reasons = {reason.split(": ", 1)[1] for part in reader(None) for _, _, reason in part.rejected}
    assert reasons == {"pattern not matched: the line matches the expression through field 'level', not through 'pid'"}
