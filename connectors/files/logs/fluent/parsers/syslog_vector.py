"""fluentd's syslog parser over a whole column of lines at once, for the lines that take the common road.

Each of :func:`expression` 's regular expressions is anchored at the line's
start and reads, in one pass (:class:`..vector_regexp.VectorRegexp`, RE2
over the Arrow array), exactly what :mod:`.syslog_lines` reads step by step
from a line of that shape: the priority, the time cut at its spaces, then
the fields. A line it does not match is not necessarily rejected: it may
take a rarer road (a host longer than RFC 5424 allows, which fluentd's
unanchored search reads further on; a ``]:`` tag without ``[``; a subsecond
time), and goes to :func:`.syslog_lines.read_line`.

The expressions are exact where they match: where a group could be read two
ways, the alternatives exclude each other or come in fluentd's order (RE2
prefers as Perl and Ruby do). A field that is the rest of the line is only
marked where it starts (:data:`RESTS`). Without RE2 every line takes the
slow road.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..vector_regexp import VectorRegexp, substrings
from .syslog_lines import Rules

# RFC 5424's fields after the time, as fluentd's expression has them (the lookbehind "a ] not after \\" written
# without one: an empty content or one ending in another character, tried in the same order), but for the
# lengths of the first four (counted repeats slow RE2 down): :data:`LIMITS` are checked after
_BODY_5424 = (
    r"(?P<host>[!-~]+) (?P<ident>[!-~]+) (?P<pid>[!-~]+) (?P<msgid>[!-~]+)"
    r" (?P<extradata>(?:-|(?:\[(?:|.*?[^\\])\])+))(?: (?P<message>).|\Z)"
)
#: fluentd's longest RFC 5424 fields: a line with a longer one takes the slow road (fluentd searches on in it).
LIMITS = {"host": 255, "ident": 48, "pid": 128, "msgid": 32}
_BODY_3164 = r"(?P<host>[^ ]*) (?P<ident>[^ :\[]*)(?:\[(?P<pid>[0-9]+)\])?(?:[^:]*:)? *(?P<message>)"
# the string engine's tag word W (no spaces) after the host, by its shape; each alternative excludes the others
_TAG_COLON = (
    r"(?P<ident_a>[^ \[]*)\[(?P<pid_a>[^ ]*)\]: (?P<message_a>)",  # ident[pid]:
    r"(?P<ident_b>(?:[^ ]*[^ \]])?): (?P<message_b>)",  # ident:
)
_TAG_COLONLESS = (
    r"(?P<ident_c>[^ \[]*)\[(?P<pid_c>[^ ]*)\] (?P<message_c>)",  # ident[pid]
    r"(?P<ident_d>(?:[^ ]*[^ \]:])?) (?P<message_d>)",  # ident
)
_TAG_NONE = (r"(?P<message_e>)(?:[^ ]*[^ :])? ",)  # support_colonless_ident false: all is the message
_TAG_LAST = r"(?P<message_f>)[^ ]*$"  # no space after the host's word: no ident
#: The groups that mark where a field that is the rest of the line starts (fluentd's ".*$", or " (.+)" then
#: "\z", always there once the line has come so far): RE2 stops there instead of reading the rest (twice as
#: fast), and the field is cut from the line by position (:func:`_rest`).
RESTS = re.compile(r"message(_[a-f])?|extradata_c")


def _time(spaces: int) -> str:
    """The time of the regexp engine: ``spaces`` words, each after a run of spaces (the first after any)."""
    return r"(?P<time> *[^ ]+" + r"(?: +[^ ]+)" * (spaces - 1) + ") "


def time_expression(rules: Rules, rfc5424: bool) -> str:
    """The regexp engine's priority and time, anchored (it reads them before the fields)."""
    pri = r"<(?P<pri>[0-9]{1,3})>" if rules.with_priority else ""
    if rfc5424:
        pri = pri and pri + r"[0-9][0-9]{0,2}[ \t\n\v\f\r]"
        return "(?s)^" + pri + _time(rules.spaces_5424)
    return "^" + pri + _time(rules.spaces_3164)


def _words(spaces: int) -> str:
    """The string engine's time in a format other than the default: ``spaces`` words, single spaces between
    (runs of spaces make fluentd's code fail: those lines take the slow road)."""
    return r"(?P<time>[^ ]+" + r"(?: [^ ]+)" * (spaces - 1) + ") "


