"""``--start``/``--stop``: a TIME as int64 ns since the epoch (UTC), and the rows a time range selects.

A TIME is ISO 8601 (``2024-05-01``, ``2024-05-01T12:00:00.123456789``,
with ``Z`` or ``+02:00``; no zone means UTC, as everywhere in windvane) or
epoch seconds (``1714564800``, ``1714564800.25``: exact to the nanosecond).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import BadTime

NS = 10**9
_INT64 = (-(2**63), 2**63 - 1)


def parse_time(value: str | float | int | datetime, what: str = "TIME") -> int:
    """``value`` as ns since the epoch, UTC; :class:`BadTime` naming ``what`` if it is not a time."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
        delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
        return (delta.days * 86_400 + delta.seconds) * NS + delta.microseconds * 1000
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return _checked(Decimal(str(value)) * NS, what, value)
    if not isinstance(value, str):
        raise BadTime(f"{what} takes ISO 8601 text, epoch seconds or a datetime, not {type(value).__name__}")
    text = value.strip()
    try:
        return _checked(Decimal(text) * NS, what, value)
    except InvalidOperation:
        pass
    for zone in (None, "UTC"):  # arrow parses naive text only as naive, zoned text only as zoned
        try:
            return int(pc.cast(pa.array([text]), pa.timestamp("ns", tz=zone)).cast(pa.int64())[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    raise BadTime(f"{what} {value!r} is not a time: give ISO 8601 (2024-05-01T12:00:00, with Z or +02:00; "
                  "no zone means UTC) or epoch seconds (1714564800)")


def _checked(ns: Decimal, what: str, value: object) -> int:
    if not ns.is_finite():
        raise BadTime(f"{what} {value!r} is not a time: give ISO 8601 or finite epoch seconds")
    if not _INT64[0] <= ns <= _INT64[1]:
        raise BadTime(f"{what} {value!r} is outside the years 1677-2262 that int64 nanoseconds hold")
    return int(ns.to_integral_value())


@dataclass(frozen=True)
class TimeRange:
    """Rows whose time is in ``[start, stop)`` (None: unbounded on that side), ns since the epoch."""

    start: int | None = None
    stop: int | None = None

    def __post_init__(self) -> None:
        if self.start is not None and self.stop is not None and self.start >= self.stop:
            raise BadTime(f"--start ({_text(self.start)}) must be before --stop ({_text(self.stop)}): "
                          "the range [start, stop) selects nothing")

    @property
    def bounded(self) -> bool:
        return self.start is not None or self.stop is not None

    def mask(self, time: np.ndarray) -> np.ndarray | None:
        """Which of ``time`` (int64 ns) are in the range; None if all are (no copy needed)."""
        if not self.bounded:
            return None
        keep = np.ones(len(time), dtype=bool)
        if self.start is not None:
            keep &= time >= self.start
        if self.stop is not None:
            keep &= time < self.stop
        return None if keep.all() else keep


def time_range(start: str | float | int | datetime | None, stop: str | float | int | datetime | None) -> TimeRange:
    """The :class:`TimeRange` of ``--start``/``--stop`` values (each optional); :class:`BadTime` if malformed."""
    return TimeRange(None if start is None else parse_time(start, "--start"),
                     None if stop is None else parse_time(stop, "--stop"))


def _text(ns: int) -> str:
    return str(np.datetime64(ns, "ns")) + "Z"
