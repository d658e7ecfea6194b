"""netCDF-4 (HDF5, through h5netcdf and h5py): one variable per column along an unlimited ``time`` dimension.

``xarray.open_dataset(path)`` gives ``time`` as datetime64[ns] (CF units
``nanoseconds since 1970-01-01T00:00:00Z``) and every column with its dims
(``(time, channel)`` for vibration samples). Strings are netCDF ``string``
(variable-length UTF-8); bytes, which a netCDF string cannot hold (it ends
at the first NUL), are a variable-length ``ubyte`` type named ``bytes``,
read back as one uint8 array per value (``bytes(value)`` is the original);
booleans are int8 with ``dtype = "bool"``, which xarray decodes back to
bool. An integer column with a missing value (``missing`` attribute) has it
as the variable's ``_FillValue``: xarray reads those rows as NaN. The file's attributes are the stream's, plus ``stream`` (its tag).

Number variables (``time`` included) are compressed with netCDF-4's
standard filters, shuffle then zlib (deflate level :data:`DEFLATE_LEVEL`),
which every netCDF-4 reader decodes. Text and bytes are not: HDF5 keeps
variable-length values in its global heap, which filters do not reach
(netCDF-C refuses filters on such variables). Each variable is chunked by
size, not as the stream: a power of two of rows making at most
:data:`CHUNK_BYTES` (a variable-length value counts as the 16-byte
reference its chunk holds), fewer when a chunk of every column together
would exceed :data:`_GATHER_BYTES` (rows are gathered so that each write
covers whole chunks, which HDF5 then compresses once), and never more rows
than the export can write: a small export is one small chunk per variable.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from ..blocks import ColumnLayout, Layout
from ..errors import ExportError
from .columns import TIME_ATTRS, ChunkWriter, attribute, column_values, fill_value, time_values

#: The raw bytes a variable's chunk is at most: more than half of that unless the export is small or its
#: columns many or wide (see _GATHER_BYTES).
CHUNK_BYTES = 4 << 20
#: zlib level. On sensor-like numbers (int64 times, noisy float32, rounded float64) 4 writes about as fast
#: as 1 and much faster than 6, to nearly 6's size.
DEFLATE_LEVEL = 4
#: Raw bytes of rows (as the layout estimates them) gathered before a write, at most: writes cover whole chunks
#: of every variable, so its chunks together take no more: the process grows by about this much whatever the
#: export's size, and more with a larger bound.
_GATHER_BYTES = 8 << 20
#: What a variable-length value takes in its chunk: a reference into HDF5's global heap.
_VLEN_REFERENCE = 16


def _floor_pow2(n: float) -> int:
    return 1 << max(0, int(n).bit_length() - 1) if n >= 1 else 1


def _row_bytes(column: ColumnLayout) -> int:
    """What one row of ``column`` takes in its variable's chunks."""
    item = _VLEN_REFERENCE if column.kind != "number" else np.dtype(column.dtype).itemsize
    return item * math.prod(column.inner)


def chunk_rows(layout: Layout, rows: int) -> tuple[dict[str, int], int]:
    """Rows per chunk of each variable (``time`` and each column), and the rows a write gathers.

    Powers of two, so that a write of a multiple of the largest chunk covers
    whole chunks of every variable; all capped so that the rows gathered
    stay within :data:`_GATHER_BYTES`, and at ``rows`` (then one write of
    everything at the end covers every chunk whole).
    """
    widths = {"time": 8, **{c.name: _row_bytes(c) for c in layout.columns}}
    cap = _floor_pow2(_GATHER_BYTES / max(layout.row_bytes, 1))
    chunks = {name: min(_floor_pow2(CHUNK_BYTES / width), cap) for name, width in widths.items()}
    gather = max(chunks.values())
    if rows < gather:
        limit = max(rows, 1)
        return {name: min(size, limit) for name, size in chunks.items()}, limit
    return chunks, gather


