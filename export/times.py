"""``--start``/``--stop``: a TIME as int64 ns since the epoch (UTC), and the rows a time range selects;
``--at``: the snapshot a tid or a TIME names.

A TIME is read by windvane's one time rule, :mod:`ingest.times`: ISO 8601
(``2024-05-01``, ``2024-05-01T12:00:00.123456789``, with ``Z`` or
``+02:00``; no zone means UTC) or an epoch number whose magnitude says its
unit (``1714564800``, ``1714564800.25`` seconds, exact to the nanosecond;
``1714564800250`` milliseconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np

from windvane import neostore
from windvane.ingest.times import iso_text, time_ns

from .errors import BadSnapshot, BadTime


def parse_time(value: str | float | int | datetime, what: str = "TIME") -> int:
    """``value`` as ns since the epoch, UTC; :class:`BadTime` naming ``what`` if it is not a time."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float, datetime)):
        raise BadTime(f"{what} takes ISO 8601 text, epoch seconds or a datetime, not {type(value).__name__}")
    ns = time_ns(value)
    if ns is None:
        raise BadTime(
            f"{what} {value!r} is not a time: give ISO 8601 (2024-05-01T12:00:00, with Z or +02:00; "
            "no zone means UTC) or epoch seconds (1714564800), within the years 1677-2262"
        )
    return ns


#: The commit an export reads: its tid, or a time (what had been committed then).
Snapshot = neostore.Tid | np.datetime64


def snapshot_at(value: str | float | int | datetime | bytes) -> Snapshot:
    """``--at`` as ``arrays.open_stream``'s ``at=``: a tid (``0x`` and 16 hex digits, as windvane prints
    tids, or its 8 bytes) or a TIME (:func:`parse_time`: what had been committed then); :class:`BadSnapshot`
    naming the value if it is neither."""
    if isinstance(value, (bytes, bytearray)) or (isinstance(value, str) and neostore.tids.looks_like_tid(value)):
        try:
            return neostore.as_tid(value)
        except neostore.TidError as exc:
            raise BadSnapshot(f"--at: {exc}") from None
    try:
        return np.datetime64(parse_time(value, "--at"), "ns")
    except BadTime as exc:
        raise BadSnapshot(f"{exc}; or a tid as windvane prints it (0x040d6ae3f1dab299)") from None


@dataclass(frozen=True)
class TimeRange:
    """Rows whose time is in ``[start, stop)`` (None: unbounded on that side), ns since the epoch."""

    start: int | None = None
    stop: int | None = None

    def __post_init__(self) -> None:
        if self.start is not None and self.stop is not None and self.start >= self.stop:
            raise BadTime(
                f"--start ({iso_text(self.start)}) must be before --stop ({iso_text(self.stop)}): "
                "the range [start, stop) selects nothing"
            )

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
    return TimeRange(
        None if start is None else parse_time(start, "--start"), None if stop is None else parse_time(stop, "--stop")
    )
