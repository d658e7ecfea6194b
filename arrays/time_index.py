"""The time range of each chunk of a stream's ``time``: kept beside the chunks, so reads by time pick chunks unread.

Time is in arrival order, not sorted: the first and last rows say nothing
of the range a stream or a chunk covers. Each full chunk of a stream's
``time`` array has a record ``<stream>/__times/<i>`` (``__`` names are
zarr v3's reserved ones: no tool takes it for a node, and listings leave it
out) of 16 bytes, the least and greatest time of its rows (little-endian
int64; rows without a time, :data:`~arrays.times.NO_TIME`, left out; an
empty record if none has one). The stream writers (:meth:`Stream.append`,
:class:`StreamWriter`) write it in the commit that writes the chunk.

A record counts only while its revision is the chunk's (both written by
one commit): a chunk written by anything else (a BigArray write, zarr
through :class:`ZarrStore`) has its range computed from its values when
asked, as has the partial last chunk (every append changes it; a row log
may hold its rows). So chunks without a record need no migration: they
are read once per stream view to compute their ranges, and the chunks a
stream writer fills from then on get records.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from windvane import neostore

from .times import NO_TIME

if TYPE_CHECKING:
    from .bigarray import BigArray
    from .keys import LoggedView

#: The folder of a stream's time records, beside its arrays.
INDEX_NAME = "__times"
#: A chunk's least and greatest time, None when none of its rows has one.
Range = tuple[int, int] | None
_PAIR = struct.Struct("<qq")
#: Chunks whose range is computed from one read at most (a bound on the memory such a read takes).
_READ_CHUNKS = 64
#: The serial a transaction lists its own writes with (they have no revision yet).
_UNCOMMITTED = neostore.ZERO


def record_key(path: str, index: int) -> str:
    """The key of the time record of chunk ``index`` of stream ``path``'s ``time``."""
    return f"{path}/{INDEX_NAME}/{index}"


def is_record_key(key: str) -> bool:
    return f"/{INDEX_NAME}/" in key or key.startswith(f"{INDEX_NAME}/")


def range_of(times: np.ndarray) -> Range:
    """The least and greatest of ``times`` (int64 ns), rows without a time left out; None if none has one."""
    if not len(times):
        return None
    low = int(times.min())
    if low == NO_TIME:
        times = times[times != NO_TIME]
        if not len(times):
            return None
        low = int(times.min())
    return low, int(times.max())


def encode(found: Range) -> bytes:
    return b"" if found is None else _PAIR.pack(*found)


def decode(raw: bytes) -> Range:
    if len(raw) != _PAIR.size:
        return None
    low, high = _PAIR.unpack(raw)
    return int(low), int(high)


def records(path: str, filled: Iterable[tuple[int, np.ndarray]]) -> dict[str, bytes]:
    """The records of the chunks ``filled`` (``(index, its rows' times)``, each chunk full) of stream ``path``."""
    return {record_key(path, index): encode(range_of(np.asarray(times))) for index, times in filled}


def chunk_ranges(reader: LoggedView, path: str, times: BigArray, known: dict[tuple[int, bytes], Range]) -> list[Range]:
    """The range of every chunk of ``times`` (stream ``path``'s time array as ``reader`` sees it), in order.

    Records whose revision is their chunk's are read (one listing, one
    batched read); the other chunks are read and their ranges computed,
    kept in ``known`` by (chunk, revision) for the next call.
    """
    length, rows = len(times), times.chunks[0]
    count, full = math.ceil(length / rows), length // rows
    serials = {e.key: e.serial for e in reader.raw_list_under([f"{times.name}/", f"{path}/{INDEX_NAME}/"])}
    # A chunk's revision; None for the partial last chunk, and for one unwritten or written in this transaction.
    revision = [serials.get(f"{times.name}/{times.meta.chunk_key((i,))}") for i in range(full)] + [None]
    revision = [None if serial == _UNCOMMITTED else serial for serial in revision]
    trusted = {record_key(path, i): i for i in range(full) if serials.get(record_key(path, i)) == revision[i]}
    found = {trusted[key]: decode(raw) for key, raw in reader.raw_get_many(list(trusted)).items()}
    for i in range(full):
        serial = revision[i]
        if i not in found and serial is not None and (i, serial) in known:
            found[i] = known[(i, serial)]
    for first, last in _runs([i for i in range(count) if i not in found]):
        values = times[first * rows : min(last * rows, length)]
        for i in range(first, last):
            found[i] = range_of(values[(i - first) * rows : (i - first + 1) * rows])
            serial = revision[min(i, full)]
            if serial is not None:
                known[(i, serial)] = found[i]
    return [found[i] for i in range(count)]


def _runs(indices: list[int]) -> Iterable[tuple[int, int]]:
    """``indices`` (ascending) as ``[first, last)`` runs of consecutive ones, each at most :data:`_READ_CHUNKS`."""
    start = prev = None
    for i in indices:
        if start is not None and prev is not None and i == prev + 1 and i - start < _READ_CHUNKS:
            prev = i
            continue
        if start is not None and prev is not None:
            yield start, prev + 1
        start = prev = i
    if start is not None and prev is not None:
        yield start, prev + 1


def span(ranges: Iterable[Range]) -> Range:
    """The least and greatest time of all of ``ranges``; None if no chunk has a time."""
    present = [r for r in ranges if r is not None]
    if not present:
        return None
    return min(r[0] for r in present), max(r[1] for r in present)


def meets(found: Range, start: int | None, stop: int | None) -> bool:
    """Whether a chunk of range ``found`` may hold times in ``[start, stop)`` (one with no time never does)."""
    if found is None:
        return False
    return (start is None or found[1] >= start) and (stop is None or found[0] < stop)


def overlapping(
    ranges: list[Range], rows: int, length: int, start: int | None, stop: int | None
) -> list[tuple[int, int]]:
    """The row spans ``[first, last)`` of the chunks (of ``rows`` rows each, ``length`` in all) whose range
    meets ``[start, stop)``, neighbours merged."""
    spans: list[tuple[int, int]] = []
    for i, found in enumerate(ranges):
        if not meets(found, start, stop):
            continue
        first, last = i * rows, min((i + 1) * rows, length)
        if spans and spans[-1][1] == first:
            spans[-1] = (spans[-1][0], last)
        else:
            spans.append((first, last))
    return spans


def in_window(times: np.ndarray, start: int | None, stop: int | None) -> np.ndarray:
    """Which of ``times`` are in ``[start, stop)`` (rows without a time never are)."""
    keep: np.ndarray = times != NO_TIME
    if start is not None:
        keep &= times >= start
    if stop is not None:
        keep &= times < stop
    return keep
