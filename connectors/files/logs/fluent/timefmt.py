"""fluentd's time parsing (``time_type``, ``time_format``, ``timezone``, ``localtime``, ``utc``), a column at a time.

:class:`TimeParser` turns a column of time texts into int64 ns UTC and a
mask of the values fluentd could not parse (its ``invalid time format``).
``time_format`` is strptime's: it is translated once into one regular
expression (a group per directive) run over the whole column, and the
groups are combined with numpy. As fluentd (Ruby's strptime) does:

- the text must match from its start; what follows the format is ignored;
- a space in the format matches any run of white space (or none);
- ``%N`` and ``%L`` read every digit that follows as the fraction (kept to
  the nanosecond);
- ``%z`` reads ``+0900``, ``+09:00``, ``+09``, ``Z`` (``%Z`` also a name,
  read as Ruby does: :mod:`.zonenames`); ``%b``/``%B`` a month name (either
  length, any case); ``%s`` seconds since the epoch;
- a time written with a zone (``%z``, ``%Z``) keeps it; one without is read in
  this machine's zone (a time the daylight-saving change skips or repeats as
  fluentd's Ruby reads it) and, if ``timezone`` (an IANA name or ``+09:00``),
  ``utc`` or ``localtime false`` says so, its wall clock moved to that zone
  (UTC for the last two): a time in the machine's gap comes out an hour later.
  ``%s`` too is a machine-zone time moved so (:mod:`.walltime`);
- a day past the month's end (up to 31) rolls over into the next month
  (``2020-02-30`` is March 1st), as Ruby's Time does;
- fields the format lacks before its first one are the machine's local time
  now (``%H:%M`` is today, ``%d`` this month), the ones after it January, the
  1st, 00:00:00 (with ``%z`` in the format, now is UTC's: the strptime gem
  would take the text's offset); a format without a year the strptime gem
  reads (syslog's ``%b %d %H:%M:%S``) carries now's offset and daylight
  saving (:func:`.walltime.gem_without_year`);
- a directive with a width (``%3N``) matches nothing: Ruby's strptime has none.

Without ``time_format`` fluentd uses Ruby's ``Time.parse``; windvane reads
the forms of :data:`FALLBACKS` (each the whole text; ``GMT`` and ``UTC`` read
as ``+0000``): ISO 8601 (``T`` or a space between date and time, ``-`` or
``/`` in the date, fractions, ``Z``/``+09:00``/``+0900``/``+09``), RFC 2822
(``Fri, 01 Mar 2024 12:00:00 GMT``), ``date``/ctime (``Fri Mar 1 12:00:00
UTC 2024``), a date alone (midnight). Times without a zone are the machine's
local time (:mod:`.walltime`). Not covered, though ``Time.parse`` reads them:
zone names but GMT/UTC/Z (``EST``, ``CET``; rejected here), text around the
time (``Time.parse`` picks a time out of a sentence), two-digit years, dates
without a year or a time without a date (today's), ordinal and week dates,
``,`` as the decimal mark. ``%iso8601`` is read by windvane's ISO 8601 rule
(:func:`ingest.times.iso_column_ns`), a time without a zone in the machine's
whatever ``timezone`` and ``utc`` say (Ruby's ``Time.iso8601``). ``time_type
unixtime`` is Ruby's ``to_i`` of the text (seconds), ``float`` seconds with up
to nine decimals; ``mixed`` tries ``time_format`` then each of ``time_format_fallbacks`` (which may be
``unixtime`` or ``float``, both read as float as fluentd 1.14 does, tried on
numbers only) until one reads the text.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windvane.ingest.times import NS, check_zone, iso_column_ns, iso_zoned, local_zone

from .config import ParseConfig
from .rubynum import ruby_to_i
from .strptime import gem_reads, strptime_ns, strptime_regex, zone_offset_seconds
from .strptime_fixed import fixed_layout
from .walltime import LocalZone, gem_without_year, ruby_local

_CLOCKS = ("%H:%M:%S.%N", "%H:%M:%S", "%H:%M")
_DAYS = ("%Y-%m-%dT", "%Y-%m-%d%n", "%Y/%m/%d%n", "%Y/%m/%dT")  # %n: at least one space
_RFC2822 = ("%a, %d %b %Y %H:%M:%S", "%a, %d %b %Y %H:%M", "%d %b %Y %H:%M:%S", "%d %b %Y %H:%M")
_CTIME = ("%a %b %d %H:%M:%S.%N", "%a %b %d %H:%M:%S", "%b %d %H:%M:%S.%N", "%b %d %H:%M:%S")
#: The forms of Ruby's Time.parse (fluentd without time_format) windvane reads, as strptime formats of whole texts
#: (GMT and UTC written +0000 first; see the module).
FALLBACKS = (
    *(day + clock + zone for day in _DAYS for clock in _CLOCKS for zone in (" %z", "")),
    *(form + zone for form in _RFC2822 for zone in (" %z", "")),
    *(form + zone + " %Y" for form in _CTIME for zone in (" %z", "")),
    "%Y-%m-%d",
    "%Y/%m/%d",
)
_NAMED_UTC = r"(?i)\b(?:GMT|UTC)\b"  # the zone names Time.parse reads as +00:00 that windvane reads too


class TimeParser:
    """``parse(texts, now)`` -> (int64 ns UTC, mask of texts that are not a time), as fluentd's time options say."""

    def __init__(self, config: ParseConfig):
        self.config = config
        self.time_type = config.time_type
        self.format = config.time_format
        self.zone = _wall_zone(config)
        self.regex: str | None = None
        self.mixed: list[TimeParser] = []
        if self.time_type == "mixed":
            self.mixed = [_fallback(config, f) for f in (self.format, *config.time_format_fallbacks) if f is not None]
        elif self.time_type == "string" and self.format not in (None, "%iso8601"):
            self.regex = strptime_regex(self.format)
        self.layout = fixed_layout(self.format) if self.regex is not None and self.format else None
        #: the strptime gem reads a format without a year (and zone) from the machine's time now (see walltime)
        self.now_fills = (
            self.regex is not None and gem_reads(self.format or "") and not _DATED.search(self.format or "")
        )

    def parse(self, texts: pa.Array, now: int) -> tuple[np.ndarray, np.ndarray]:
        """The times of ``texts`` (strings; a null is not a time), and the mask of those fluentd would refuse."""
        texts = pc.cast(texts, pa.large_string())
        if self.time_type == "unixtime":
            seconds, over = ruby_to_i(texts)
            return _ns(seconds, np.zeros(len(seconds), dtype=np.int64), over)
        if self.time_type == "float":
            return _float_seconds(texts)
        if self.time_type == "mixed":
            return self._mixed(texts, now)
        if self.regex is None:
            return self._default(texts, now)
        zone = gem_without_year(self.zone, now) if self.now_fills else self.zone
        return strptime_ns(texts, self.regex, zone, now, self.layout)

    def _mixed(self, texts: pa.Array, now: int) -> tuple[np.ndarray, np.ndarray]:
        """``time_type mixed``: each of time_format and time_format_fallbacks in turn on the texts still not read
        (unixtime and float only on texts that are numbers)."""
        times = np.zeros(len(texts), dtype=np.int64)
        bad = np.ones(len(texts), dtype=bool)
        number = pc.match_substring_regex(pc.fill_null(texts, ""), _FLOAT).to_numpy(zero_copy_only=False)
        for parser in self.mixed:
            rows = np.flatnonzero(bad & number if parser.time_type != "string" else bad)
            if len(rows):
                _fill(times, bad, rows, parser.parse(texts.take(pa.array(rows)), now))
        return times, bad

    def _default(self, texts: pa.Array, now: int) -> tuple[np.ndarray, np.ndarray]:
        """No time_format: the forms of Ruby's Time.parse in FALLBACKS; ``%iso8601``: ISO 8601."""
        texts = pc.utf8_trim_whitespace(pc.fill_null(texts, ""))
        if self.format is not None:
            # Ruby's Time.iso8601: a time without a zone is the machine's (Time.local), timezone and utc unused
            times, bad = iso_column_ns(texts, "UTC")
            local = np.flatnonzero(~iso_zoned(texts) & ~bad)
            times[local] = ruby_local(times[local], self.zone.machine, later=True)
            return times, bad
        texts = pc.replace_substring_regex(texts, _NAMED_UTC, "+0000")
        zone = dataclasses.replace(self.zone, later=True)
        times = np.zeros(len(texts), dtype=np.int64)
        bad = np.ones(len(texts), dtype=bool)
        for time_format in FALLBACKS:
            rows = np.flatnonzero(bad)
            if not len(rows):
                break
            whole = strptime_regex(time_format) + "$"  # the whole text
            _fill(times, bad, rows, strptime_ns(texts.take(pa.array(rows)), whole, zone, now))
        return times, bad


