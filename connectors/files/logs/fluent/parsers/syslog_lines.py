"""fluentd's syslog parser on one line, step by step as fluentd 1.14.6 takes it (the reference and the slow path).

:func:`read_line` follows fluentd's ``parse_rfc3164_regex``, ``parse_rfc3164``,
``parse_rfc5424_regex`` and ``parse_rfc5424`` over the line's bytes (in_tail
hands fluentd binary strings: positions are bytes), quirks included: the
time is cut at the n-th run of spaces (n: the spaces of the time format, plus
one) and squeezed; the ``string`` engine takes a fixed 15 bytes for the
default format, looks for a subsecond's end from byte 15 of the line, and
fails (a Ruby NameError) on a squeezed time of another format; the regexp
engine searches its expression from the host on (not anchored). Where
fluentd's code raises (a nil position), the line is rejected with the error
in_tail logs (``invalid line found``). The time text is returned unread: the
caller reads all of them at once (:mod:`.syslog`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ...errors import LineError
from ..records import PATTERN_NOT_MATCHED

SP = 0x20
INVALID = "invalid line found: "
_NIL = "undefined method `{}' for nil:NilClass"
_NO_IDX = "undefined local variable or method `idx' for #<Fluent::Plugin::SyslogParser>"

PRI_3164 = re.compile(rb"<([0-9]{1,3})>")
PRI_5424 = re.compile(rb"<([0-9]{1,3})>[0-9][0-9]{0,2}[ \t\n\v\f\r]")
BODY_3164 = re.compile(rb"(?P<host>[^ ]*) (?P<ident>[^ :\[]*)(?:\[(?P<pid>[0-9]+)\])?(?:[^:]*:)? *(?P<message>.*)$")
BODY_5424 = re.compile(
    rb"(?P<host>[!-~]{1,255}) (?P<ident>[!-~]{1,48}) (?P<pid>[!-~]{1,128}) (?P<msgid>[!-~]{1,32})"
    rb" (?P<extradata>(?:-|(?:\[.*?(?<!\\)\])+))(?: (?P<message>.+))?\Z",
    re.DOTALL,
)
NAMES_3164 = ("host", "ident", "pid", "message")
NAMES_5424 = ("host", "ident", "pid", "msgid", "extradata", "message")


#: The fields of one line: bytes as cut from it, ``pri`` an int.
Fields = dict[str, bytes | int | None]


class Rejected(LineError):
    """fluentd drops the line (raised and caught line by line, never out of the parser): ``reason`` is in_tail's (``pattern not matched`` or ``invalid line found: ...``)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class Line:
    """What fluentd read of one line: its time text (unread), the fields, or why it is dropped.

    ``fields`` None: the expression did not match (the regexp engine reads the time first, so a bad time
    is the reason then).
    """

    time: bytes | None
    fields: Fields | None = field(default_factory=dict)
    reason: str | None = None


@dataclass(frozen=True)
class Rules:
    """The options that shape how a line is cut (see :class:`.syslog.SyslogParser`)."""

    message_format: str
    with_priority: bool
    regexp: bool
    colonless: bool
    spaces_3164: int
    spaces_5424: int
    fixed_3164: bool  # the string engine's fixed 15-byte time (the default formats)
    fixed_5424: bool  # the string engine's time up to the first space (a format without spaces)


def read_line(text: bytes, rules: Rules, rfc5424: bool) -> Line:
    """One line as fluentd's syslog parser reads it (see the module), as RFC 5424 or RFC 3164."""
    try:
        if rules.regexp:
            return _rfc5424_regexp(text, rules) if rfc5424 else _rfc3164_regexp(text, rules)
        return _rfc5424_string(text, rules) if rfc5424 else _rfc3164_string(text, rules)
    except Rejected as exc:
        return Line(None, None, exc.reason)


def _at(text: bytes, i: int) -> int | None:
    """Ruby's ``text[i]`` (a byte; None past either end)."""
    if -len(text) <= i < len(text):
        return text[i]
    return None


