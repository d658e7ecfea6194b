"""Times as streams hold them: int64 nanoseconds since the Unix epoch, UTC, and the moments that name them.

This is the lower half of windvane's one time rule (:mod:`ingest.times`
holds the rest and is what connectors and the command line use): reading
ISO 8601 text and datetimes to nanoseconds. It lives in arrays because
``at=`` and time-range reads (``Stream.to_pandas(start=..., stop=...)``)
take them and arrays imports nothing above it; ingest reads ISO text
through it, so the two never differ.

ISO 8601 text: a date, optionally a time after ``T`` or a space, with
fractions to the nanosecond and a zone ``Z``, ``+02:00`` or ``+0200``; no
zone means UTC, a date alone is its midnight. Naive datetimes are UTC too.
"""

from __future__ import annotations

import re
from calendar import timegm
from datetime import UTC, datetime
from typing import Any

import numpy as np

from .errors import TimeError

__all__ = ["NO_TIME", "datetime_ns", "in_range", "iso_ns", "moment_ns"]

NS = 1_000_000_000
_INT64_MAX = (1 << 63) - 1
#: The time of a row that has none (numpy's NaT; ingest stores it for records whose time was unreadable).
NO_TIME = -(1 << 63)
_ISO = re.compile(r"(\d{4}-\d\d-\d\d)(?:[T ](\d\d:\d\d(?::\d\d)?)(?:[.,](\d{1,9}))?)?\s*(Z|z|[+-]\d\d(?::?\d\d)?)?")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def in_range(ns: int) -> int | None:
    """``ns`` if int64 nanoseconds hold it as a time (the years 1677-2262), else None."""
    return ns if -_INT64_MAX <= ns <= _INT64_MAX else None


def iso_ns(text: str) -> int | None:
    """Nanoseconds since the epoch of ISO 8601 ``text`` (no zone: UTC), or None if it is not such a time."""
    match = _ISO.fullmatch(text.strip())
    if match is None:
        return None
    date, clock, fraction, zone = match.groups()
    if zone in (None, "Z", "z"):
        zone = "+00:00"
    elif ":" not in zone:
        zone = zone[:3] + (":" + zone[3:] if len(zone) > 3 else ":00")
    try:
        moment = datetime.fromisoformat(f"{date}T{clock or '00:00'}{zone}")
    except ValueError:
        return None
    return in_range(timegm(moment.utctimetuple()) * NS + int((fraction or "").ljust(9, "0")))


def datetime_ns(value: datetime) -> int | None:
    """Nanoseconds since the epoch of ``value`` (naive: UTC; a pandas Timestamp keeps its nanoseconds)."""
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    extra = int(getattr(value, "nanosecond", 0))
    return in_range((delta.days * 86_400 + delta.seconds) * NS + delta.microseconds * 1000 + extra)


def is_moment(value: Any) -> bool:
    """Whether ``value`` names a moment (a datetime, numpy datetime64 or text), not a row number."""
    return isinstance(value, (datetime, np.datetime64, str))


def moment_ns(value: Any, what: str) -> int:
    """The moment ``value`` (a datetime, numpy datetime64 or ISO 8601 text) as ns since the epoch.

    TypeError for another type; :class:`TimeError` naming ``what`` for text
    that is not a time, NaT, or a time int64 nanoseconds cannot hold.
    """
    found: int | None
    if isinstance(value, datetime):
        found = datetime_ns(value)
    elif isinstance(value, np.datetime64):
        found = None if np.isnat(value) else in_range(int(value.astype("datetime64[ns]").astype(np.int64)))
    elif isinstance(value, str):
        found = iso_ns(value)
    else:
        raise TypeError(f"{what} takes a datetime, a numpy datetime64 or ISO 8601 text, not {type(value).__name__}")
    if found is None:
        raise TimeError(
            f"{what} {value!r} is not a time: give ISO 8601 (2024-05-01T12:00:00, with Z or +02:00; "
            "no zone means UTC) or a datetime, within the years 1677-2262"
        )
    return found
