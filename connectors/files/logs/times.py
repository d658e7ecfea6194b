"""RFC 3164 syslog timestamps to int64 nanoseconds since the epoch (UTC), a whole column at a time.

Every other time of a log is read by windvane's one time rule,
:mod:`ingest.times` (ISO 8601 and RFC 3339 included). RFC 3164's
``Oct 11 22:14:15`` has neither year nor zone: it is a wall-clock time of
the zone the log was written in, ``--timezone``
(:class:`.options.LogOptions`), in the year :func:`bsd_to_ns` chooses.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windvane.ingest.times import NS, wall_to_utc

DAY_NS = 86_400 * NS
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def bsd_to_ns(month: pa.Array, day: pa.Array, clock: pa.Array, zone: str, now: int) -> tuple[np.ndarray, np.ndarray]:
    """RFC 3164 times (``Oct``, `` 1``, ``22:14:15``) to int64 ns UTC, and a mask of impossible dates.

    They carry no year: each is taken in the year of ``now`` (ns, UTC) in
    ``zone``, or the year before if that would put it more than a day after
    ``now`` (a December line of a log last written in January), as syslog
    readers do. ``now`` is when the log was last written: a file's
    modification time for ``windvane import``, the clock for ``windvane
    tail``. The day of slack allows for clocks a little ahead and zones east
    of this one.
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
