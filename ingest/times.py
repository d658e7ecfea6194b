"""The one rule by which windvane reads a time: int64 nanoseconds since the Unix epoch, UTC.

Every connector (Forward, HTTP, MQTT, file import, tail) and export's
``--start``/``--stop`` read times through this module. A time is:

- a number since the epoch whose magnitude says its unit: below 1e11
  seconds, below 1e14 milliseconds, below 1e17 microseconds, else
  nanoseconds (seconds up to the year 5138, and JavaScript's
  ``Date.now()``). A float goes through its shortest decimal form, so
  ``1700000000.123456`` is ``...123456000`` ns. Text holding a decimal
  number is that number.
- ISO 8601 text (read by :mod:`arrays.times`, which ``at=`` and
  time-range reads in arrays use too): a date, optionally a time after ``T`` or a space, with
  fractions to the nanosecond and a zone ``Z``, ``+02:00`` or ``+0200``.
  Text without a zone is a wall-clock time in ``zone`` (UTC unless a
  ``--timezone`` says otherwise); a date alone is its midnight.
- a fluentd EventTime (msgpack ext 0, ``>II`` seconds and nanoseconds,
  the nanoseconds below 10**9) or a msgpack Timestamp.

Anything else (booleans, None, other text, times outside the years
1677-2262 that int64 nanoseconds hold) is not a time: the record holding it
is quarantined verbatim with :func:`not_a_time`'s reason, which names the
value.
"""

from __future__ import annotations

import math
import os
import re
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windvane.arrays.times import NS, datetime_ns, iso_ns
from windvane.arrays.times import in_range as _in_range

from .errors import IngestError

__all__ = [
    "NS",
    "NS_PER_UNIT",
    "BadZone",
    "check_zone",
    "epoch_column_ns",
    "event_time_ns",
    "iso_column_ns",
    "iso_text",
    "iso_zoned",
    "local_zone",
    "not_a_time",
    "time_ns",
    "unit_for",
    "wall_to_utc",
]

