"""Wall-clock times to instants as fluentd's Ruby does it: :func:`wall_to_instants`.

A zone is a fixed offset (seconds east of UTC, an ``int``) or a
:class:`LocalZone`: this machine's zone (fluentd's ``localtime``), perhaps
with a named ``timezone`` (an IANA name).

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

With a named ``timezone`` fluentd reads the text in the machine's zone first
(as above), then shifts it by the named zone's offset *at that instant*
(``Fluent::Timezone.utc_offset``): near either zone's changes the result
depends on the machine's zone, and windvane does the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windvane.ingest.times import NS


@dataclass(frozen=True)
class LocalZone:
    """Wall-clock times of the ``machine``'s zone (an IANA name), shifted to the ``named`` ``timezone`` if one is
    given; ``later``: a repeated time is the later of the two (Ruby's ``Time.local``), else the earlier."""

    machine: str
    named: str | None = None
    later: bool = False


def wall_to_instants(wall: np.ndarray, zone: int | LocalZone) -> np.ndarray:
    """Wall-clock ns (as if UTC) of ``zone`` to int64 ns UTC, as fluentd reads them (see module)."""
    if isinstance(zone, int):
        return wall - zone * NS
    instants = ruby_local(wall, zone.machine, zone.later)
    if zone.named is None:
        return instants
    # fluentd: t.to_i + t.utc_offset - tz.period_for_utc(t).utc_total_offset
    return instants + offsets_at(instants, zone.machine) - offsets_at(instants, zone.named)


def ruby_local(wall: np.ndarray, zone: str, later: bool = False) -> np.ndarray:
    """Wall-clock ns of IANA ``zone`` to instants as Ruby reads them: a time in a gap with the offset before the
    gap, a repeated time as the later (``later``) or the earlier."""
    if zone == "UTC" or not len(wall):
        return wall
    naive = pa.array(wall, pa.timestamp("ns"))
    repeated = "latest" if later else "earliest"
    before = pc.assume_timezone(naive, zone, ambiguous=repeated, nonexistent="earliest")
    after = pc.assume_timezone(naive, zone, ambiguous=repeated, nonexistent="latest")
    instants = before.cast(pa.int64()).to_numpy()
    gap = instants != after.cast(pa.int64()).to_numpy()
    if gap.any():  # ``before`` is the last instant before the gap: its offset is the one Ruby uses
        instants = np.where(gap, wall - offsets_at(instants, zone), instants)
    return instants


def offsets_at(instants: np.ndarray, zone: str) -> np.ndarray:
    """The offset of IANA ``zone`` (ns east of UTC) at each of ``instants`` (int64 ns UTC)."""
    if zone == "UTC" or not len(instants):
        return np.zeros(len(instants), dtype=np.int64)
    zoned = pa.array(instants, pa.timestamp("ns", tz=zone))
    local = pc.local_timestamp(zoned).cast(pa.int64()).to_numpy()
    return local - instants