def _find(text: bytes, what: bytes, start: int) -> int | None:
    found = text.find(what, start) if start <= len(text) else -1
    return None if found < 0 else found


def _slice(text: bytes, start: int, length: int) -> bytes | None:
    """Ruby's ``text.slice(start, length)``."""
    if start > len(text) or length < 0:
        return None
    return text[start : start + length]


def _chomp(value: bytes) -> bytes:
    return value[:-1] if value.endswith(b"\r") else value


def _time_end(text: bytes, start: int, count: int) -> tuple[int, bool]:
    """Where the time ends (the space after its ``count``-th word) and whether runs of spaces were passed."""
    i: int | None = start - 1
    squeezed = False
    for _ in range(count):
        if i is None:
            raise Rejected(INVALID + _NIL.format("+"))
        while _at(text, i + 1) == SP:
            squeezed, i = True, i + 1
        i = _find(text, b" ", i + 1)
    if i is None:
        raise Rejected(INVALID + _NIL.format("-"))
    return i, squeezed


def _squeezed(text: bytes) -> bytes:
    return re.sub(rb" +", b" ", text)


def _regexp_fields(pattern: re.Pattern[bytes], names: tuple[str, ...], text: bytes, start: int) -> Fields | None:
    found = pattern.search(text, start)
    if found is None:
        return None
    return {name: _chomp(value) if name == "message" else value for name in names if (value := found[name]) is not None}


def _rfc3164_regexp(text: bytes, rules: Rules) -> Line:
    pri, start = _regexp_priority(text, rules, _pri_3164)
    return _regexp_line(text, start, pri, rules.spaces_3164, BODY_3164, NAMES_3164)


def _rfc5424_regexp(text: bytes, rules: Rules) -> Line:
    pri, start = _regexp_priority(text, rules, _pri_5424)
    return _regexp_line(text, start, pri, rules.spaces_5424, BODY_5424, NAMES_5424)


def _pri_3164(text: bytes) -> tuple[int, int]:
    if PRI_3164.match(text) is None:
        raise Rejected(PATTERN_NOT_MATCHED)
    end = text.index(b">")
    return int(text[1:end]), end + 1


def _pri_5424(text: bytes) -> tuple[int, int]:
    found = PRI_5424.match(text)
    if found is None:
        raise Rejected(PATTERN_NOT_MATCHED)
    return int(found[1]), found.end()


def _regexp_priority(text: bytes, rules: Rules, read: Callable[[bytes], tuple[int, int]]) -> tuple[int | None, int]:
    """The regexp engine's ``<pri>`` (None without ``with_priority``) and where the time starts."""
    return read(text) if rules.with_priority else (None, 0)


def _regexp_line(
    text: bytes, start: int, pri: int | None, spaces: int, body: re.Pattern[bytes], names: tuple[str, ...]
) -> Line:
    """The regexp engine's fields of a line whose time starts at ``start``."""
    i, squeezed = _time_end(text, start, spaces)
    time = _squeezed(text[start:i]) if squeezed else text[start:i]
    fields = _regexp_fields(body, names, text, i + 1)
    if fields is not None and pri is not None:
        fields["pri"] = pri
    return Line(time, fields)


def _string_priority(text: bytes) -> tuple[int, int]:
    """The string engine's ``<pri>``: its value (Ruby's to_i) and where the ``>`` is."""
    if not text.startswith(b"<"):
        raise Rejected(PATTERN_NOT_MATCHED)
    end = _find(text, b">", 1)
    if end is None:
        raise Rejected(INVALID + _NIL.format("<"))
    if end < 2:
        raise Rejected(PATTERN_NOT_MATCHED)
    number = re.match(rb"\s*([+-]?[0-9]+(?:_[0-9]+)*)", text[1:end])
    return (int(number[1].replace(b"_", b"")) if number else 0), end


