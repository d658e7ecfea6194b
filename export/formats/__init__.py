"""The export formats: one writer module per format, looked up by name.

A writer is made with ``open(path, layout, rows)`` (``layout``: the stream's
:class:`~export.blocks.Layout`; ``rows``: at most that many rows
will be written, which array formats size their arrays by), takes the stream's rows as Arrow
tables with :meth:`Writer.write`, in order, and finishes the file with
:meth:`Writer.close`. It writes ``path`` only (a file, or a directory for
zarr); making that file appear atomically is the caller's job
(:mod:`export.files`). A writer that can take the stream's stored chunks
as they are (:class:`StoredChunkWriter`: zarr, whose arrays keep the
stream's chunks and codecs) is given them when the rows are whole chunks. Writer modules are imported on first use, so
that exporting Parquet never imports zarr or h5py.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import pyarrow as pa

from ..blocks import Layout
from ..errors import UnknownFormat


class Writer(Protocol):
    """What every format's writer does."""

    def write(self, table: pa.Table) -> None:
        """Append ``table``'s rows (the layout's schema) to the file."""

    def close(self) -> None:
        """Finish the file (footers, metadata); nothing is written after."""


@runtime_checkable
class StoredChunkWriter(Writer, Protocol):
    """A writer that can copy stream chunks as stored instead of encoding their values again."""

    def take_stored(self) -> frozenset[str]:
        """The stream arrays (keys: ``time``, the columns') whose stored chunks it takes from now on, through
        :meth:`write_stored`: those whose chunks are valid chunks of its own arrays as they are. The tables
        :meth:`write` takes then hold them, if at all, for counting only. Asked before the first write."""

    def write_stored(self, first: int, chunks: Mapping[str, Sequence[bytes | None]]) -> None:
        """Store ``chunks`` (key: the stream's stored chunks, in order; None: never written) as the output's
        chunks from chunk ``first`` on."""


@dataclass(frozen=True)
class Format:
    """A format: its name, the extension of its files, whether a file is a directory, and its writer."""

    name: str
    extension: str
    directory: bool
    module: str  # export.formats.<module> defines ``Writer(path, layout, rows)``
    description: str

    def open(self, path: str, layout: Layout, rows: int) -> Writer:
        writer: Writer = importlib.import_module(f"{__name__}.{self.module}").Writer(path, layout, rows)
        return writer


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("parquet", ".parquet", False, "parquet", "Apache Parquet, one row group per block"),
        Format("arrow", ".arrow", False, "arrow_ipc", "Arrow IPC file format (Feather v2)"),
        Format(
            "csv", ".csv", False, "csv_text", "CSV, ISO 8601 times with offset, bytes as text (base64: if not UTF-8)"
        ),
        Format("zarr", ".zarr", True, "zarr_group", "a zarr v3 group directory, CF time"),
        Format("netcdf", ".nc", False, "netcdf", "netCDF-4 (HDF5), CF time"),
    )
}


def format_named(name: str) -> Format:
    """The format called ``name``; :class:`UnknownFormat` listing the formats if there is none."""
    try:
        return FORMATS[name]
    except KeyError:
        raise UnknownFormat(f"unknown export format {name!r}; choose one of {', '.join(FORMATS)}") from None
