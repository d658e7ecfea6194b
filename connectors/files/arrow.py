"""Parquet and Arrow IPC files through ``pyarrow.parquet`` and ``pyarrow.ipc``; the position is a row index.

Parquet is read one row group at a time (a resumed import skips whole row
groups by their metadata, without reading them); an Arrow IPC file (the
"file" format, ``ARROW1`` magic: Feather v2) one record batch at a time
from a memory map; the IPC "stream" format, which has no footer to seek by,
is read through ``pyarrow.ipc.open_stream`` from the start, skipping the
rows already imported. Columns keep their types (the import engine checks
them against the stream's) and their names, but for blank or repeated ones
(:func:`connectors.files.column_names`); the time column is converted by
:func:`connectors.files.times.time_ns` (a text column by
``options.time_format`` if given), and a row whose time is missing or not a
time is rejected (its values as JSON) with the reason; a file without one
takes its times from ``options.time_from`` (the position is the row number
``row`` counts by).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from windvane.ingest.batch import INVALID_TIME
from windvane.ingest.parts import row_bytes

from . import FileFormatError, Part, ReaderOptions, column_names
from .times import find_time_column, made_times, time_ns

#: Rows per part when a row group or record batch is larger.
BATCH_ROWS = 1 << 20
_IPC_MAGIC = b"ARROW1"


class ArrowReader:
    """``reader(start)`` yields the :class:`Part` objects of a Parquet or Arrow IPC file from row ``start``."""

    def __init__(self, path: str | Path, options: ReaderOptions, fmt: str):
        self.path = str(path)
        self.options = options
        self.size = os.path.getsize(self.path)
        self.fmt = fmt
        self.rows: int | None = None  # the file's rows, when its format says (an IPC stream's does not)
        # pyarrow.parquet and pyarrow.ipc rather than pyarrow.dataset: they read files whose
        # columns' names are blank or repeated, which column_names then names.
        try:
            if fmt == "parquet":
                self.parquet = pq.ParquetFile(self.path)
                schema, self.rows = self.parquet.schema_arrow, self.parquet.metadata.num_rows
            else:
                with open(self.path, "rb") as f:
                    self.fmt = "ipc" if f.read(6) == _IPC_MAGIC else "ipc-stream"
                if self.fmt == "ipc":
                    reader = ipc.open_file(pa.memory_map(self.path))
                    schema = reader.schema
                    self.rows = sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
                else:
                    schema, self.rows = ipc.open_stream(self.path).schema, None
        except (pa.ArrowInvalid, OSError) as exc:
            raise FileFormatError(f"{self.path}: not a readable {fmt} file: {exc}") from None
        self.names, self.notes = column_names(self.path, schema.names, options.rename)
        self.schema = pa.schema([f.with_name(n) for f, n in zip(schema, self.names)])
        self.time_column = find_time_column(self.names, options.time_column, self.path, options.time_from)

    def file_types(self) -> dict[str, pa.DataType]:
        """The type of each column (the file's schema says it)."""
        return {f.name: f.type for f in self.schema if f.name != self.time_column}

    def __call__(self, start: int | None) -> Iterator[Part]:
        at = int(start or 0)
        for first, batch in self._batches(at):
            skip = max(at - first, 0)
            if skip >= batch.num_rows:
                continue
            for offset in range(skip, batch.num_rows, BATCH_ROWS):
                piece = batch.slice(offset, BATCH_ROWS)
                table = pa.Table.from_batches([piece]).rename_columns(self.names)
                yield self._part(table, first + offset + piece.num_rows)

    def _batches(self, at: int) -> Iterator[tuple[int, pa.RecordBatch]]:
        """``(row index of its first row, batch)`` of the file, in order, from the one holding row ``at``."""
        if self.fmt == "parquet":
            row = 0
            for group in range(self.parquet.metadata.num_row_groups):
                rows = self.parquet.metadata.row_group(group).num_rows
                if row + rows > at:
                    for batch in self.parquet.iter_batches(BATCH_ROWS, row_groups=[group], use_threads=True):
                        yield row, batch
                        row += batch.num_rows
                else:
                    row += rows
            return
        source = pa.memory_map(self.path)
        reader = ipc.open_file(source) if self.fmt == "ipc" else ipc.open_stream(source)
        row = 0
        if self.fmt == "ipc":
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                yield row, batch
                row += batch.num_rows
        else:
            for batch in reader:
                yield row, batch
                row += batch.num_rows

    def _part(self, table: pa.Table, end: int) -> Part:
        rejected: list[tuple[int, bytes, str]] = []
        if self.time_column is None:
            times = made_times(self.options, np.arange(end - table.num_rows, end))
            table = table.add_column(0, "time", pa.array(times, pa.int64()))
            return Part(table, end, self._nbytes(table, rejected), rejected)
        options = self.options
        times, wrong = time_ns(
            table.column(self.time_column), options.time_unit, options.timezone or "UTC", options.time_format
        )
        if len(wrong):
            values = table.column(self.time_column)
            rejected = [
                (
                    INVALID_TIME,
                    row_bytes(table, int(i)),
                    f"column {self.time_column!r}: {values[int(i)].as_py()!r} is not a time",
                )
                for i in wrong
            ]
            keep = np.ones(table.num_rows, dtype=bool)
            keep[wrong] = False
            table, times = table.filter(pa.array(keep)), times[keep]
        table = table.drop_columns([self.time_column]).add_column(0, "time", pa.array(times, pa.int64()))
        return Part(table, end, self._nbytes(table, rejected), rejected)

    def _nbytes(self, table: pa.Table, rejected: list[tuple[int, bytes, str]]) -> int:
        """The file's bytes a part of ``table`` and ``rejected`` rows stands for (its share of the rows)."""
        if self.rows:
            rows: int = table.num_rows + len(rejected)
            return self.size * rows // self.rows
        nbytes: int = table.nbytes
        return nbytes


def parquet_reader(path: str | Path, options: ReaderOptions) -> ArrowReader:
    """The reader of Parquet file ``path``."""
    return ArrowReader(path, options, "parquet")


def arrow_reader(path: str | Path, options: ReaderOptions) -> ArrowReader:
    """The reader of Arrow IPC file ``path`` (file or stream format, told apart by the magic bytes)."""
    return ArrowReader(path, options, "arrow")
