"""The export itself: one snapshot of a stream, read block by block, written to a file or a job's next part.

:func:`export` is what ``windvane export`` runs. Without a job it writes
the stream's rows (those in the time range) to one target. With a job it
writes a part file of the rows committed since the job's last run, with the
intent and the completion recorded around it (:mod:`.jobs`), redoing
first the part a killed run left pending.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import cast

from windvane import arrays, neostore
from windvane.ingest import checkpoints

from . import files, jobs
from .blocks import BLOCK_BYTES, Layout, block_rows, layout_of, read_blocks
from .errors import BadSnapshot, StoreUnavailable, StreamShrank, TargetUnwritable, UnknownStream
from .formats import Format, StoredChunkWriter, Writer, format_named
from .times import Snapshot, TimeRange, snapshot_at, time_range

#: A stream's chunk cache while exporting: every chunk is read once, so caching would only hold memory.
_CACHE_BYTES = 0

Time = str | float | int | datetime
#: ``progress(rows_scanned, rows_to_scan)``: called once the plan is known (0, total), then after each block.
Progress = Callable[[int, int], None]


@dataclass
class ExportResult:
    """What one :func:`export` run did. Row numbers are the stream's."""

    stream: str
    format: str
    tid: str = ""  # hex tid of the snapshot exported
    rows: int = 0  # rows written (those in the time range)
    scanned: int = 0  # stream rows looked at
    nbytes: int = 0  # raw bytes of the rows written (numbers' itemsize, text and bytes their length)
    file_bytes: int = 0  # bytes of the files written, on disk
    seconds: float = 0.0
    files: list[str] = field(default_factory=list)  # paths written, in order
    job: str | None = None
    first_row: int = 0  # the new stream rows this run covered: [first_row, stop_row)
    stop_row: int = 0
    redone: tuple[int, int] | None = None  # the row range a killed run had left pending, written again

    @property
    def mbps(self) -> float:
        """Raw MB (10^6 bytes) exported per second."""
        return self.nbytes / self.seconds / 1e6 if self.seconds > 0 else 0.0


def export(
    store_or_url: str | neostore.Store,
    tag: str,
    to: str | os.PathLike[str],
    format: str,
    *,
    start: Time | None = None,
    stop: Time | None = None,
    at: Time | bytes | None = None,
    job: str | None = None,
    overwrite: bool = False,
    quarantine: bool = False,
    progress: Progress | None = None,
    block_bytes: int = BLOCK_BYTES,
) -> ExportResult:
    """Export stream ``tag`` (its quarantine stream if ``quarantine``) as ``format`` to ``to``.

    Reads one snapshot, the newest commit when it starts (or the one ``at``
    names: a tid, ``0x040d6ae3f1dab299`` or its 8 bytes, or a time, what
    had been committed then): rows committed during the export are not in
    it. Only rows whose time is in ``[start, stop)`` are written (ISO 8601,
    naive = UTC, or epoch seconds; the rows need not be sorted by time).
    Memory stays at a few blocks of about ``block_bytes`` whatever the
    stream's size.

    Without ``job``, ``to`` is the file (a directory for zarr) to write;
    one that exists is :class:`~.errors.TargetExists` unless ``overwrite``.
    With ``job``, ``to`` is a directory and this run writes the rows
    committed since the job's last run to ``part-<first row>-<stop row>.<ext>``
    there, exactly once even across crashes (:mod:`.jobs`); the job's state
    is kept in the store, so a job needs a writable store.

    Every failure a user can fix is an :class:`~.errors.ExportError` whose
    message names it.
    """
    started = time.perf_counter()
    fmt = format_named(format)
    times = time_range(start, stop)
    snapshot = _snapshot(at, job)
    if job is not None:
        jobs.check_name(job)
    store, owned = _store(store_or_url, writable=job is not None)
    try:
        # Read before the snapshot is taken, so that whatever the job exported is in the snapshot.
        before = jobs.read_job(store, job) if job is not None else None
        stream = _stream(store, tag, quarantine, snapshot)
        with stream:
            assert stream.tid is not None, "a stream opened outside a transaction reads one commit"
            result = ExportResult(tag, fmt.name, tid=stream.tid.hex(), job=job)
            layout = layout_of(stream)
            writer = _PartWriter(stream, layout, fmt, times, result, progress, block_rows(layout, block_bytes))
            if job is None:
                _export_once(writer, Path(to).absolute(), len(stream), overwrite)
            else:
                _export_job(writer, store, job, before, Path(to).absolute(), len(stream), quarantine)
    finally:
        if owned:
            store.close()
    result.seconds = time.perf_counter() - started
    return result


