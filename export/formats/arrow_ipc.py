"""Arrow IPC file format (Feather v2): the stream's Arrow tables as they are, one record batch per block.

``pyarrow.ipc.open_file(path).read_all()`` (or ``pyarrow.feather.read_table``)
gives back the stream's schema exactly, field metadata included. Not compressed.
"""

from __future__ import annotations

import pyarrow as pa

from ..blocks import Layout


class Writer:
    """Writes an Arrow IPC file at ``path``: each table :meth:`write` takes is one record batch; :meth:`close`
    ends the file (see :class:`export.formats.Writer`)."""

    def __init__(self, path: str, layout: Layout, rows: int):
        self._sink = pa.OSFile(path, "wb")
        try:
            self._writer = pa.ipc.new_file(self._sink, layout.schema)
        except BaseException:
            self._sink.close()
            raise

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            self._writer.write_table(table)

    def close(self) -> None:
        try:
            self._writer.close()
        finally:
            self._sink.close()
