"""Parquet: one row group per block, the Arrow schema kept in the file (timestamp[ns, tz=UTC], fixed_size_list).

pyarrow stores the Arrow schema in the file's metadata, so
``pyarrow.parquet.read_table`` gives back exactly the stream's types:
``time`` as ``timestamp[ns, tz=UTC]`` (Parquet 2.6 keeps nanoseconds),
``large_string``, ``large_binary``, ``fixed_size_list`` for vibration
samples. Compression: snappy, pyarrow's default; dictionary encoding for
text columns only (on measured numbers it halved the write speed and made
the file larger: they have few repeated values).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from ..blocks import Layout


class Writer:
    """Writes a Parquet file at ``path``: each non-empty table :meth:`write` takes is one row group;
    :meth:`close` ends the file (see :class:`export.formats.Writer`)."""

    def __init__(self, path: str, layout: Layout, rows: int):
        text = [c.name for c in layout.columns if c.kind == "str"]
        self._writer = pq.ParquetWriter(path, layout.schema, version="2.6", store_schema=True, use_dictionary=text)

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            self._writer.write_table(table, row_group_size=table.num_rows)

    def close(self) -> None:
        self._writer.close()