def _dimensions(layout: Layout) -> dict[str, int | None]:
    dims: dict[str, int | None] = {"time": None}  # unlimited: grows block by block
    for column in layout.columns:
        for name, size in zip(column.dims[1:], column.inner):
            if dims.setdefault(name, size) != size:
                raise ExportError(
                    f"columns of stream {layout.tag!r} use dimension {name!r} with sizes {dims[name]} "
                    f"and {size}; netCDF needs one size per dimension: export another format"
                )
    return dims


class Writer(ChunkWriter):
    """Writes a netCDF-4 file at ``path``: tables :meth:`write` takes are gathered into chunks of each
    variable; :meth:`close` writes the last and ends the file (see :class:`export.formats.Writer`)."""

    def __init__(self, path: str, layout: Layout, rows: int):
        chunks, gather = chunk_rows(layout, rows)
        super().__init__(gather)
        try:
            import h5netcdf
            import h5py
        except ImportError as exc:
            raise ExportError(
                f"netCDF export needs h5netcdf and h5py ({exc}); install them: pip install h5netcdf h5py"
            ) from None
        self._layout = layout
        dims = _dimensions(layout)
        # The HDF5 file is opened here, its netCDF view over it: bytes values are written to the HDF5 datasets
        # directly (see _append). Creation order is tracked, as netCDF-4 readers expect.
        self._h5 = h5py.File(path, "w", track_order=True)
        try:
            self._file = h5netcdf.File(self._h5, "w")
        except BaseException:
            self._h5.close()
            raise
        try:
            self._file.dimensions = dims
            self._file.attrs.update({k: attribute(v) for k, v in {**layout.attrs, "stream": layout.tag}.items()})
            deflate = {"compression": "gzip", "compression_opts": DEFLATE_LEVEL, "shuffle": True}
            self._vars = {
                "time": self._file.create_variable("time", ("time",), np.int64, chunks=(chunks["time"],), **deflate)
            }
            self._vars["time"].attrs.update(TIME_ATTRS)
            bytes_type = None
            for c in layout.columns:
                attrs = {k: attribute(v) for k, v in c.attrs.items()}
                if c.kind == "str":
                    dtype = h5py.string_dtype()
                elif c.kind == "bytes":
                    bytes_type = bytes_type or self._file.create_vltype(np.uint8, "bytes")
                    dtype = bytes_type
                elif c.dtype == bool:
                    dtype, attrs["dtype"] = np.int8, "bool"
                else:
                    dtype = c.dtype
                filters = deflate if c.kind == "number" else {}
                var = self._file.create_variable(
                    c.key, c.dims, dtype, chunks=(chunks[c.name], *c.inner), fillvalue=fill_value(c), **filters
                )
                var.attrs.update(attrs)
                self._vars[c.key] = var
        except BaseException:
            self._close()
            raise

    def _append(self, table: pa.Table, start: int, stop: int) -> None:
        self._file.resize_dimension("time", stop)
        self._vars["time"][start:stop] = time_values(table)
        for c in self._layout.columns:
            data = column_values(table, c)
            var = self._vars[c.key]
            if c.kind == "bytes":
                leaves = np.empty(data.shape, dtype=object)
                leaves.ravel()[:] = [np.frombuffer(v, dtype=np.uint8) for v in data.ravel()]
                # h5py's __setitem__ turns equal-length values into a 2-D array and fails: write directly.
                self._h5[var.name].write_direct(leaves, dest_sel=np.s_[start:stop])
            elif c.kind == "str":
                try:
                    var[start:stop] = data.astype(object)
                except ValueError as exc:  # HDF5 strings end at a NUL
                    raise ExportError(
                        f"column {c.name!r} holds text netCDF cannot store ({exc}); "
                        "export it as parquet, arrow, csv or zarr"
                    ) from None
            else:
                var[start:stop] = data.astype(np.int8) if c.dtype == bool else data

    def _finish(self) -> None:
        self._close()

    def _close(self) -> None:
        """Close the netCDF view (which writes what it keeps) and then the HDF5 file under it."""
        try:
            self._file.close()
        finally:
            self._h5.close()
