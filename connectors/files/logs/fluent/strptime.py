"""strptime formats (fluentd's ``time_format``, as Ruby's strptime reads it) over a whole column of texts.

:func:`strptime_regex` translates a format once into one regular
expression with a group per directive; :func:`strptime_ns` runs it over
the column (Arrow's regex engine) and combines the groups with numpy.
See :mod:`.timefmt` for the rules followed.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windvane.ingest.times import NS

from .config import ParseConfigError
from .walltime import LocalZone, from_machine, offsets_at, ruby_local, wall_to_instants
from .zonenames import name_offsets

if TYPE_CHECKING:
    from .strptime_fixed import FixedLayout

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_FULL_MONTHS = "january february march april may june july august september october november december".split()
_MONTH_NAMES = "|".join((*_FULL_MONTHS, *MONTHS))
_DAY_NAMES = "(?:mon|tue|wed|thu|fri|sat|sun)[a-z]*"
_ZONE = r"Z|[+-]\d\d?(?::?\d\d)?"
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
    "s": r"(?P<s>[+-]?\d{1,18})",  # more digits are no time an int64 of ns holds
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


MAX_SECONDS = (2**63 - 1) // NS - 1  # the times an int64 of ns holds
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
        digits = re.match(r"(\d*)", time_format[i + 1 :])
        assert digits is not None  # the pattern matches the empty string
        width, j = digits.group(1), i + 1
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


#: The directives the strptime gem cannot read: for a format with one fluentd falls back to Ruby's Time.strptime.
NOT_IN_GEM = frozenset("aAcCDFIjklLpPrRstTuwZ%")


def gem_reads(time_format: str) -> bool:
    """Whether the strptime gem reads ``time_format`` (else fluentd uses Ruby's ``Time.strptime``)."""
    return not any(name in NOT_IN_GEM for name in re.findall(r"%\d*(.)", time_format))


def zone_offset_seconds(text: str) -> int | None:
    """The offset a fixed zone text means (``+09:00``, ``+0900``, ``-03``, ``Z``, ``UTC``), seconds; None if not one."""
    if text.isalpha():  # Z, UTC, GMT (a time's other zone names: zonenames)
        return 0
    found = re.fullmatch(r"([+-])(\d\d?):?(\d\d)?", text)
    if not found or int(found.group(2)) > 23 or int(found.group(3) or 0) > 59:
        return None
    seconds = int(found.group(2)) * 3600 + int(found.group(3) or 0) * 60
    return -seconds if found.group(1) == "-" else seconds


def strptime_ns(
    texts: pa.Array, regex: str, zone: int | LocalZone, now: int, layout: FixedLayout | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The times of ``texts`` by ``regex`` (a :func:`strptime_regex`), int64 ns UTC, and the mask of those it cannot
    read. ``zone``: of times written without one (see :func:`.walltime.wall_to_instants`); ``now``: ns, for
    missing fields; ``layout``: the format's :func:`.strptime_fixed.fixed_layout`, for the texts it reads."""
    if layout is not None and isinstance(texts, pa.Array) and len(texts):
        rows, numbers = layout.read(pc.cast(texts, pa.large_string()))
        if len(rows):
            times, bad = np.zeros(len(texts), dtype=np.int64), np.ones(len(texts), dtype=bool)
            found = _times(dict(numbers), np.zeros(len(rows), dtype=bool), zone, now)
            times[rows], bad[rows] = found
            rest = np.ones(len(texts), dtype=bool)
            rest[rows] = False
            if rest.any():
                rest_rows = np.flatnonzero(rest)
                times[rest_rows], bad[rest_rows] = strptime_ns(texts.take(pa.array(rest_rows)), regex, zone, now)
            return times, bad
    found = pc.extract_regex(texts, "(?i)" + regex)
    bad = ~found.is_valid().to_numpy(zero_copy_only=False)
    groups = {found.type.field(k).name: found.field(k) for k in range(found.type.num_fields)}
    return _times(groups, bad, zone, now)


def _times(
    groups: dict[str, pa.Array | np.ndarray], bad: np.ndarray, zone: int | LocalZone, now: int
) -> tuple[np.ndarray, np.ndarray]:
    """The times the groups of a format's regex (or their numbers, see :mod:`.strptime_fixed`) write."""
    if isinstance(zone, LocalZone) and "z" not in groups:  # Ruby fills missing fields from the machine's time now
        now += int(offsets_at(np.array([now], dtype=np.int64), zone.machine)[0])
    part = _Parts(groups, bad, now)
    if "s" in groups:
        seconds = part.number("s", 0)
        part.bad |= np.abs(seconds) > MAX_SECONDS  # past int64 ns (milliseconds read as seconds)
        instants = np.where(part.bad, 0, seconds) * NS + part.fraction()
        if "z" in groups or isinstance(zone, int):
            return instants, part.bad
        # Ruby reads %s as a time of the machine's zone: fluentd moves it to timezone/utc like a wall-clock time
        # (by less than a day: times that close to int64's ends would leave it)
        part.bad |= np.abs(seconds) > MAX_SECONDS - 86400
        return np.where(part.bad, 0, from_machine(np.where(part.bad, 0, instants), zone)), part.bad
    wall, bad = part.wall()
    zones = groups.get("z")
    if isinstance(zones, np.ndarray):  # offsets read at fixed places, each possible
        return wall - zones * NS, bad
    if zones is not None:
        return _zoned(wall, bad, pc.fill_null(zones, "Z"), zone)
    return wall_to_instants(wall, zone), bad


def _zoned(wall: np.ndarray, bad: np.ndarray, zones: pa.Array, zone: int | LocalZone) -> tuple[np.ndarray, np.ndarray]:
    """Times written with a zone: less its offset; one with a name Ruby does not know is the machine's local time."""
    offsets, impossible = _offsets(zones)
    instants = wall - offsets * NS
    named = pc.match_substring_regex(zones, "^[A-Za-z]+$").to_numpy(zero_copy_only=False) & ~bad
    if not named.any():
        return instants, bad | impossible
    machine = zone.machine if isinstance(zone, LocalZone) else "UTC"
    years = wall[named].astype("M8[ns]").astype("M8[Y]").astype(np.int64) + 1970
    names = np.array(zones.filter(pa.array(named)).to_pylist(), dtype=object)
    seconds, local = name_offsets(names, years, machine)
    instants[named] = wall[named] - seconds * NS
    rows = np.flatnonzero(named)[local]
    instants[rows] = ruby_local(wall[rows], machine, later=True)  # Time.local
    return instants, bad | impossible


def _offsets(zones: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Seconds east of UTC of each ``%z`` text (each distinct text read once), and the mask of impossible ones
    (``+2400``)."""
    unique = pc.unique(zones)
    offsets = [zone_offset_seconds(z) for z in unique.to_pylist()]
    where = pc.index_in(zones, unique).to_numpy(zero_copy_only=False)
    known = np.array([o is not None for o in offsets], dtype=bool)
    return np.array([o or 0 for o in offsets], dtype=np.int64)[where], ~known[where]


#: The whole years int64 nanoseconds since 1970 hold (1677-09-21 to 2262-04-11).
NS_YEARS = (1678, 2261)
#: (the groups of a field, the group filled from now, where now's text has it): year, month, day, hour, minute, second
_FROM_NOW = (("YyC", "Y", 0), ("mbj", "m", 5), ("dj", "d", 8), ("HIp", "H", 11), ("M", "M", 14), ("S", "S", 17))


class _Parts:
    """The groups a time format's regex found, as numbers, with the mask of texts found bad so far."""

    def __init__(self, groups: dict[str, pa.Array | np.ndarray], bad: np.ndarray, now: int):
        # the rows the regex did not match hold "" in every group: make them null, read as the default
        valid = pa.array(~bad)
        self.groups = {
            k: v if isinstance(v, np.ndarray) else pc.if_else(valid, v, pa.scalar(None, v.type))
            for k, v in groups.items()
        }
        self.bad = bad
        self.now = str(np.datetime64(now, "ns").astype("M8[s]"))  # YYYY-MM-DDTHH:MM:SS

    def number(self, name: str, default: int) -> np.ndarray:
        if name not in self.groups:
            return np.full(len(self.bad), default, dtype=np.int64)
        if isinstance(self.groups[name], np.ndarray):  # read as a number already
            return self.groups[name]
        # a sign is part of the number (%Y reads "+2024"); the cast takes "-" only
        text = pc.replace_substring_regex(pc.fill_null(self.groups[name], str(default)), r"^\+", "")
        values: np.ndarray = pc.cast(text, pa.int64()).to_numpy(zero_copy_only=False)
        return values

    def fraction(self) -> np.ndarray:
        """Nanoseconds of ``%N``/``%L``: the digits as a fraction of a second, kept to nine."""
        if "N" not in self.groups:
            return np.zeros(len(self.bad), dtype=np.int64)
        if isinstance(self.groups["N"], np.ndarray):  # in ns already
            return self.groups["N"]
        digits = pc.utf8_slice_codeunits(pc.fill_null(self.groups["N"], "0"), 0, 9)
        padded = pc.utf8_rpad(digits, 9, "0")
        nanoseconds: np.ndarray = pc.cast(padded, pa.int64()).to_numpy(zero_copy_only=False)
        return nanoseconds

    def wall(self) -> tuple[np.ndarray, np.ndarray]:
        """Wall-clock ns of each text (its fields, the missing ones defaulted), and the bad mask with impossible dates."""
        for fields, name, start in _FROM_NOW:  # as Ruby: the fields before the format's first are now's
            if set(fields) & set(self.groups):
                break
            self.groups[name] = _filled(self.now[start : start + (4 if name == "Y" else 2)], self.bad)
        years = self._year(int(self.now[:4]))
        if isinstance(self.groups.get("b"), np.ndarray):  # month numbers already
            months = self.number("b", 1)
        elif "b" in self.groups:
            names = pc.utf8_slice_codeunits(pc.utf8_lower(pc.fill_null(self.groups["b"], "jan")), 0, 3)
            months = pc.index_in(names, pa.array(MONTHS)).to_numpy(zero_copy_only=False).astype(np.int64) + 1
        else:
            months = self.number("m", 1)
        days, hours = self.number("d", 1), self._hours()
        minutes, seconds = self.number("M", 0), self.number("S", 0)
        bad: np.ndarray = (
            self.bad | (months < 1) | (months > 12) | (hours > 23) | (minutes > 59) | (seconds > 60) | (days > 31)
        )
        bad |= (years < NS_YEARS[0]) | (years > NS_YEARS[1])  # Ruby's Time has them; int64 ns does not
        years = np.where(bad, 1970, years)
        first = (years - 1970).astype("M8[Y]") + np.where(bad, 0, months - 1).astype("m8[M]")
        if "j" in self.groups:
            yday = self.number("j", 1)
            leap = (years % 4 == 0) & ((years % 100 != 0) | (years % 400 == 0))
            bad |= (yday < 1) | (yday > 365 + leap)
            new_year = (years - 1970).astype("M8[Y]").astype("M8[D]")
            date = new_year + np.where(bad, 0, yday - 1).astype("m8[D]")
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