def expression(rules: Rules, rfc5424: bool) -> str:
    """The anchored expression of the common road for ``rules``."""
    if rules.regexp:
        return time_expression(rules, rfc5424) + (_BODY_5424 if rfc5424 else _BODY_3164)
    if rfc5424:
        pri = r"<(?P<pri>[0-9]{1,3})>[^ ]* " if rules.with_priority else ""
        time = r"(?P<time>[^ ]*) " if rules.fixed_5424 else _words(rules.spaces_5424)
        fields = r"(?P<host>[^ ]*) (?P<ident>[^ ]*) (?P<pid>[^ ]*) (?P<msgid>[^ ]*) "
        extradata = r"(?:(?P<dash>-)(?:.(?P<message_a>)|$)|(?P<extradata_b>(?:[^-].*?)??\]) (?P<message_b>)"
        return "^" + pri + time + fields + extradata + r"|(?P<extradata_c>)(?:[^-]|$))"
    pri = r"<(?P<pri>[0-9]{1,3})>" if rules.with_priority else ""
    time = r"(?P<time>[\x00-\x7f]{15}) " if rules.fixed_3164 else _words(rules.spaces_3164)
    tags = (*_TAG_COLON, *(_TAG_COLONLESS if rules.colonless else _TAG_NONE))
    return "^" + pri + time + r"(?P<host>[^ ]*) (?:" + "|".join(tags) + "|" + _TAG_LAST + ")"


@dataclass
class Cut:
    """The common road's reading of some lines: text fields (``pri`` int64), the time texts, and the lines it
    could not read (``slow``)."""

    fields: dict[str, pa.Array]
    time: pa.Array
    slow: np.ndarray


def _first(columns: dict[str, pa.Array], prefix: str) -> pa.Array | None:
    found = [column for name, column in sorted(columns.items()) if re.fullmatch(prefix + r"(_[a-f])?", name)]
    return pc.coalesce(*found) if found else None


def squeezed(times: pa.Array) -> pa.Array:
    """The regexp engine's time texts with their runs of spaces made one (fluentd squeezes the ones it found runs
    in; squeezing the others changes nothing)."""
    if pc.any(pc.match_substring(times, "  ")).as_py():
        return pc.replace_substring_regex(times, " +", " ")
    return times


def cut(regexp: VectorRegexp, texts: pa.Array, rules: Rules) -> Cut:
    """``texts`` read by ``regexp`` (one of :func:`expression`), as fluentd would."""
    found = regexp.spans(texts)
    if found is None:  # no RE2 here: every line takes the slow road
        return Cut({}, pa.nulls(len(texts), pa.large_string()), np.ones(len(texts), dtype=bool))
    spans = {found.type.field(k).name: column for k, column in enumerate(found.flatten())}
    columns = {name: (_rest if RESTS.fullmatch(name) else substrings)(texts, span) for name, span in spans.items()}
    unmatched = ~found.is_valid().to_numpy(zero_copy_only=False)
    time = squeezed(columns["time"]) if rules.regexp else columns["time"]
    fields: dict[str, pa.Array] = {}
    if "pri" in columns:
        fields["pri"] = pc.cast(columns["pri"], pa.int64())
    for name in ("host", "ident", "pid", "msgid", "extradata", "message"):
        column = _first(columns, name)
        if column is not None:
            fields[name] = column
    if "dash" in columns:  # the string engine's RFC 5424: "-", else the structured data without backslashes
        fields["extradata"] = pc.coalesce(columns["dash"], pc.replace_substring(fields["extradata"], "\\", ""))
    if "message" in fields and pc.any(pc.ends_with(fields["message"], "\r")).as_py():
        fields["message"] = pc.replace_substring_regex(fields["message"], r"\r$", "")  # Ruby's chomp!
    return Cut(fields, time, unmatched | _too_long(fields) if rules.regexp else unmatched)


def _rest(lines: pa.Array, marks: pa.Array) -> pa.Array:
    """The rest of each line from where ``marks`` (spans of an empty group) are; null where a mark is."""
    starts = pc.fill_null(pc.list_element(marks, 0), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    lengths = pc.binary_length(lines).to_numpy(zero_copy_only=False).astype(np.int64) - starts
    pairs = pa.array(np.stack([starts, lengths], axis=1).ravel(), pa.int64())
    return substrings(lines, pa.FixedSizeListArray.from_arrays(pairs, 2, mask=pc.is_null(marks)))


def _too_long(fields: dict[str, pa.Array]) -> np.ndarray:
    """The lines with an RFC 5424 field longer than fluentd's expression allows (:data:`LIMITS`)."""
    count = len(fields["host"])
    too_long = np.zeros(count, dtype=bool)
    if "msgid" in fields:
        for name, most in LIMITS.items():
            longer = pc.fill_null(pc.greater(pc.binary_length(fields[name]), most), False)
            too_long |= longer.to_numpy(zero_copy_only=False)
    return too_long
