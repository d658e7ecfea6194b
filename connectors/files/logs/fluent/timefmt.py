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

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windvane.ingest.times import NS, check_zone, iso_column_ns, local_zone, wall_to_utc

from .config import ParseConfig, ParseConfigError

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH_NAMES = "|".join(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october"]
    + ["november", "december", *MONTHS]
)
_DAY_NAMES = "(?:mon|tue|wed|thu|fri|sat|sun)[a-z]*"
_ZONE = r"Z|[+-]\d\d(?::?\d\d)?"
_COMPOSITE = {
    "T": "%H:%M:%S",
    "D": "%m/%d/%y",
    "F": "%Y-%m-%d",
    "R": "%H:%M",
    "r": "%I:%M:%S %p",
    "c": "%a %b %e %H:%M:%S %Y",
}
_DIRECTIVE = {
    "Y": r"(?P<Y>[+-]?\d{4})",
    "C": r"(?P<C>\d{1,2})",
    "y": r"(?P<y>\d{1,2})",
    "m": r"(?P<m>\d{1,2})",
    "d": r"\s?(?P<d>\d{1,2})",
    "e": r"\s?(?P<d>\d{1,2})",
    "j": r"(?P<j>\d{1,3})",
    "H": r"\s?(?P<H>\d{1,2})",
    "k": r"\s?(?P<H>\d{1,2})",
    "I": r"\s?(?P<I>\d{1,2})",
    "l": r"\s?(?P<I>\d{1,2})",
    "M": r"(?P<M>\d{1,2})",
    "S": r"(?P<S>\d{1,2})",
    "N": r"(?P<N>\d+)",
    "L": r"(?P<N>\d+)",
    "z": rf"(?P<z>{_ZONE})",
    "Z": rf"(?P<z>{_ZONE}|[A-Za-z]+)",
    "s": r"(?P<s>[+-]?\d+)",
    "b": rf"(?P<b>{_MONTH_NAMES})",
    "h": rf"(?P<b>{_MONTH_NAMES})",
    "B": rf"(?P<b>{_MONTH_NAMES})",
    "a": _DAY_NAMES,
    "A": _DAY_NAMES,
    "u": r"\d",
    "w": r"\d",
    "p": r"(?P<p>[ap]\.?m\.?)",
    "P": r"(?P<p>[ap]\.?m\.?)",
    "n": r"\s+",
    "t": r"\s+",
    "%": "%",
}


NEVER = "^$NEVER"  # a regex no time text matches (RE2 has no (?!))


def strptime_regex(time_format: str) -> str:
    """``time_format`` as a regular expression (case-insensitive), one named group per directive; ParseConfigError if
    a directive is unknown or repeated."""
    for short, long in _COMPOSITE.items():
        time_format = time_format.replace("%" + short, long)
    out, seen, i = ["^"], set(), 0
    while i < len(time_format):
        char = time_format[i]
        if char != "%":
            out.append(r"\s*" if char.isspace() else re.escape(char))
            i += 1
            continue
        width, j = re.match(r"(\d*)", time_format[i + 1 :]).group(1), i + 1
        j += len(width)
        name = time_format[j : j + 1]
        if name not in _DIRECTIVE:
            raise ParseConfigError(f"time_format {time_format!r}: unknown directive %{width}{name}")
        pattern = _DIRECTIVE[name]
        if width:  # Ruby's strptime has no widths: %3N matches nothing, every value is "invalid time format"
            return NEVER
        group = re.search(r"\?P<(\w+)>", pattern)
        if group and group.group(1) in seen:
            raise ParseConfigError(f"time_format {time_format!r}: %{name} given twice")
        seen.add(group.group(1) if group else name)
        out.append(pattern)
        i = j + 1
    return "".join(out)


