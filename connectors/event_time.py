"""Event times that senders put in their records, as int64 nanoseconds since the Unix epoch (UTC).

One reader for the connectors whose records carry their own time in a
field (MQTT payloads, Fluent Bit's ``date`` key over HTTP, a ``time_key``
named by the sender): :func:`time_ns`.
"""

from __future__ import annotations

import math
import re
from calendar import timegm
from datetime import datetime
from decimal import Decimal
from typing import Any

import msgpack

__all__ = ["time_ns"]

_INT64_MAX = (1 << 63) - 1
# (magnitude below which, power of ten to nanoseconds): seconds, milliseconds, microseconds; else nanoseconds.
_UNITS = ((1e11, 9), (1e14, 6), (1e17, 3))
_ISO = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?(Z|z|[+-]\d\d:?\d\d)?")


def time_ns(value: Any) -> int | None:
    """Nanoseconds since the epoch for ``value``, or None if it is not a time.

    - An ISO 8601 string (``T`` or a space between date and time, as
      Fluent Bit's ``iso8601`` and ``java_sql_timestamp`` write it); no zone
      means UTC; fractions to the nanosecond.
    - A number since the epoch whose magnitude says the unit: below 1e11
      seconds, below 1e14 milliseconds, below 1e17 microseconds, else
      nanoseconds (seconds up to the year 5138, and JavaScript's
      ``Date.now()``). Floats go through their shortest decimal form, so
      ``1700000000.123456`` is ``...123456000`` ns.
    - A msgpack Timestamp or a fluentd EventTime (ext 0, ``>II``).

    Bools, strings that are not ISO 8601 and times outside int64 are not times.
    """
    kind = type(value)
    if kind is int or kind is float:
        if kind is float and not math.isfinite(value):
            return None
        scale = next((power for limit, power in _UNITS if abs(value) < limit), 0)
        ns = value * 10**scale if kind is int else int(Decimal(repr(value)).scaleb(scale).to_integral_value())
    elif kind is str:
        ns = _iso_ns(value)
    elif kind is msgpack.Timestamp:
        ns = value.to_unix_nano()
    elif kind is msgpack.ExtType and value.code == 0 and len(value.data) == 8:  # fluentd EventTime
        ns = int.from_bytes(value.data[:4], "big") * 1_000_000_000 + int.from_bytes(value.data[4:], "big")
    else:
        return None
    return ns if ns is not None and -_INT64_MAX <= ns <= _INT64_MAX else None


def _iso_ns(text: str) -> int | None:
    match = _ISO.fullmatch(text.strip())
    if match is None:
        return None
    base, fraction, zone = match.groups()
    try:
        moment = datetime.fromisoformat(base + ("+00:00" if zone in (None, "Z", "z") else zone))
    except ValueError:
        return None
    seconds = timegm(moment.utctimetuple())
    return seconds * 1_000_000_000 + int((fraction or "").ljust(9, "0"))
