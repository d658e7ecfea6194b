"""The one way appends and region writes store chunks: plan the chunks touched, encode them, write in batches.

``BigArray.append`` (and assignment), ``Stream.append`` and
``StreamWriter.append`` all go through here:

1. **Plan**: :func:`plan_region` names every chunk a write touches, and
   which of them already hold data outside it (the partial last chunk an
   append rewrites); :func:`append_region` is the plan of an append.
2. **Build**: :func:`region_jobs` turns the plan and the rows into
   :class:`ChunkJob` s (a stream writer's tails make theirs themselves).
3. **Encode**: :func:`encode` runs the jobs, in the codec threads when they
   weigh enough, hashing what they encode so the commit need not.
4. **Write**: :class:`Batches` hands the bytes to ``Transaction.set_many``
   :data:`WRITE_BATCH` at a time, then the small documents (metadata, the
   row log) with the last batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from windvane import neostore

from .metadata import ArrayMeta
from .selection import AxisSelection, Piece, covers_chunk, pieces
from .workers import weighted_map, workers

if TYPE_CHECKING:
    from .transaction import Transaction

#: Chunks per ``set_many`` call: enough to bind their names in one round trip.
WRITE_BATCH = 64
#: Raw bytes of chunks being encoded ahead of the database writes: enough to
#: keep the codec threads busy while neostore uploads a batch.
ENCODE_AHEAD_BYTES = 64 * 1024 * 1024

#: A chunk ready to store: ``(key, bytes, compressed by its codec, neostore.value_hash of the bytes)``.
Encoded = tuple[str, bytes, bool, bytes]


@dataclass(slots=True)  # not frozen: one is made per column per append, and frozen ones are slow to make
class ChunkJob:
    """One chunk an append stores: its key, how to encode it, its raw size, whether the codec compresses."""

    key: str
    encode: Callable[[], bytes]
    weight: int
    compressed: bool
    full: bool = False  # the chunk holds all its rows (not the partial last one)
    # A full chunk of numbers: its index along the first axis and its rows (a stream's time records need them).
    index: int = -1
    values: np.ndarray | None = None


@dataclass(frozen=True)
class Region:
    """The chunks a write touches: ``meta`` is the array after it.

    ``pieces[i]`` is stored under ``keys[i]``; ``partial`` are the keys of
    existing chunks the write covers only in part, to be read first
    (read-modify-write).
    """

    name: str
    meta: ArrayMeta
    selection: tuple[AxisSelection, ...]
    pieces: list[Piece]
    keys: list[str]
    partial: list[str]


def plan_region(name: str, meta: ArrayMeta, old_shape: tuple[int, ...], selection: tuple[AxisSelection, ...]) -> Region:
    """The plan of writing ``selection`` (ascending, every axis kept) of array ``name``, ``old_shape`` long
    before and described by ``meta`` after."""
    plan = list(pieces(selection, meta.chunks))
    keys = [f"{name}/{meta.chunk_key(p.coords)}" for p in plan]
    partial = [
        k
        for p, k in zip(plan, keys)
        if not covers_chunk(p, meta.chunks, meta.shape)
        and all(c * size < n for c, size, n in zip(p.coords, meta.chunks, old_shape))
    ]
    return Region(name, meta, selection, plan, keys, partial)


def append_region(name: str, latest: ArrayMeta, added: tuple[int, ...], axis: int = 0) -> Region:
    """The plan of appending a block of shape ``added`` along ``axis`` to array ``name`` as ``latest`` has it."""
    old = latest.shape[axis]
    shape = list(latest.shape)
    shape[axis] = old + added[axis]
    selection = tuple(AxisSelection(old if i == axis else 0, n) for i, n in enumerate(added))
    return plan_region(name, latest.with_shape(shape), latest.shape, selection)


def region_jobs(
    region: Region,
    value: np.ndarray,
    old: Mapping[str, np.ndarray],
    built: list[tuple[str, np.ndarray]],
    filled: list[tuple[int, np.ndarray]] | None = None,
) -> Iterator[ChunkJob]:
    """A job per chunk of ``region`` storing ``value`` over ``old`` (the decoded ``partial`` chunks that
    exist); chunks made by copying (worth caching) are added to ``built``, and to ``filled`` (as their
    index along the first axis and values) those every row of which is written (for a stream's time
    records, :mod:`arrays.time_index`)."""
    meta = region.meta
    codec = meta.codec
    rows, length = meta.chunks[0], meta.shape[0]
    for piece, key in zip(region.pieces, region.keys):
        part = value[piece.in_result]
        if part.shape == meta.chunks and key not in old:
            chunk = part  # a whole chunk: encoded straight from the caller's data
        else:
            base = old.get(key)
            if base is None:
                chunk = np.full(meta.chunks, meta.fill_value, dtype=codec.work_dtype)
            else:
                chunk = base.copy()
            chunk[piece.in_chunk] = part
            built.append((key, chunk))
        if filled is not None and (piece.coords[0] + 1) * rows <= length:
            filled.append((piece.coords[0], chunk))
        yield ChunkJob(key, functools.partial(codec.encode, chunk), meta.chunk_nbytes, codec.compressed, True)


def _encode_and_hash(job: ChunkJob) -> Encoded:
    value = job.encode()
    return job.key, value, job.compressed, neostore.value_hash(value)


def encode(jobs: Iterable[ChunkJob], weight: int, chunk_nbytes: int = 0) -> Iterator[Encoded]:
    """Run ``jobs`` in order, lazily: in the calling thread if ``weight`` (their raw bytes) is small, else in
    the codec threads, with at most :data:`ENCODE_AHEAD_BYTES` of chunks of ``chunk_nbytes`` in flight."""
    window = max(2 * workers() + 2, ENCODE_AHEAD_BYTES // chunk_nbytes) if chunk_nbytes > 0 else None
    return weighted_map(_encode_and_hash, jobs, weight, window)


class Batches:
    """Chunk writes gathered into ``set_many`` calls of :data:`WRITE_BATCH`, one call per compress flag.

    A codec's output is compressed already, so neostore need not try;
    chunks stored as they are ("none" codecs) are. ``raw``: as
    ``Transaction.set_many``'s (the caller keeps the row log itself).
    """

    def __init__(self, tx: Transaction, *, raw: bool = False):
        self._tx = tx
        self._raw = raw
        self._batches: dict[bool, dict[str, bytes]] = {True: {}, False: {}}
        self._digests: dict[str, bytes] = {}
        self.chunks = 0  # chunks added so far

    def add(self, encoded: Iterable[Encoded]) -> None:
        """Write ``encoded`` chunks, a batch at a time (the last, incomplete batches wait for :meth:`flush`)."""
        for key, value, compressed, digest in encoded:
            batch = self._batches[not compressed]
            batch[key] = value
            self._digests[key] = digest
            self.chunks += 1
            if len(batch) >= WRITE_BATCH:
                self._write(batch, not compressed)

    def flush(self, documents: Mapping[str, bytes] | None = None, *, oids: Mapping[str, bytes] | None = None) -> None:
        """Write what is pending, with ``documents`` (small JSON: neostore compresses them); ``oids``: as
        ``Transaction.set_many``'s (those of keys known bound)."""
        if documents:
            self._batches[True].update(documents)
        for compress, batch in self._batches.items():
            if batch:
                self._write(batch, compress, oids)

    def _write(self, batch: dict[str, bytes], compress: bool, oids: Mapping[str, bytes] | None = None) -> None:
        self._tx.set_many(batch, compress=compress, digests=self._digests, raw=self._raw, oids=oids)
        batch.clear()