def _string_time(text: bytes, cursor: int, count: int) -> tuple[bytes, int]:
    """The string engine's time cut by spaces (a format other than the default ones)."""
    i, squeezed = _time_end(text, cursor, count)
    if squeezed:
        raise Rejected(INVALID + _NO_IDX)  # fluentd's code names a variable it does not have there
    return text[cursor:i], i + 1


def _rfc3164_string(text: bytes, rules: Rules) -> Line:
    pri, cursor = None, 0
    if rules.with_priority:
        pri, end = _string_priority(text)
        cursor = end + 1
    if rules.fixed_3164:
        after = _at(text, cursor + 15)
        if after == SP:
            time, cursor = text[cursor : cursor + 15], cursor + 16
        elif after == ord("."):
            i = _find(text, b" ", 15)  # fluentd looks from byte 15 of the line, priority or not
            if i is None:
                raise Rejected(INVALID + _NIL.format("-"))
            time, cursor = text[cursor:i], i + 1
        else:
            raise Rejected(PATTERN_NOT_MATCHED)
    else:
        time, cursor = _string_time(text, cursor, rules.spaces_3164)
    i = _find(text, b" ", cursor)
    if i is None:
        raise Rejected(PATTERN_NOT_MATCHED)
    fields: Fields = {"host": text[cursor:i]}
    if pri is not None:
        fields["pri"] = pri
    cursor = i + 1
    fields["message"] = _chomp(_rfc3164_tag(text, cursor, fields, rules.colonless))
    return Line(time, fields)


def _rfc3164_tag(text: bytes, cursor: int, fields: Fields, colonless: bool) -> bytes:
    """The ident and pid the string engine finds after the host (into ``fields``), and the message."""
    i = _find(text, b" ", cursor)
    if i is None:
        return text[cursor:]
    if _at(text, i - 1) == ord(":"):
        if _at(text, i - 2) == ord("]"):
            _ident_pid(text, cursor, i, 3, fields)
        else:
            fields["ident"] = _slice(text, cursor, i - cursor - 1)
        return text[i + 1 :]
    if not colonless:
        return text[cursor:]
    if _at(text, i - 1) == ord("]"):
        _ident_pid(text, cursor, i, 2, fields)
    else:
        fields["ident"] = text[cursor:i]
    return text[i + 1 :]


def _ident_pid(text: bytes, cursor: int, i: int, tail: int, fields: Fields) -> None:
    left = _find(text, b"[", cursor)
    if left is None:
        raise Rejected(INVALID + _NIL.format("-"))
    fields["ident"] = _slice(text, cursor, left - cursor)
    fields["pid"] = _slice(text, left + 1, i - left - tail)


def _rfc5424_string(text: bytes, rules: Rules) -> Line:
    pri, cursor = None, 0
    if rules.with_priority:
        pri, end = _string_priority(text)
        space = _find(text, b" ", end)
        if space is None:
            raise Rejected(INVALID + _NIL.format("+"))
        cursor = space + 1
    if rules.fixed_5424:
        i = _find(text, b" ", cursor)
        if i is None:
            raise Rejected(INVALID + _NIL.format("-"))
        time, cursor = text[cursor:i], i + 1
    else:
        time, cursor = _string_time(text, cursor, rules.spaces_5424)
    fields: Fields = {}
    for name in ("host", "ident", "pid", "msgid"):
        i = _find(text, b" ", cursor)
        if i is None:
            raise Rejected(PATTERN_NOT_MATCHED)
        fields[name], cursor = text[cursor:i], i + 1
    if pri is not None:
        fields["pri"] = pri
    if _at(text, cursor) == ord("-"):
        fields["extradata"], cursor = b"-", cursor + 1
    else:
        i = _find(text, b"] ", cursor)
        end = i + 1 if i is not None else len(text)
        fields["extradata"], cursor = text[cursor:end].replace(b"\\", b""), end
    if cursor != len(text):
        fields["message"] = _chomp(text[cursor + 1 :])
    return Line(time, fields)