def _fill(times: np.ndarray, bad: np.ndarray, rows: np.ndarray, found: tuple[np.ndarray, np.ndarray]) -> None:
    """Put the times ``found`` for ``rows`` that were read into ``times``; they are no longer bad."""
    again, still = found
    times[rows[~still]] = again[~still]
    bad[rows[~still]] = False


_DATED = re.compile(r"%[YyzZ]")  # a year, or a zone (the gem then fills from UTC or that offset, not local time)
_FLOAT = r"^\s*[+-]?\d+(?:_\d+)*(?:\.\d+(?:_\d+)*)?(?:[eE][+-]?\d+)?\s*$"  # what Ruby's Float() reads


def _fallback(config: ParseConfig, time_format: str) -> TimeParser:
    """The parser of one of ``time_type mixed``'s formats (``unixtime``, ``float`` or a strptime format)."""
    if time_format in ("unixtime", "float"):
        # fluentd 1.14 tells its numeric parsers apart by the symbol :unixtime, and the fallback is the text
        # "unixtime": both read as float
        return TimeParser(config.replace(time_type="float", time_format=None, timezone=None, utc=False))
    return TimeParser(config.replace(time_type="string", time_format=time_format))


def _wall_zone(config: ParseConfig) -> LocalZone:
    """The zone of wall-clock times: the machine's, moved to timezone (a name or an offset) or to UTC (utc,
    localtime false), as fluentd reads them (see walltime)."""
    # a repeated local time: the earlier with the strptime gem and localtime, the later otherwise (see walltime)
    later = config.time_format is not None and not gem_reads(config.time_format)
    if config.timezone:
        offset = zone_offset_seconds(config.timezone)
        if offset is not None:
            return LocalZone(local_zone(), None, later, offset)
        return LocalZone(local_zone(), check_zone(config.timezone), True)
    if config.utc or not config.localtime:
        return LocalZone(local_zone(), None, later, 0)
    return LocalZone(local_zone(), None, later)


