"""fluentd's ``syslog`` parser: RFC 3164 and RFC 5424 lines (``message_format rfc3164|rfc5424|auto``).

As fluentd 1.14.6 reads them, field for field: ``host``, ``ident``,
``pid``, ``message`` (RFC 5424 also ``msgid`` and ``extradata``, ``-``
kept as it is), ``pri`` as an integer with ``with_priority`` (default
false: a line starting ``<34>`` is then no RFC 3164 time and is rejected).
``auto`` tells the protocols apart line by line (``<pri>`` then a version
digit: RFC 5424). ``parser_type regexp`` (default) and ``string`` are
fluentd's two implementations, each with its own reading of odd lines
(see :mod:`.syslog_lines`); ``support_colonless_ident`` is the string
engine's.

The time: RFC 3164's ``time_format`` (default ``%b %d %H:%M:%S``: no year,
the machine's current local year as fluentd's strptime gives it),
RFC 5424's ``rfc5424_time_format`` (default ``%Y-%m-%dT%H:%M:%S.%L%z``,
then without the fraction as fluentd tries next; ``time_format`` if given
replaces it with ``message_format rfc5424``), with ``timezone``,
``localtime``, ``utc`` and ``time_type`` as :class:`..timefmt.TimeParser`
reads them. ``keep_time_key`` keeps the time text (as ``time_text``, see
:mod:`..records`). A time that is not one rejects the line. fluentd's
syslog parser applies no ``types``, ``null_value_pattern`` or
``null_empty_string`` and has no time key: neither does this.

Most lines are read by one RE2 pass over the column (:mod:`.syslog_vector`); the others line by line.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...lines import Lines, Rows, add_faults
from ...options import LogOptions
from ..config import ParseConfig, ParseConfigError
from ..records import KEPT_TIME, PATTERN_NOT_MATCHED
from ..timefmt import TimeParser
from ..vector_regexp import VectorRegexp
from .syslog_lines import INVALID, Rules, read_line
from .syslog_vector import cut, expression, squeezed, time_expression

TIME_3164 = "%b %d %H:%M:%S"
TIME_5424 = "%Y-%m-%dT%H:%M:%S.%L%z"
TIME_5424_WHOLE = "%Y-%m-%dT%H:%M:%S%z"  # fluentd's second try: no fraction
FORMATS = ("rfc3164", "rfc5424", "auto")
ENGINES = ("regexp", "string")
FIELDS = {
    "rfc3164": ("host", "ident", "pid", "message"),
    "rfc5424": ("host", "ident", "pid", "msgid", "extradata", "message"),
}
FIELDS["auto"] = FIELDS["rfc5424"]
_DETECT_5424 = "^<[0-9]{1,3}>[1-9]"
_Part = tuple[np.ndarray, dict[str, pa.Array], pa.Array]  # lines (their indexes), their fields, their time texts


class SyslogParser:
    """``parse(lines, options)``: each line as fluentd's syslog parser reads it (see the module)."""

    def __init__(self, config: ParseConfig):
        if config.message_format not in FORMATS:
            raise ParseConfigError(f"valid options are {','.join(FORMATS)} but got {config.message_format}")
        engine = config.parser_type or "regexp"
        if engine not in ENGINES:
            raise ParseConfigError(f"valid options are {','.join(ENGINES)} but got {engine}")
        self.config = config
        fmt = config.message_format
        rfc5424_format = config.rfc5424_time_format or TIME_5424
        time_3164 = config.time_format or TIME_3164
        time_5424 = config.time_format if fmt == "rfc5424" and config.time_format else rfc5424_format
        self.rules = Rules(
            message_format=fmt,
            with_priority=config.with_priority,
            regexp=engine == "regexp",
            colonless=config.support_colonless_ident,
            spaces_3164=_space_count(time_3164),
            spaces_5424=_space_count(time_5424),
            fixed_3164=time_3164 in (TIME_3164, TIME_3164 + ".%N"),
            fixed_5424=" " not in time_5424,
        )
        self.times = {False: [_time_parser(config, time_3164)], True: [_time_parser(config, time_5424)]}
        self.times[True].append(_time_parser(config, TIME_5424_WHOLE))
        self.regexps: dict[bool, VectorRegexp | None] = {
            kind: VectorRegexp(expression(self.rules, kind)) for kind in (False, True)
        }
        self.stamps: dict[bool, VectorRegexp | None] = {
            kind: VectorRegexp(time_expression(self.rules, kind)) if self.rules.regexp else None
            for kind in (False, True)
        }
        self.names = FIELDS[fmt]

    def parse(self, lines: Lines, options: LogOptions) -> Rows:
        """Rows of the lines fluentd reads; the others are faults with in_tail's reason."""
        now = options.now or 0
        count = len(lines)
        texts = lines.text
        kinds = np.full(count, self.rules.message_format == "rfc5424")
        if self.rules.message_format == "auto":
            kinds = pc.match_substring_regex(texts, _DETECT_5424).to_numpy(zero_copy_only=False)
        times = np.full(count, now, dtype=np.int64)
        faults: dict[int, str] = {}
        parts: list[_Part] = []
        for kind in (False, True):
            rows = np.flatnonzero(kinds == kind)
            if len(rows):
                some = texts if len(rows) == count else texts.take(pa.array(rows))
                fields, time, times[rows], local = self._part(some, bool(kind), now)
                faults.update({int(rows[i]): reason for i, reason in local.items()})
                parts.append((rows, fields, time))
        return Rows(self._columns(parts, times), faults)

    def _part(
        self, texts: pa.Array, rfc5424: bool, now: int
    ) -> tuple[dict[str, pa.Array], pa.Array, np.ndarray, dict[int, str]]:
        """Lines of one protocol: their fields, time texts, times (ns) and faults, in fluentd's order of reasons:
        rejected before the time is read, then a time that is none, then an expression not matched."""
        fields, time, faults = self._read(texts, rfc5424, now)
        found, bad = self._times(time, rfc5424, now)
        shown = time.to_pylist() if bad.any() else []
        add_faults(faults, bad, lambda i: f"{INVALID}invalid time format: value = {shown[i]}")
        add_faults(faults, pc.is_null(fields["host"]).to_numpy(zero_copy_only=False), PATTERN_NOT_MATCHED)
        return fields, time, np.where(bad, now, found), faults

    def _read(self, texts: pa.Array, rfc5424: bool, now: int) -> tuple[dict[str, pa.Array], pa.Array, dict[int, str]]:
        """The fields and time texts of lines of one protocol, and the lines rejected before their time is read."""
        names = (*(("pri",) if self.rules.with_priority else ()), *FIELDS["rfc5424" if rfc5424 else "rfc3164"])
        regexp = self.regexps[rfc5424]
        if regexp is None:
            slow = np.ones(len(texts), dtype=bool)
            fields = {name: pa.nulls(len(texts), _type(name)) for name in names}
            time = pa.nulls(len(texts), pa.large_string())
        else:
            common = cut(regexp, texts, self.rules)
            slow, time = common.slow, common.time
            fields = {name: common.fields.get(name, pa.nulls(len(texts), _type(name))) for name in names}
        stamps = self.stamps[rfc5424]
        if stamps is not None and slow.any():
            slow, time = self._time_first(stamps, texts, slow, time, rfc5424, now)
        reasons: dict[int, str] = {}
        index = np.flatnonzero(slow)
        if len(index):
            read = [read_line(text.encode(), self.rules, rfc5424) for text in texts.take(pa.array(index)).to_pylist()]
            reasons = {int(index[k]): line.reason for k, line in enumerate(read) if line.reason is not None}
            mask = pa.array(slow)
            time = pc.replace_with_mask(time, mask, _texts([line.time for line in read]))
            for name in names:
                values = [None if line.fields is None else line.fields.get(name) for line in read]
                fields[name] = pc.replace_with_mask(
                    fields[name], mask, pa.array(values, pa.int64()) if name == "pri" else _texts(values)
                )
        return fields, time, reasons

    def _time_first(
        self, stamps: VectorRegexp, texts: pa.Array, slow: np.ndarray, time: pa.Array, rfc5424: bool, now: int
    ) -> tuple[np.ndarray, pa.Array]:
        """The regexp engine reads the time before the fields: of the lines for the slow road, those whose time
        is none are rejected for it (their time texts put in ``time``) without going further."""
        index = np.flatnonzero(slow)
        found = stamps.match(texts.take(pa.array(index)))
        shown = squeezed(found.columns["time"])
        _, bad = self._times(shown, rfc5424, now)
        bad &= ~found.unmatched
        if not bad.any():
            return slow, time
        known = np.zeros(len(texts), dtype=bool)
        known[index[bad]] = True
        return slow & ~known, pc.replace_with_mask(time, pa.array(known), shown.filter(pa.array(bad)))

    def _times(self, texts: pa.Array, rfc5424: bool, now: int) -> tuple[np.ndarray, np.ndarray]:
        """The times of ``texts`` and the mask of those that are none (fluentd: invalid time format); RFC 5424's
        second format is tried where the first fails."""
        first, *then = self.times[rfc5424]
        times, bad = first.parse(texts, now)
        for parser in then:
            again = np.flatnonzero(bad)
            if len(again):
                found, still = parser.parse(texts.take(pa.array(again)), now)
                times[again[~still]] = found[~still]
                bad[again[~still]] = False
        return times, bad | ~texts.is_valid().to_numpy(zero_copy_only=False)

    def _columns(self, parts: list[_Part], times: np.ndarray) -> dict[str, pa.Array]:
        """One column per field over all lines (the protocols' parts put back in line order)."""
        order = np.concatenate([rows for rows, _, _ in parts]) if parts else np.zeros(0, np.int64)
        back = None if len(parts) < 2 else pa.array(np.argsort(order, kind="stable"))
        names = (*(("pri",) if self.rules.with_priority else ()), *self.names)
        columns: dict[str, pa.Array] = {"time": pa.array(times, pa.int64())}
        for name in names:
            pieces = [fields.get(name, pa.nulls(len(rows), _type(name))) for rows, fields, _ in parts]
            columns[name] = _joined(pieces, _type(name), back)
        if self.config.keep_time_key:
            columns[KEPT_TIME] = _joined([time for _, _, time in parts], pa.large_string(), back)
        return columns


def _space_count(time_format: str) -> int:
    """Into how many words fluentd cuts a time of ``time_format``: its runs of spaces, plus one."""
    return re.sub(" +", " ", time_format).count(" ") + 1


def _time_parser(config: ParseConfig, time_format: str) -> TimeParser:
    return TimeParser(config.replace(time_format=time_format))


def _type(name: str) -> pa.DataType:
    return pa.int64() if name == "pri" else pa.large_string()


def _texts(values: list[bytes | int | None]) -> pa.Array:
    """Byte strings as text (bytes that are not UTF-8, where fluentd cut a character, written ``\\xHH``)."""
    return pa.array(
        [v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else None for v in values], pa.large_string()
    )


def _joined(pieces: list[pa.Array], kind: pa.DataType, back: pa.Array | None) -> pa.Array:
    """``pieces`` end to end, then in line order (``back``: where each line's value is; None: they are)."""
    if not pieces:
        return pa.nulls(0, kind)
    joined = pa.concat_arrays([p.cast(kind) for p in pieces]) if len(pieces) > 1 else pieces[0].cast(kind)
    return joined if back is None else joined.take(back)