def _snapshot(at: Time | bytes | None, job: str | None) -> Snapshot | None:
    """The snapshot ``at`` names (None: the newest); BadSnapshot if it is none, or comes with a job."""
    if at is None:
        return None
    if job is not None:
        raise BadSnapshot(
            "--at exports the stream as it was then; a --job exports what each run finds new: use one or the other"
        )
    return snapshot_at(at)


def _store(store_or_url: str | neostore.Store, *, writable: bool) -> tuple[neostore.Store, bool]:
    if not isinstance(store_or_url, str):
        return store_or_url, False
    try:
        # Never creates a store for a mistyped URL.
        return neostore.open(store_or_url, read_only=not writable, create=False), True
    except neostore.StoreNotFoundError as exc:
        raise StoreUnavailable(str(exc)) from None
    except neostore.NeoStoreError as exc:
        raise StoreUnavailable(f"cannot open the store at {store_or_url}: {exc}") from None


def _stream(store: neostore.Store, tag: str, quarantine: bool, snapshot: Snapshot | None) -> arrays.Stream:
    # arrays' at= takes numpy's datetime64 as well, which its annotation leaves out.
    at = cast("arrays.timetravel.At | None", snapshot)
    try:
        return arrays.open_stream(store, tag, quarantine=quarantine, cache_bytes=_CACHE_BYTES, at=at)
    except (arrays.StreamNotFoundError, arrays.InvalidTagError):
        pass
    except arrays.SnapshotError as exc:
        raise BadSnapshot(f"--at: {exc}") from None
    kinds = ("quarantine streams", "streams") if quarantine else ("streams", "quarantine streams")
    have = {k: arrays.list_streams(store, quarantine=k == "quarantine streams", at=at) for k in kinds}
    listing = "; ".join(f"{k}: {', '.join(v) if v else 'none'}" for k, v in have.items())
    hint = (
        " (drop --quarantine to export it)"
        if quarantine and tag in have["streams"]
        else (" (add --quarantine to export it)" if not quarantine and tag in have["quarantine streams"] else "")
    )
    then = "" if snapshot is None else f" at {snapshot!s}"
    raise UnknownStream(f"no {'quarantine ' if quarantine else ''}stream {tag!r} in this store{then}{hint}; {listing}")