def _float_seconds(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """fluentd's ``time_type float``: the text before the first ``.`` as to_i seconds, the next ten characters (to
    a second ``.``) as to_i nanoseconds (shorter ones padded to nine digits)."""
    parts = pc.extract_regex(pc.fill_null(texts, ""), r"^(?P<whole>[^.]*)(?:\.(?P<rest>[^.]*))?")
    rest = pc.utf8_rpad(pc.utf8_slice_codeunits(parts.field("rest"), 0, 10), 9, "0")
    sec, over = ruby_to_i(parts.field("whole"))
    nsec, _ = ruby_to_i(rest)
    return _ns(sec, nsec, over)


#: The seconds since 1970 int64 nanoseconds hold, whole.
_NS_SECONDS = (-(2**63) // NS + 1, (2**63 - 1) // NS - 1)


def _ns(seconds: np.ndarray, nanoseconds: np.ndarray, over: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seconds and nanoseconds as int64 ns, and the mask of times it cannot hold (fluentd keeps them in a Ruby
    Time; a row's time is int64 ns): those are refused, never wrapped around."""
    bad = over | (seconds < _NS_SECONDS[0]) | (seconds > _NS_SECONDS[1])
    safe = np.where(bad, 0, seconds)
    return np.where(bad, 0, safe * NS + np.where(bad, 0, nanoseconds)), bad