def zone_offset_seconds(text: str) -> int | None:
    """The offset a fixed zone text means (``+09:00``, ``+0900``, ``-03``, ``Z``, ``UTC``), seconds; None if not one."""
    if text.isalpha():  # Z, UTC, GMT; fluentd (Ruby's strptime) reads other zone names as UTC too
        return 0
    found = re.fullmatch(r"([+-])(\d\d):?(\d\d)?", text)
    if not found:
        return None
    seconds = int(found.group(2)) * 3600 + int(found.group(3) or 0) * 60
    return -seconds if found.group(1) == "-" else seconds


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

    def __init__(self, config: ParseConfig, time_format: str | None = None, time_type: str | None = None):
        self.time_type = time_type or config.time_type
        self.format = time_format if time_format is not None else config.time_format
        self.zone = _wall_zone(config)
        self.regex = None
        self.mixed: list[TimeParser] = []
        if self.time_type == "mixed":
            self.mixed = [_fallback(config, f) for f in (self.format, *config.time_format_fallbacks) if f is not None]
        elif self.time_type == "string" and self.format not in (None, "%iso8601"):
            self.regex = strptime_regex(self.format)
            re.compile(self.regex)

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
        return self._strptime(texts, now)

    def _mixed(self, texts: pa.Array, now: int) -> tuple[np.ndarray, np.ndarray]:
        """``time_type mixed``: each of time_format and time_format_fallbacks in turn on the texts still not read
        (unixtime and float only on texts that are numbers)."""
        times = np.zeros(len(texts), dtype=np.int64)
        bad = np.ones(len(texts), dtype=bool)
        number = pc.match_substring_regex(pc.fill_null(texts, ""), _FLOAT).to_numpy(zero_copy_only=False)
        for parser in self.mixed:
            rows = np.flatnonzero(bad & number if parser.time_type != "string" else bad)
            if len(rows):
                again, still = parser.parse(texts.take(pa.array(rows)), now)
                times[rows[~still]] = again[~still]
                bad[rows[~still]] = False
        return times, bad

    def _default(self, texts: pa.Array, now: int) -> tuple[np.ndarray, np.ndarray]:
        """No time_format: ISO 8601, else the other forms Ruby's Time.parse reads that logs write (FALLBACKS)."""
        times, bad = iso_column_ns(pc.fill_null(texts, ""), self.zone if isinstance(self.zone, str) else "UTC")
        for time_format in FALLBACKS if self.format is None and bad.any() else ():
            rows = np.flatnonzero(bad)
            again, still = self._with_format(time_format)._strptime(texts.take(pa.array(rows)), now)
            times[rows[~still]] = again[~still]
            bad[rows[~still]] = False
        return times, bad

    def _with_format(self, time_format: str) -> TimeParser:
        other = TimeParser.__new__(TimeParser)
        other.time_type, other.format, other.zone = "string", time_format, self.zone
        other.regex = strptime_regex(time_format) + "$"  # the whole text, as Time.parse reads it
        return other

    def _strptime(self, texts: pa.Array, now: int) -> tuple[np.ndarray, np.ndarray]:
        found = pc.extract_regex(texts, "(?i)" + self.regex)
        bad = ~found.is_valid().to_numpy(zero_copy_only=False)
        groups = {found.type.field(k).name: found.field(k) for k in range(found.type.num_fields)}
        part = _Parts(groups, bad, now)
        if "s" in groups:
            return part.number("s", 0) * NS + part.fraction(), part.bad
        wall, bad = part.wall()
        if "z" in groups:
            offsets = _offsets(pc.fill_null(groups["z"], "Z"))
            return wall - offsets * NS, bad
        return _wall_utc(wall, self.zone), bad


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


def _wall_utc(wall: np.ndarray, zone: str | int) -> np.ndarray:
    return wall - zone * NS if isinstance(zone, int) else wall_to_utc(wall, zone)


def _offsets(zones: pa.Array) -> np.ndarray:
    """Seconds east of UTC of each ``%z`` text (each distinct text read once)."""
    unique = pc.unique(zones)
    offsets = np.array([zone_offset_seconds(z) or 0 for z in unique.to_pylist()], dtype=np.int64)
    return offsets[pc.index_in(zones, unique).to_numpy(zero_copy_only=False)]


