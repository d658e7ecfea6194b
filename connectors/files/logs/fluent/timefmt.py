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
- ``%z`` reads ``+0900``, ``+09:00``, ``+09``, ``Z`` (``%Z`` also a name: UTC); ``%b``/``%B`` a month
  name (either length, any case); ``%s`` seconds since the epoch;
- a time written with a zone (``%z``, ``%Z``, ``%s``) keeps it; one without is
  a wall-clock time of ``timezone`` (an IANA name or ``+09:00``), else UTC
  when ``utc`` is true or ``localtime`` false, else this machine's zone;
- a day past the month's end (up to 31) rolls over into the next month
  (``2020-02-30`` is March 1st), as Ruby's Time does;
- fields the format lacks default to the current year, January, the 1st, 00:00:00; a
  format without any date field means today (UTC);
- a directive with a width (``%3N``) matches nothing: Ruby's strptime has none.

Without ``time_format`` fluentd uses Ruby's ``Time.parse``; here the text
is read by windvane's ISO 8601 rule (:func:`ingest.times.iso_column_ns`) in
the machine's zone, which covers the forms logs write. ``%iso8601`` is
read the same way. ``time_type unixtime`` is Ruby's ``to_i`` of the text
(seconds), ``float`` seconds with up to nine decimals; ``mixed`` tries
``time_format`` then each of ``time_format_fallbacks`` (which may be
``unixtime`` or ``float``, both read as float as fluentd 1.14 does, tried on
numbers only) until one reads the text.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windvane.ingest.times import NS, check_zone, iso_column_ns, local_zone

from .config import ParseConfig
from .rubynum import ruby_to_i
from .strptime import strptime_ns, strptime_regex, zone_offset_seconds

#: What Ruby's Time.parse reads beside ISO 8601 (fluentd without time_format), as strptime formats of whole texts.
FALLBACKS = (
    "%Y-%m-%d %H:%M:%S.%N %z",
    "%Y-%m-%d %H:%M:%S %z",
    "%a %b %d %H:%M:%S.%N %Y",
    "%a %b %d %H:%M:%S %Y",
    "%b %d %H:%M:%S.%N %Y",
    "%b %d %H:%M:%S %Y",
    "%d %b %Y %H:%M:%S %z",
)


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

    def parse(self, texts: pa.Array, now: int) -> tuple[np.ndarray, np.ndarray]:
        """The times of ``texts`` (strings; a null is not a time), and the mask of those fluentd would refuse."""
        texts = pc.cast(texts, pa.large_string())
        if self.time_type == "unixtime":
            seconds, _ = ruby_to_i(texts)
            return seconds * NS, np.zeros(len(texts), dtype=bool)
        if self.time_type == "float":
            return _float_seconds(texts)
        if self.time_type == "mixed":
            return self._mixed(texts, now)
        if self.regex is None:
            return self._default(texts, now)
        return strptime_ns(texts, self.regex, self.zone, now)

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
        """No time_format: ISO 8601, else the other forms Ruby's Time.parse reads that logs write (FALLBACKS)."""
        times, bad = iso_column_ns(pc.fill_null(texts, ""), self.zone if isinstance(self.zone, str) else "UTC")
        for time_format in FALLBACKS if self.format is None and bad.any() else ():
            rows = np.flatnonzero(bad)
            whole = strptime_regex(time_format) + "$"  # the whole text, as Time.parse reads it
            _fill(times, bad, rows, strptime_ns(texts.take(pa.array(rows)), whole, self.zone, now))
        return times, bad


def _fill(times: np.ndarray, bad: np.ndarray, rows: np.ndarray, found: tuple[np.ndarray, np.ndarray]) -> None:
    """Put the times ``found`` for ``rows`` that were read into ``times``; they are no longer bad."""
    again, still = found
    times[rows[~still]] = again[~still]
    bad[rows[~still]] = False


_FLOAT = r"^\s*[+-]?\d+(?:_\d+)*(?:\.\d+(?:_\d+)*)?(?:[eE][+-]?\d+)?\s*$"  # what Ruby's Float() reads


def _fallback(config: ParseConfig, time_format: str) -> TimeParser:
    """The parser of one of ``time_type mixed``'s formats (``unixtime``, ``float`` or a strptime format)."""
    if time_format in ("unixtime", "float"):
        # fluentd 1.14 tells its numeric parsers apart by the symbol :unixtime, and the fallback is the text
        # "unixtime": both read as float
        return TimeParser(config.replace(time_type="float", time_format=None, timezone=None, utc=False))
    return TimeParser(config.replace(time_type="string", time_format=time_format))


def _wall_zone(config: ParseConfig) -> str | int:
    """The zone of wall-clock times: an IANA name, or a fixed offset in seconds."""
    if config.timezone:
        offset = zone_offset_seconds(config.timezone)
        return offset if offset is not None else check_zone(config.timezone)
    if config.utc or not config.localtime:
        return 0
    return local_zone()


def _float_seconds(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """fluentd's ``time_type float``: the text before the first ``.`` as to_i seconds, the next ten characters as
    to_i nanoseconds (shorter ones padded to nine digits)."""
    seconds, nanos = [], []
    for text in pc.fill_null(texts, "").to_pylist():
        whole, _, rest = text.partition(".")
        rest = rest.split(".", 1)[0][:10] if _ else "0"
        rest = rest + "0" * (9 - len(rest))
        seconds.append(whole)
        nanos.append(rest)
    sec, _ = ruby_to_i(pa.array(seconds, pa.large_string()))
    nsec, _ = ruby_to_i(pa.array(nanos, pa.large_string()))
    return sec * NS + nsec, np.zeros(len(sec), dtype=bool)
