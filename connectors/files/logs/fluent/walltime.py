"""Wall-clock times to instants as fluentd's Ruby does it: :func:`wall_to_instants`.

A zone is a fixed offset (seconds east of UTC, an ``int``: the time is read
in it directly) or a :class:`LocalZone`: this machine's zone (fluentd's
``localtime``), perhaps with a ``timezone`` (an IANA name or a fixed offset;
``utc`` and ``localtime false`` are the offset 0) the wall clock is moved to.

In the machine's zone a wall-clock time the daylight-saving gap skips is read
with the offset before the gap (02:30 on the March day in Paris is 03:30
CEST). One the fall-back hour repeats (:attr:`LocalZone.later`) is read by
Ruby's ``Time.local`` (``Time.parse``, and the ``Time.strptime`` fluentd falls
back to for formats the strptime gem cannot read) as the later of the two; by
the strptime gem as the earlier or the later depending on memory the gem
leaves unset (``find_time_t``'s ``tm_isdst``): fluentd 1.14.6 was seen to
give the earlier with ``localtime`` (02:30 on the October day in Paris is
02:30 CEST) and the later with a named ``timezone``, and windvane does the
same (the corpus cases ``regexp-localtime-*`` and ``regexp-timezone-named*``
check it). Not covered: an hour repeated by a change of a zone's standard
offset, not daylight saving (Moscow, October 2014), where the gem may
choose otherwise.

With a ``timezone`` (a name or a fixed offset), ``utc`` or ``localtime
false`` fluentd still reads the text in the machine's zone first (as above),
then keeps that time's wall clock and takes the zone's offset off it
(``t.to_i + t.utc_offset - offset``; a named zone's offset *at that instant*,
``Fluent::Timezone.utc_offset``): :func:`from_machine`. So a wall time the
machine's daylight-saving change skips comes out an hour later even with
``utc`` (02:30 on the March day on a New York machine is 03:30Z), a repeated
one keeps its wall clock, and near a named zone's changes the result depends
on the machine's zone; windvane does the same. ``%s`` (seconds, read by
Ruby as a machine-zone time) is shifted the same way.

A format without a year read by the strptime gem (``%b %d %H:%M:%S``,
syslog's) is another case (:func:`gem_without_year`): the gem fills its
``struct tm`` from the machine's time *now*, so a repeated time is the one
whose daylight saving matches now's (``tm_isdst``), and the Time it returns
carries now's offset rather than its own: with a ``timezone``/``utc`` every
time of the other half of the year comes out an hour off (on a New York
machine in November, ``Jul  1 12:00:00`` with ``utc`` is 11:00Z).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windvane.ingest.times import NS


@dataclass(frozen=True)
class LocalZone:
    """Wall-clock times of the ``machine``'s zone (an IANA name), moved to the ``named`` ``timezone`` (an IANA name)
    or the fixed ``offset`` (seconds east of UTC) if one is given; ``later``: a repeated time is the later of the
    two (Ruby's ``Time.local``), else the earlier."""

    machine: str
    named: str | None = None
    later: bool = False
    offset: int | None = None
    #: the utc_offset (seconds) of every Time Ruby reads, when it is not the machine's at that time (see module)
    carried: int | None = None


def wall_to_instants(wall: np.ndarray, zone: int | LocalZone) -> np.ndarray:
    """Wall-clock ns (as if UTC) of ``zone`` to int64 ns UTC, as fluentd reads them (see module)."""
    if isinstance(zone, int):
        return wall - zone * NS
    return from_machine(ruby_local(wall, zone.machine, zone.later), zone)


def from_machine(instants: np.ndarray, zone: LocalZone) -> np.ndarray:
    """Instants Ruby read in the machine's zone (int64 ns UTC) moved to ``zone``'s ``named`` zone or ``offset``, as
    fluentd does it: the machine's wall clock at each, less the zone's offset (see module)."""
    if zone.named is None and zone.offset is None:
        return instants
    carried = zone.carried
    wall = instants + (offsets_at(instants, zone.machine) if carried is None else carried * NS)
    if zone.named is None:
        return wall - (zone.offset or 0) * NS
    moved: np.ndarray = wall - offsets_at(instants, zone.named)
    return moved


def gem_without_year(zone: LocalZone, now: int) -> LocalZone:
    """``zone`` as the strptime gem reads a time without a year at ``now`` (ns UTC): a repeated time is the one of
    now's daylight saving (standard: the later), the Time carries now's offset (see module)."""
    moment = datetime.fromtimestamp(now // NS, UTC).astimezone(ZoneInfo(zone.machine))
    offset, dst = moment.utcoffset(), moment.dst()
    return replace(zone, later=not dst, carried=int(offset.total_seconds()) if offset is not None else None)


def ruby_local(wall: np.ndarray, zone: str, later: bool = False) -> np.ndarray:
    """Wall-clock ns of IANA ``zone`` to instants as Ruby reads them: a time in a gap with the offset before the
    gap, a repeated time as the later (``later``) or the earlier."""
    if zone == "UTC" or not len(wall):
        return wall
    naive = pa.array(wall, pa.timestamp("ns"))
    repeated = "latest" if later else "earliest"
    before = pc.assume_timezone(naive, zone, ambiguous=repeated, nonexistent="earliest")
    after = pc.assume_timezone(naive, zone, ambiguous=repeated, nonexistent="latest")
    instants: np.ndarray = before.cast(pa.int64()).to_numpy()
    gap = instants != after.cast(pa.int64()).to_numpy()
    if gap.any():  # ``before`` is the last instant before the gap: its offset is the one Ruby uses
        instants = np.where(gap, wall - offsets_at(instants, zone), instants)
    return instants


def offsets_at(instants: np.ndarray, zone: str) -> np.ndarray:
    """The offset of IANA ``zone`` (ns east of UTC) at each of ``instants`` (int64 ns UTC)."""
    if zone == "UTC" or not len(instants):
        return np.zeros(len(instants), dtype=np.int64)
    zoned = pa.array(instants, pa.timestamp("ns", tz=zone))
    local: np.ndarray = pc.local_timestamp(zoned).cast(pa.int64()).to_numpy()
    offsets: np.ndarray = local - instants
    return offsets