class _Parts:
    """The groups a time format's regex found, as numbers, with the mask of texts found bad so far."""

    def __init__(self, groups: dict[str, pa.Array], bad: np.ndarray, now: int):
        # the rows the regex did not match hold "" in every group: make them null, read as the default
        valid = pa.array(~bad)
        self.groups = {k: pc.if_else(valid, v, pa.scalar(None, v.type)) for k, v in groups.items()}
        self.bad = bad
        self.today = np.datetime64(now, "ns").astype("M8[D]")

    def number(self, name: str, default: int) -> np.ndarray:
        if name not in self.groups:
            return np.full(len(self.bad), default, dtype=np.int64)
        values = pc.cast(pc.fill_null(self.groups[name], str(default)), pa.int64())
        return values.to_numpy(zero_copy_only=False)

    def fraction(self) -> np.ndarray:
        """Nanoseconds of ``%N``/``%L``: the digits as a fraction of a second, kept to nine."""
        if "N" not in self.groups:
            return np.zeros(len(self.bad), dtype=np.int64)
        digits = pc.utf8_slice_codeunits(pc.fill_null(self.groups["N"], "0"), 0, 9)
        padded = pc.utf8_rpad(digits, 9, "0")
        return pc.cast(padded, pa.int64()).to_numpy(zero_copy_only=False)

    def wall(self) -> tuple[np.ndarray, np.ndarray]:
        """Wall-clock ns of each text (its fields, the missing ones defaulted), and the bad mask with impossible dates."""
        if not set(self.groups) & set("YymbdjC"):  # no date at all: today's
            self.groups.update(Y=_filled(str(self.today)[:4], self.bad), m=_filled(str(self.today)[5:7], self.bad))
            self.groups["d"] = _filled(str(self.today)[8:10], self.bad)
        years = self._year(int(str(self.today)[:4]))
        if "b" in self.groups:
            names = pc.utf8_slice_codeunits(pc.utf8_lower(pc.fill_null(self.groups["b"], "jan")), 0, 3)
            months = pc.index_in(names, pa.array(MONTHS)).to_numpy(zero_copy_only=False).astype(np.int64) + 1
        else:
            months = self.number("m", 1)
        days, hours = self.number("d", 1), self._hours()
        minutes, seconds = self.number("M", 0), self.number("S", 0)
        bad = self.bad | (months < 1) | (months > 12) | (hours > 23) | (minutes > 59) | (seconds > 60) | (days > 31)
        first = (years - 1970).astype("M8[Y]") + np.where(bad, 0, months - 1).astype("m8[M]")
        if "j" in self.groups:
            yday = self.number("j", 1)
            leap = (years % 4 == 0) & ((years % 100 != 0) | (years % 400 == 0))
            bad |= (yday < 1) | (yday > 365 + leap)
            start = (years - 1970).astype("M8[Y]").astype("M8[D]")
            date = start + np.where(bad, 0, yday - 1).astype("m8[D]")
        else:
            bad |= days < 1
            date = first.astype("M8[D]") + np.where(bad, 0, days - 1).astype("m8[D]")
        clock = (hours * 3600 + minutes * 60 + seconds) * NS + self.fraction()
        return date.astype("M8[ns]").astype(np.int64) + clock, bad

    def _year(self, year: int) -> np.ndarray:
        if "Y" in self.groups:
            return self.number("Y", year)
        if "y" in self.groups:
            short = self.number("y", year % 100)
            century = self.number("C", -1)
            return np.where(century >= 0, century * 100 + short, np.where(short < 69, 2000 + short, 1900 + short))
        return np.full(len(self.bad), year, dtype=np.int64)

    def _hours(self) -> np.ndarray:
        if "I" not in self.groups:
            return self.number("H", 0)
        hours = self.number("I", 12)
        self.bad |= (hours < 1) | (hours > 12)
        if "p" not in self.groups:
            return hours % 12
        pm = pc.starts_with(pc.utf8_lower(pc.fill_null(self.groups["p"], "a")), "p").to_numpy(zero_copy_only=False)
        return hours % 12 + np.where(pm, 12, 0)


def _filled(text: str, bad: np.ndarray) -> pa.Array:
    return pa.array(np.full(len(bad), text, dtype=object), pa.large_string())


_TO_I = r"^\s*(?P<n>[+-]?\d+(?:_\d+)*)"
_TO_F = r"^\s*(?P<n>[+-]?(?:\d+(?:_\d+)*)?(?:\.\d+(?:_\d+)*)?(?:[eE][+-]?\d+)?)"


def leading(texts: pa.Array, pattern: str) -> pa.Array:
    """Group ``n`` of ``pattern`` in each text; null where it does not match."""
    found = pc.extract_regex(pc.fill_null(texts, ""), pattern)
    return pc.if_else(found.is_valid(), found.field("n"), pa.scalar(None, pa.large_string()))


def ruby_to_i(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Ruby's ``String#to_i`` of each text (leading blanks, a sign, digits with single ``_``; else 0), and a mask of
    values past int64 (given 0)."""
    digits = pc.replace_substring_regex(pc.replace_substring(leading(texts, _TO_I), "_", ""), r"^\+", "")
    digits = pc.fill_null(digits, "0")
    wide = pc.greater(pc.utf8_length(pc.utf8_ltrim(digits, "+-")), 18).to_numpy(zero_copy_only=False)
    values = [int(v) if w else 0 for v, w in zip(digits.to_pylist(), wide)] if wide.any() else None
    out = pc.cast(pc.if_else(pa.array(wide), "0", digits), pa.int64()).to_numpy(zero_copy_only=False).copy()
    over = np.zeros(len(out), dtype=bool)
    if values is not None:
        for i in np.flatnonzero(wide).tolist():
            if -(2**63) <= values[i] < 2**63:
                out[i] = values[i]
            else:
                over[i] = True
    return out, over


def ruby_to_f(texts: pa.Array) -> np.ndarray:
    """Ruby's ``String#to_f`` of each text (the longest leading decimal number; else 0.0)."""
    number = pc.replace_substring(pc.fill_null(leading(texts, _TO_F), ""), "_", "")
    values = []
    for text in number.to_pylist():
        while text and text[-1] in "eE+-.":  # "1e", "1." read as far as they are a number
            text = text[:-1]
        try:
            values.append(float(text) if text and text not in "+-" else 0.0)
        except ValueError:
            values.append(float(re.match(r"[+-]?\d*\.?\d*", text).group() or 0))
    return np.array(values, dtype=np.float64)


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