# (magnitude below which, power of ten to nanoseconds): seconds, milliseconds, microseconds; else nanoseconds.
_UNITS = ((1e11, 9), (1e14, 6), (1e17, 3))
#: Nanoseconds per epoch unit, by the unit's name.
NS_PER_UNIT = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_DECIMAL = re.compile(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?")
# A zone after a time of day (a date's own "-01" is no zone).
_ZONED = r"\d\d:\d\d(:\d\d([.,]\d+)?)?\s*(Z|z|[+-]\d\d(:?\d\d)?)$"


class BadZone(IngestError):
    """A ``--timezone`` is not an IANA time zone name."""


def time_ns(value: Any) -> int | None:
    """Nanoseconds since the epoch for ``value`` by the module's rule (ISO text without a zone: UTC), or None."""
    kind = type(value)
    if kind is int or kind is float or kind is Decimal:
        return _number_ns(value)
    if kind is str:
        text = value.strip()
        if _DECIMAL.fullmatch(text):
            return _number_ns(Decimal(text))
        return iso_ns(text)
    if kind is msgpack.Timestamp:
        return _in_range(value.to_unix_nano())
    if kind is msgpack.ExtType and value.code == 0 and len(value.data) == 8:  # fluentd EventTime
        return event_time_ns(value.data)
    if kind is datetime:
        return datetime_ns(value)
    return None


def _event_time_parts(data: bytes) -> tuple[int, int]:
    """The seconds and nanoseconds of a fluentd EventTime's 8 bytes (``>II``)."""
    return int.from_bytes(data[:4], "big"), int.from_bytes(data[4:8], "big")


def event_time_ns(data: bytes) -> int | None:
    """Nanoseconds since the epoch of a fluentd EventTime's 8 bytes (``>II``: seconds, nanoseconds); None if
    its nanoseconds are 10**9 or more, which no clock gives (:func:`not_a_time` names them)."""
    seconds, nanos = _event_time_parts(data)
    return seconds * NS + nanos if nanos < NS else None


def not_a_time(value: Any) -> str:
    """The quarantine reason of a record whose time ``value`` :func:`time_ns` does not read."""
    if type(value) is msgpack.ExtType and value.code == 0 and len(value.data) == 8:
        seconds, nanos = _event_time_parts(value.data)
        return (
            f"the event time is an EventTime of {seconds} s and {nanos} ns, which is not a time: "
            f"its nanoseconds must be 0 to 999999999"
        )
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return (
        f"the event time {text} is not a time: give epoch seconds, ms, us or ns, ISO 8601 text "
        "(2024-05-01T12:00:00Z) or a fluentd EventTime"
    )


def _number_ns(value: int | float | Decimal) -> int | None:
    if type(value) is float and not math.isfinite(value):
        return None
    if type(value) is Decimal and not value.is_finite():
        return None
    magnitude = -value if value < 0 else value  # abs() of the union types as a bare object
    scale = next((power for limit, power in _UNITS if magnitude < limit), 0)
    if type(value) is int:
        return _in_range(value * 10**scale)
    exact = value if type(value) is Decimal else Decimal(repr(value))
    try:
        return _in_range(int(exact.scaleb(scale).to_integral_value()))
    except (InvalidOperation, OverflowError):
        return None


# ---------------------------------------------------------------- zones


def local_zone() -> str:
    """The IANA name of this machine's time zone (``TZ``, else ``/etc/localtime``'s target), or ``UTC``."""
    name = os.environ.get("TZ", "").lstrip(":")
    if not name:
        target = os.path.realpath("/etc/localtime")
        _, found, name = target.partition("/zoneinfo/")
        name = name if found else "UTC"
    return name


def check_zone(name: str) -> str:
    """``name`` if it is a time zone Arrow knows; :class:`BadZone` naming it otherwise."""
    try:
        pc.assume_timezone(pa.array([0], pa.timestamp("ns")), name)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise BadZone(
            f"unknown time zone {name!r} (expected an IANA name such as 'Europe/Paris' or 'UTC'): {exc}"
        ) from None
    return name


def wall_to_utc(wall_ns: np.ndarray, zone: str) -> np.ndarray:
    """Wall-clock nanoseconds in ``zone`` (as if it were UTC) to instants, int64 ns UTC.

    A wall-clock time that occurs twice (the hour repeated when daylight
    saving time ends) is read as the first; one that never occurs (the hour
    skipped when it starts) as the instant the clock jumped from.
    """
    if zone == "UTC" or not len(wall_ns):
        return wall_ns
    naive = pa.array(wall_ns, pa.timestamp("ns"))
    zoned = pc.assume_timezone(naive, zone, ambiguous="earliest", nonexistent="earliest")
    utc: np.ndarray = zoned.cast(pa.int64()).to_numpy()
    return utc


# ---------------------------------------------------------------- whole columns


def unit_for(first: float) -> str:
    """The epoch unit (``s``, ``ms``, ``us``, ``ns``) the magnitude of a number says, as :func:`time_ns` reads it."""
    power = next((power for limit, power in _UNITS if abs(first) < limit), 0)
    return next(name for name, ns in NS_PER_UNIT.items() if ns == 10**power)


def epoch_column_ns(values: pa.Array, unit: str) -> pa.Array:
    """Epoch numbers in ``unit`` (a name of :data:`NS_PER_UNIT`) to int64 ns; integers are exact, fractional
    numbers rounded to the microsecond (a float64 holds no more of an epoch time). Raises
    ``pa.ArrowInvalid`` on overflow."""
    scale = NS_PER_UNIT[unit]
    if pa.types.is_integer(values.type):
        return pc.multiply_checked(pc.cast(values, pa.int64()), scale)
    micros = pc.round(pc.multiply(pc.cast(values, pa.float64()), scale / 1000))
    return pc.multiply_checked(pc.cast(micros, pa.int64()), 1000)


def iso_text(ns: int) -> str:
    """``ns`` since the epoch as ISO 8601 text in UTC, to the nanosecond, with ``Z``."""
    return str(np.datetime64(ns, "ns")) + "Z"


def iso_column_ns(text: pa.Array, zone: str = "UTC") -> tuple[np.ndarray, np.ndarray]:
    """ISO 8601 strings to int64 ns UTC, and a mask of those that are not such times (or null).

    The column form of :func:`time_ns` for text: a string without an
    offset is a wall-clock time in ``zone``. Bad times read as 0 where the
    mask is set.
    """
    out = np.zeros(len(text), dtype=np.int64)
    bad = np.zeros(len(text), dtype=bool)
    if not len(text):
        return out, bad
    text = pc.utf8_trim_whitespace(text)
    # Zones written +0200 need the +02:00 form Arrow parses.
    text = pc.replace_substring_regex(text, r"(\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?\s*[+-]\d\d)(\d\d)$", r"\1:\2")
    zoned = iso_zoned(text)
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


def iso_zoned(text: pa.Array) -> np.ndarray:
    """Which of the ISO 8601 strings ``text`` (white space around them trimmed) are written with a zone; null: none."""
    zoned: np.ndarray = pc.fill_null(pc.match_substring_regex(text, _ZONED), False).to_numpy(zero_copy_only=False)
    return zoned


def _cast_each(text: pa.Array, to: pa.DataType) -> tuple[np.ndarray, np.ndarray]:
    """Cast all of ``text`` at once; if some fail, each alone, to find which. Nulls fail."""
    try:
        cast = text.cast(to).cast(pa.int64())
        return cast.fill_null(0).to_numpy(zero_copy_only=False), cast.is_null().to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    values = np.zeros(len(text), dtype=np.int64)
    failed = np.zeros(len(text), dtype=bool)
    for i in range(len(text)):
        try:
            got = text[i].cast(to).cast(pa.int64()).as_py()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError):
            got = None
        if got is None:
            failed[i] = True
        else:
            values[i] = got
    return values, failed


#: A duration: a number and a unit (seconds, minutes, hours, days, weeks).
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration_seconds(text: str, *, unit_required: bool = True) -> float | None:
    """Seconds of a duration written ``90d``, ``12h``, ``30m``, ``2w``, ``45s`` (a bare number: seconds,
    where ``unit_required`` is false); None if ``text`` is not one."""
    found = _DURATION.match(text)
    if not found or (unit_required and not found.group(2)):
        return None
    return float(found.group(1)) * _UNIT_SECONDS.get(found.group(2), 1)
