"""Log timestamps to int64 nanoseconds since the epoch (UTC), a whole column at a time.

Times with a zone (``Z``, ``+02:00``, ``+0200``, ``-0700``) are exact
instants. Times without one (RFC 3164's ``Oct 11 22:14:15``, ISO 8601
without an offset) are wall-clock times of the zone the log was written in,
``--timezone`` (:class:`.options.LogOptions`). A wall-clock time
that occurs twice (the hour repeated when daylight saving time ends) is
read as the first; one that never occurs (the hour skipped when it starts)
as the instant the clock jumped from.
"""

from __future__ import annotations

import os
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import LogFormatError

NS = 1_000_000_000
DAY_NS = 86_400 * NS
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_ZONED = r"(?i)(z|[+-]\d\d(:?\d\d)?)$"


def local_zone() -> str:
    """The IANA name of this machine's time zone (``TZ``, else ``/etc/localtime``'s target), or ``UTC``."""
    name = os.environ.get("TZ", "").lstrip(":")
    if not name:
        target = os.path.realpath("/etc/localtime")
        _, found, name = target.partition("/zoneinfo/")
        name = name if found else "UTC"
    return name


def check_zone(name: str) -> str:
    """``name`` if it is a time zone Arrow knows; LogFormatError naming it otherwise."""
    try:
        pc.assume_timezone(pa.array([0], pa.timestamp("ns")), name)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise LogFormatError(f"unknown time zone {name!r} (expected an IANA name such as "
                             f"'Europe/Paris' or 'UTC'): {exc}") from None
    return name


def wall_to_utc(wall_ns: np.ndarray, zone: str) -> np.ndarray:
    """Wall-clock nanoseconds in ``zone`` (as if it were UTC) to instants, int64 ns UTC."""
    if zone == "UTC" or not len(wall_ns):
        return wall_ns
    naive = pa.array(wall_ns, pa.timestamp("ns"))
    zoned = pc.assume_timezone(naive, zone, ambiguous="earliest", nonexistent="earliest")
    return zoned.cast(pa.int64()).to_numpy()


def iso_to_ns(text: pa.Array, zone: str) -> tuple[np.ndarray, np.ndarray]:
    """ISO 8601 / RFC 3339 strings to int64 ns UTC, and a mask of those that are not such times.

    A string without an offset is a wall-clock time in ``zone``. Bad times
    read as 0 where the mask is set.
    """
    out = np.zeros(len(text), dtype=np.int64)
    bad = np.zeros(len(text), dtype=bool)
    if not len(text):
        return out, bad
    zoned = pc.match_substring_regex(text, _ZONED).to_numpy(zero_copy_only=False)
    for has_zone in (True, False):
        where = np.flatnonzero(zoned == has_zone)
        if not len(where):
            continue
        values, failed = _cast_each(text.take(pa.array(where)), pa.timestamp("ns", "UTC" if has_zone else None))
        if not has_zone:
            values = wall_to_utc(values, zone)
        out[where] = values
        bad[where] = failed
    return out, bad


def _cast_each(text: pa.Array, to: pa.DataType) -> tuple[np.ndarray, np.ndarray]:
    """Cast all of ``text`` at once; if some fail, each alone, to find which."""
    try:
        return text.cast(to).cast(pa.int64()).to_numpy(zero_copy_only=False), np.zeros(len(text), dtype=bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    values = np.zeros(len(text), dtype=np.int64)
    failed = np.zeros(len(text), dtype=bool)
    for i in range(len(text)):
        try:
            values[i] = text[i].cast(to).cast(pa.int64()).as_py()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError):
            failed[i] = True
    return values, failed


def bsd_to_ns(month: pa.Array, day: pa.Array, clock: pa.Array, zone: str, now: int) -> tuple[np.ndarray, np.ndarray]:
    """RFC 3164 times (``Oct``, `` 1``, ``22:14:15``) to int64 ns UTC, and a mask of impossible dates.

    They carry no year: each is taken in the year of ``now`` (ns, UTC) in
    ``zone``, or the year before if that would put it more than a day after
    ``now`` (a December line read in January). The day of slack allows for
    clocks a little ahead and zones east of this one.
    """
    count = len(month)
    months = pc.index_in(month, pa.array(MONTHS)).to_numpy(zero_copy_only=False)
    bad = np.isnan(months) if months.dtype.kind == "f" else np.zeros(count, dtype=bool)
    months = np.where(bad, 0, months).astype(np.int64)
    days = pc.cast(pc.utf8_trim_whitespace(day), pa.int64()).to_numpy(zero_copy_only=False)
    parts = pc.split_pattern(clock, ":")
    hms = [pc.cast(pc.list_element(parts, k), pa.int64()).to_numpy(zero_copy_only=False) for k in range(3)]
    seconds = hms[0] * 3600 + hms[1] * 60 + hms[2]
    bad |= (hms[0] > 23) | (hms[1] > 59) | (hms[2] > 60)
    this_year = pc.year(pa.array([now], pa.timestamp("ns", zone)))[0].as_py()
    out = np.zeros(count, dtype=np.int64)
    pending = np.ones(count, dtype=bool)
    for year in (this_year, this_year - 1):
        first = np.datetime64(f"{year:04d}-01", "M") + months
        length = ((first + 1).astype("M8[D]") - first.astype("M8[D]")).astype(np.int64)
        valid = ~bad & (days >= 1) & (days <= length)
        date = first.astype("M8[D]") + np.where(valid, days - 1, 0)
        wall = date.astype("M8[ns]").astype(np.int64) + seconds * NS
        utc = wall_to_utc(wall, zone)
        take = pending & (utc <= now + DAY_NS) if year == this_year else pending
        out[take] = utc[take]
        bad[take] |= ~valid[take]
        pending &= ~take
    return out, bad

