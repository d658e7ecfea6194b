"""netCDF-4 (HDF5, through h5netcdf and h5py): one variable per column along an unlimited ``time`` dimension.

``xarray.open_dataset(path)`` gives ``time`` as datetime64[ns] (CF units
``nanoseconds since 1970-01-01T00:00:00Z``) and every column with its dims
(``(time, channel)`` for vibration samples). Strings are netCDF ``string``
(variable-length UTF-8); bytes, which a netCDF string cannot hold (it ends
at the first NUL), are a variable-length ``ubyte`` type named ``bytes``,
read back as one uint8 array per value (``bytes(value)`` is the original);
booleans are int8 with ``dtype = "bool"``, which xarray decodes back to
bool. Variables are chunked as the stream, uncompressed. The file's
attributes are the stream's, plus ``stream`` (its tag).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..blocks import Layout
from ..errors import ExportError
from .columns import TIME_ATTRS, ChunkWriter, attribute, column_values, time_values


def _dimensions(layout: Layout) -> dict[str, int | None]:
    dims: dict[str, int | None] = {"time": None}  # unlimited: grows block by block
    for column in layout.columns:
        for name, size in zip(column.dims[1:], column.inner):
            if dims.setdefault(name, size) != size:
                raise ExportError(f"columns of stream {layout.tag!r} use dimension {name!r} with sizes {dims[name]} "
                                  f"and {size}; netCDF needs one size per dimension: export another format")
    return dims


class Writer(ChunkWriter):
    def __init__(self, path: str, layout: Layout, rows: int):
        super().__init__(layout.chunk_rows)
        try:
            import h5netcdf
            import h5py
        except ImportError as exc:
            raise ExportError(f"netCDF export needs h5netcdf and h5py ({exc}); install them: pip install h5netcdf h5py") from None
        self._layout = layout
        dims = _dimensions(layout)
        self._file = h5netcdf.File(path, "w")
        try:
            self._file.dimensions = dims
            self._file.attrs.update({k: attribute(v) for k, v in {**layout.attrs, "stream": layout.tag}.items()})
            chunk = layout.chunk_rows
            self._vars = {"time": self._file.create_variable("time", ("time",), np.int64, chunks=(chunk,))}
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
                var = self._file.create_variable(c.key, c.dims, dtype, chunks=(chunk, *c.inner))
                var.attrs.update(attrs)
                self._vars[c.key] = var
        except BaseException:
            self._file.close()
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
                var._h5ds.write_direct(leaves, dest_sel=np.s_[start:stop])  # noqa: SLF001
            elif c.kind == "str":
                try:
                    var[start:stop] = data.astype(object)
                except ValueError as exc:  # HDF5 strings end at a NUL
                    raise ExportError(f"column {c.name!r} holds text netCDF cannot store ({exc}); "
                                      "export it as parquet, arrow, csv or zarr") from None
            else:
                var[start:stop] = data.astype(np.int8) if c.dtype == bool else data

    def _finish(self) -> None:
        self._file.close()
