"""Zone names written in time texts (``%Z``), as Ruby's ``Time.strptime`` reads them (``Time.zone_offset``).

Ruby knows ``UTC``, ``Z``, ``UT``, ``GMT``, the US zones of RFC 822 (``EST``
... ``PDT``), the military letters (``A`` is +01:00, ``N`` -01:00, no ``J``)
and the names the machine's zone has on January 1st and July 1st of the
time's year (``CET`` and ``CEST`` on a Paris machine, each its fixed offset
whatever the date), in any case. A time written with any other name
(``JST``) is read as the machine's local time, as if it had none.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import numpy as np

_HOURS = {"UTC": 0, "Z": 0, "UT": 0, "GMT": 0, "EST": -5, "EDT": -4, "CST": -6, "CDT": -5, "MST": -7, "MDT": -6}
_HOURS |= {"PST": -8, "PDT": -7}
_HOURS |= {letter: hour for hour, letter in enumerate("ABCDEFGHI", 1)} | {"K": 10, "L": 11, "M": 12}
_HOURS |= {letter: -hour for hour, letter in enumerate("NOPQRSTUVWXY", 1)}


def name_offsets(names: np.ndarray, years: np.ndarray, machine: str) -> tuple[np.ndarray, np.ndarray]:
    """Seconds east of UTC of each zone ``names`` (alphabetic texts) in its ``years``, and the mask of the names Ruby
    does not know (read in the ``machine``'s zone)."""
    offsets = np.zeros(len(names), dtype=np.int64)
    unknown = np.zeros(len(names), dtype=bool)
    for name in set(names.tolist()):
        rows = np.flatnonzero(names == name)
        upper = name.upper()
        if upper in _HOURS:
            offsets[rows] = _HOURS[upper] * 3600
            continue
        for year in set(years[rows].tolist()):
            where = rows[years[rows] == year]
            found = _machine_name(upper, year, machine)
            offsets[where] = found or 0
            unknown[where] = found is None
    return offsets, unknown


def _machine_name(name: str, year: int, machine: str) -> int | None:
    """The offset of the machine's zone on January 1st or July 1st of ``year`` if it is called ``name`` then."""
    for month in (1, 7):
        try:
            moment = datetime(year, month, 1, tzinfo=ZoneInfo(machine))
        except (ValueError, KeyError, OSError):  # a year datetime cannot hold, a zone zoneinfo lacks
            return None
        offset = moment.utcoffset()
        if (moment.tzname() or "").upper() == name and offset is not None:
            return int(offset.total_seconds())
    return None
