"""CSV: one header line, one line per row, UTF-8; what ``pyarrow.csv.read_csv`` reads back to the same values.

- ``time``: ISO 8601 with the UTC offset, to the nanosecond
  (``2024-05-01T12:00:00.123456789+00:00``); pyarrow reads it as
  ``timestamp[ns, tz=UTC]``, the same instants.
- Text is quoted (commas, quotes doubled, newlines inside the quotes: read
  with ``ParseOptions(newlines_in_values=True)``); ``""`` is the empty string.
- Numbers in their shortest exact form; NaN as ``nan``, which pyarrow reads
  as null unless ``ConvertOptions(null_values=[])``.
- A column with an inner shape (vibration ``samples``, rows x channels)
  becomes one column per element, ``samples[0]``, ``samples[1]``, ... (as
  :meth:`arrays.Stream.to_pandas` names them).
- Bytes (a quarantine stream's ``raw`` lines) are written as the text
  they are where they are UTF-8 without control characters (but tab and
  line ends); others, and text that itself begins with ``base64:``, are
  ``base64:`` and their base64 (standard alphabet, padded). So a log line
  reads as itself, binary data stays out of the text, and every value
  comes back exactly: :func:`bytes_from_text` reads a cell back.
"""

from __future__ import annotations

import base64
import itertools
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ..blocks import Layout

_NAIVE = len("2024-05-01 12:00:00.123456789")  # what arrow prints for any ns time (years 1677-2262)
_OFFSET = np.frombuffer(b"+00:00", dtype=np.uint8)


def iso_times(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    """timestamp[ns, tz=UTC] values as ISO 8601 text with nanoseconds and the ``+00:00`` offset."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    # Arrow formats zoned times through the time zone database, value by value: format them as naive
    # UTC (much faster), then put the 'T' and the offset into the fixed-width text with numpy.
    text = pc.cast(values.view(pa.int64()).view(pa.timestamp("ns")), pa.string())
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int32, count=len(text) + 1, offset=4 * text.offset)
    if len(text) and (text.null_count or np.any(np.diff(offsets) != _NAIVE)):
        return pc.binary_join_element_wise(pc.strftime(values, format="%Y-%m-%dT%H:%M:%S"), "+00:00", "")
    width = _NAIVE + len(_OFFSET)
    out = np.empty((len(text), width), dtype=np.uint8)
    out[:, :_NAIVE] = np.frombuffer(text.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]].reshape(-1, _NAIVE)
    out[:, 10] = ord("T")
    out[:, _NAIVE:] = _OFFSET
    starts = np.arange(0, width * (len(text) + 1), width, dtype=np.int64)
    return pa.Array.from_buffers(pa.large_string(), len(text), [None, pa.py_buffer(starts), pa.py_buffer(out)])


#: What begins a bytes cell written as base64 (bytes that are not UTF-8 text, or text that begins so itself).
BASE64_PREFIX = "base64:"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # binary in text: all but tab, \n and \r


def _bytes_text(value: bytes) -> str:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or text.startswith(BASE64_PREFIX) or _CONTROL.search(text):
        return BASE64_PREFIX + base64.b64encode(value).decode("ascii")
    return text


def bytes_text(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Bytes values as CSV text: the text they are if UTF-8, else ``base64:`` and their base64 (see the module)."""
    return pa.array([None if v is None else _bytes_text(v) for v in values.to_pylist()], pa.large_string())


def bytes_from_text(cell: str) -> bytes:
    """The bytes a cell :func:`bytes_text` wrote stands for."""
    if cell.startswith(BASE64_PREFIX):
        return base64.b64decode(cell[len(BASE64_PREFIX) :])
    return cell.encode("utf-8")


class Writer:
    """Writes a CSV file at ``path``: the header at once, each table :meth:`write` takes as lines;
    :meth:`close` ends the file (see :class:`export.formats.Writer`)."""

    def __init__(self, path: str, layout: Layout, rows: int):
        self._layout = layout
        first = self._text_table(layout.schema.empty_table())
        self._sink = pa.OSFile(path, "wb")
        try:
            self._writer = pacsv.CSVWriter(
                self._sink, first.schema, write_options=pacsv.WriteOptions(quoting_style="needed")
            )
        except BaseException:
            self._sink.close()
            raise

    def _text_table(self, table: pa.Table) -> pa.Table:
        """``table`` as the CSV's columns: ISO times, one column per element of inner shapes, bytes as text."""
        names, values = ["time"], [iso_times(table.column("time"))]
        for column in self._layout.columns:
            data = table.column(column.name)
            for position in itertools.product(*(range(n) for n in column.inner)):
                element = data
                for index in position:
                    element = pc.list_element(element, index)
                if column.kind == "bytes":
                    element = bytes_text(element)
                names.append(f"{column.name}[{','.join(map(str, position))}]" if position else column.name)
                values.append(element)
        return pa.table(values, names=names)

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            self._writer.write_table(self._text_table(table))

    def close(self) -> None:
        try:
            self._writer.close()
        finally:
            self._sink.close()