class _PartWriter:
    """Writes stream row ranges to files through one format, adding up what it did in ``result``."""

    def __init__(
        self,
        stream: arrays.Stream,
        layout: Layout,
        fmt: Format,
        times: TimeRange,
        result: ExportResult,
        progress: Progress | None,
        rows: int,
    ):
        self.stream, self.layout, self.fmt, self.times = stream, layout, fmt, times
        self.result, self.progress, self.rows = result, progress, rows
        self.total = 0

    def plan(self, total: int) -> None:
        self.total = total
        if self.progress is not None:
            self.progress(0, total)

    def write(self, final: Path, start: int, stop: int, *, keep_empty: bool) -> int:
        """Write rows ``[start, stop)`` in the time range to ``final`` atomically; the rows written.

        With no row in the range and not ``keep_empty``, no file is left.
        """
        files.remove_stale(final)
        temp = files.temp_path(final)
        rows = nbytes = 0
        try:
            try:
                writer = self.fmt.open(str(temp), self.layout, stop - start)
                try:
                    stored = self._stored(writer, start, stop)
                    for block in read_blocks(self.stream, self.layout, start, stop, self.times, self.rows, stored):
                        writer.write(block.table)
                        if block.chunks:
                            assert isinstance(writer, StoredChunkWriter), "only such a writer asks for chunks"
                            writer.write_stored((block.start - start) // self.layout.chunk_rows, block.chunks)
                        rows += block.table.num_rows
                        nbytes += block.nbytes
                        self.result.scanned += block.stop - block.start
                        if self.progress is not None:
                            self.progress(self.result.scanned, self.total)
                except BaseException:
                    _close_quietly(writer)  # its file handles; the temporary is removed below
                    raise
                writer.close()
                if not rows and not keep_empty:
                    files.remove(temp)
                    return 0
                checkpoints.reached("export.before_rename", file=str(final))
                files.publish(temp, final)
            except OSError as exc:  # no permission, disk full, a read-only file system
                raise TargetUnwritable(f"cannot write {final}: {exc.strerror or exc}") from None
        except BaseException:
            files.remove(temp)
            raise
        self.result.rows += rows
        self.result.nbytes += nbytes
        self.result.file_bytes += _size(final)
        self.result.files.append(str(final))
        return rows

    def _stored(self, writer: Writer, start: int, stop: int) -> frozenset[str]:
        """The arrays whose stored chunks ``writer`` copies for rows ``[start, stop)``: when those are every row of
        whole chunks (the stream's last chunk may be partial: its stored bytes past the end are its own)."""
        chunk = self.layout.chunk_rows
        whole = not start % chunk and (not stop % chunk or stop == len(self.stream))
        if not isinstance(writer, StoredChunkWriter) or self.times.bounded or not whole:
            return frozenset()
        return writer.take_stored()


def _close_quietly(writer: Writer) -> None:
    try:
        writer.close()
    except Exception:  # noqa: BLE001 - the error that stopped the writing is the one to report
        pass


def _size(path: Path) -> int:
    if not path.is_dir():
        return path.stat().st_size
    return sum((Path(root) / name).stat().st_size for root, _, names in os.walk(path) for name in names)


def _export_once(writer: _PartWriter, final: Path, rows: int, overwrite: bool) -> None:
    files.check_target(final, directory=writer.fmt.directory, overwrite=overwrite)
    writer.plan(rows)
    writer.result.stop_row = rows
    writer.write(final, 0, rows, keep_empty=True)


def part_name(fmt: Format, start: int, stop: int) -> str:
    """The file name of a job's part holding stream rows ``[start, stop)``: sorted by row as text."""
    return f"part-{start:012d}-{stop:012d}{fmt.extension}"


def _export_job(
    writer: _PartWriter,
    store: neostore.Store,
    name: str,
    job: jobs.Job | None,
    directory: Path,
    rows: int,
    quarantine: bool,
) -> None:
    result, fmt, times = writer.result, writer.fmt, writer.times
    wanted = jobs.Job(name, result.stream, quarantine, fmt.name, str(directory), times.start, times.stop)
    if job is not None:
        jobs.check_same(job, wanted)
    files.job_directory(directory)
    if job is None:
        job = jobs.create(store, wanted)
    done_to = job.pending.stop if job.pending else job.exported
    if rows < done_to:
        raise StreamShrank(
            f"stream {result.stream!r} has {rows:,} rows but job {name!r} already exported its "
            f"rows up to {done_to:,}: the stream was cut or replaced since the job's last run; "
            "name a new --job to export it from its start"
        )
    pending = job.pending
    writer.plan(rows - job.exported)
    if pending is not None:  # a run was killed between its intent and its completion: redo it, same file
        result.redone = (pending.start, pending.stop)
        written = writer.write(directory / pending.file, pending.start, pending.stop, keep_empty=False)
        checkpoints.reached("export.before_done", job=name, file=pending.file)
        job = jobs.finish(store, name, pending, rows=written, files=int(written > 0))
    result.first_row = result.stop_row = job.exported
    if rows == job.exported:
        return
    pending = jobs.Pending(job.exported, rows, part_name(fmt, job.exported, rows))
    job = jobs.begin(store, job, pending)
    written = writer.write(directory / pending.file, pending.start, pending.stop, keep_empty=False)
    checkpoints.reached("export.before_done", job=name, file=pending.file)
    jobs.finish(store, name, pending, rows=written, files=int(written > 0))
    result.stop_row = rows
