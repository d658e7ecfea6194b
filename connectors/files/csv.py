"""CSV files: blocks of whole rows parsed by ``pyarrow.csv``, positions at row boundaries.

The file is read in blocks of ``options.block_bytes``, each cut after its last
row boundary (a newline outside quotes: found with numpy by counting the
quotes before each newline, so quoted fields may hold newlines). A part's
``end`` is the byte offset after its last row, so a resumed import starts
exactly at the next row. The first row is the header. A compressed file
(:mod:`.compression`) is read decompressed; its offsets are the content's.

Types: ``options.column_types`` (the stream's schema) if given, else those
:meth:`CsvReader.file_types` infers from the whole file (:class:`_Tally`:
integers among floats make a float column; a column of numbers with a few
stray words, at most :data:`STRAY_SHARE` of its values, stays a number
column and the rows of the words are quarantined), else what pyarrow infers
from the first block; kept for the rest of the file so that every part has
the same types. The time column (:mod:`.times`) is read as text and
converted by :func:`connectors.files.times.time_ns`. Column names are the
header's, as :func:`connectors.files.column_names` makes them.

Bad rows never fail the file: a row with the wrong number of fields, or
whose time is not a time, is rejected verbatim (its bytes, without the line
ending) with the reason. A block with a value pyarrow cannot convert to its
column's type is read again with those columns as text, so that the import
engine can quarantine exactly the rows whose values do not fit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from windvane.ingest.batch import INVALID_TIME

from . import FileFormatError, Part, ReaderOptions, column_names
from .compression import open_data
from .times import find_time_column, time_ns

_NEWLINE, _QUOTE, _CR = 10, 34, 13
#: The largest share of a column's values that may be words (not numbers) in a column of numbers: more,
#: and the column is text.
STRAY_SHARE = 0.01
_INTEGER = r"^\s*[+-]?[0-9]+\s*$"
_NUMBER = r"^\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*$|^\s*[+-]?(?i:nan|inf|infinity)\s*$"


class _Tally:
    """What one column's values are, block after block: the types pyarrow inferred, and how many of them are
    integers, other numbers and words."""

    def __init__(self) -> None:
        self.types: set[pa.DataType] = set()
        self.values = self.fractions = self.words = 0

    def add(self, values: pa.ChunkedArray) -> None:
        count = len(values) - values.null_count
        if not count:
            return
        self.types.add(values.type)
        self.values += count
        if pa.types.is_floating(values.type):
            self.fractions += count
        elif pa.types.is_string(values.type):
            numbers = pc.sum(pc.match_substring_regex(values, _NUMBER)).as_py() or 0
            integers = pc.sum(pc.match_substring_regex(values, _INTEGER)).as_py() or 0
            self.words += count - numbers
            self.fractions += numbers - integers
        elif not pa.types.is_integer(values.type):
            self.words += count  # bool, times: no numbers

    def type(self) -> pa.DataType:
        """The column's type: the one type of its values, float64 for integers and floats, else a number type
        if at most STRAY_SHARE of its values are words, else text."""
        if not self.types:
            return pa.null()
        if len(self.types) == 1 and not pa.types.is_string(next(iter(self.types))):
            return next(iter(self.types))
        if self.words > STRAY_SHARE * self.values:
            return pa.string()
        return pa.float64() if self.fractions else pa.int64()


def record_ends(block: bytes | memoryview) -> np.ndarray:
    """Offsets of the newlines of ``block`` that end a row: those after an even number of quotes.

    ``block`` must start at a row boundary (a doubled quote inside a quoted
    field counts twice, so it keeps the parity).
    """
    data = np.frombuffer(block, dtype=np.uint8)
    newlines = np.flatnonzero(data == _NEWLINE)
    quotes = np.flatnonzero(data == _QUOTE)
    if not len(quotes):
        return newlines
    return newlines[np.searchsorted(quotes, newlines) % 2 == 0]


class _Rows:
    """The bytes of the non-empty rows of a block, as pyarrow numbers them (1-based, empty lines skipped)."""

    def __init__(self, block: bytes, ends: np.ndarray):
        starts = np.concatenate(([0], ends[:-1] + 1)) if len(ends) else np.zeros(0, dtype=np.int64)
        stops = ends.copy()
        if len(block) and (not len(ends) or ends[-1] != len(block) - 1):  # a last row without a newline
            starts = np.append(starts, ends[-1] + 1 if len(ends) else 0)
            stops = np.append(stops, len(block))
        data = np.frombuffer(block, dtype=np.uint8)
        carriage = stops > starts
        carriage[carriage] = data[stops[carriage] - 1] == _CR
        stops = stops - carriage
        keep = stops > starts
        self.block = block
        self.starts, self.stops = starts[keep], stops[keep]

    def __len__(self) -> int:
        return len(self.starts)

    def raw(self, i: int) -> bytes:
        return self.block[self.starts[i] : self.stops[i]]


class CsvReader:
    """``reader(start)`` yields :class:`Part` objects of a CSV file from byte offset ``start``."""

    def __init__(self, path: str | Path, options: ReaderOptions | None = None, *, delimiter: str = ","):
        self.path = str(path)
        self.options = options if options is not None else ReaderOptions()
        self.block_bytes = options.block_bytes
        self.delimiter = delimiter
        header, self.header_end = self._header()
        self.names, self.notes = column_names(self.path, header, options.rename)
        self.time_column = find_time_column(self.names, options.time_column, self.path)
        self.types: dict[str, pa.DataType] = {n: t for n, t in options.column_types.items() if n in self.names}
        self.types[self.time_column] = pa.string()
        self._inferred = bool(options.column_types)
        self._unit = options.time_unit

    def _header(self) -> tuple[list[str | None], int]:
        with open_data(self.path) as f:
            head = f.read(1 << 20)
        ends = record_ends(head)
        if not len(ends) and len(head) == 1 << 20:
            raise FileFormatError(f"{self.path}: no end of the header row in the first MiB")
        end = int(ends[0]) + 1 if len(ends) else len(head)
        line = head[:end].removeprefix(b"\xef\xbb\xbf")
        if not line.strip():
            raise FileFormatError(f"{self.path}: empty file, or no header row")
        header = pacsv.read_csv(
            pa.py_buffer(line),
            read_options=pacsv.ReadOptions(autogenerate_column_names=True),
            parse_options=pacsv.ParseOptions(delimiter=self.delimiter),
            convert_options=pacsv.ConvertOptions(column_types={}, strings_can_be_null=False),
        )
        return [header.column(i)[0].as_py() for i in range(header.num_columns)], end

    def file_types(self) -> dict[str, pa.DataType]:
        """The type of each column over the whole file (one pass, a block at a time; see :class:`_Tally`),
        which the parts are then read as; ``options.column_types`` hold. A column without a value is ``null``."""
        tallies = {name: _Tally() for name in self.names if name not in self.options.column_types}
        tallies.pop(self.time_column, None)
        text = {self.time_column: pa.string()}
        for block, _, _ in self._blocks(self.header_end):
            try:  # in parallel, pyarrow takes each column's type from its first MiB and fails if the rest differ
                table = self._read(block, text, [], True, threads=True)
            except pa.ArrowInvalid:  # then one thread parses the block as one, inferring over all of it
                table = self._read(block, text, [], True, threads=False)
            for name, tally in tallies.items():
                tally.add(table.column(name))
        found = {name: tally.type() for name, tally in tallies.items()}
        self.types.update({n: t for n, t in found.items() if not pa.types.is_null(t)})
        found.update({n: t for n, t in self.types.items() if n != self.time_column})
        self._inferred = True
        return found

    def __call__(self, start: int | None) -> Iterator[Part]:
        first = start is None
        for block, ends, end in self._blocks(self.header_end if start is None else int(start)):
            nbytes = len(block) + (self.header_end if first else 0)
            first = False
            yield self._part(block, ends, end, nbytes)

    def _blocks(self, position: int) -> Iterator[tuple[bytes, np.ndarray, int]]:
        """``(block, its row ends, the offset after it)`` of whole rows from byte offset ``position`` on."""
        with open_data(self.path) as f:
            f.seek(position)
            carry = b""
            while True:
                chunk = f.read(self.block_bytes)
                block = carry + chunk
                if not block:
                    return
                at_end = len(chunk) < self.block_bytes
                ends = record_ends(block)
                if not at_end:
                    if not len(ends):  # a row longer than a block: read on
                        carry = block
                        continue
                    cut = int(ends[-1]) + 1
                    block, carry = block[:cut], block[cut:]
                else:
                    carry = b""
                end = position + len(block)
                yield bytes(block), ends, end
                position = end
                if at_end and not carry:
                    return

    def _parse(self, block: bytes, types: dict[str, pa.DataType], bad: list, text: bool = False) -> pa.Table:
        """The rows of ``block``; ``bad`` gets ``(row number, reason)`` of the rows skipped for their field count."""
        table = self._read(block, types, bad, text, threads=True)
        if bad:  # parsing in parallel numbers no row: parse again in one thread to know which were skipped
            bad.clear()
            table = self._read(block, types, bad, text, threads=False)
        return table

    def _read(self, block: bytes, types: dict[str, pa.DataType], bad: list, text: bool, threads: bool) -> pa.Table:
        def invalid(row: pacsv.InvalidRow) -> str:
            bad.append((row.number, f"{row.actual_columns} fields where the header has {row.expected_columns}"))
            return "skip"

        return pacsv.read_csv(
            pa.py_buffer(block),
            # Parallel blocks of 1 MiB use every core; one block in one thread numbers the rows.
            read_options=pacsv.ReadOptions(
                column_names=self.names,
                use_threads=threads,
                block_size=1 << 20 if threads else max(len(block) + 1, 1 << 20),
            ),
            parse_options=pacsv.ParseOptions(
                delimiter=self.delimiter, newlines_in_values=True, invalid_row_handler=invalid
            ),
            convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=text),
        )

    def _part(self, block: bytes, ends: np.ndarray, end: int, nbytes: int) -> Part:
        rows = _Rows(block, ends)
        bad: list[tuple[int, str]] = []
        try:
            table = self._parse(block, self.types, bad)
        except pa.ArrowInvalid:
            # A value that is not of its column's type: read those columns as text; the engine
            # quarantines the rows whose values do not fit (and names them).
            bad.clear()
            text = {n: pa.string() for n in self.names}
            table = self._parse(block, text, bad, text=True)
            table = table.set_column(
                self.names.index(self.time_column), self.time_column, pc.fill_null(table.column(self.time_column), "")
            )
        if not self._inferred:
            # The first block's types hold for the whole file (a column with no value yet stays open).
            self.types.update({f.name: f.type for f in table.schema if not pa.types.is_null(f.type)})
            self._inferred = True
        rejected = [(INVALID_TIME, rows.raw(number - 1), why) for number, why in bad]
        skipped = {number - 1 for number, _ in bad}
        index = np.array([i for i in range(len(rows)) if i not in skipped], dtype=np.int64) if skipped else None
        if len(index if index is not None else rows) != table.num_rows:
            raise FileFormatError(
                f"{self.path}: {table.num_rows} rows parsed where {len(rows)} were found "
                f"before byte {end}; the file's quoting is not CSV"
            )
        times, wrong = time_ns(table.column(self.time_column), self._unit, self.options.timezone or "UTC")
        if len(wrong):
            values = table.column(self.time_column)
            for i in wrong:
                i = int(i)
                rejected.append(
                    (
                        INVALID_TIME,
                        rows.raw(index[i] if index is not None else i),
                        f"column {self.time_column!r}: {values[i].as_py()!r} is not a time "
                        "(ISO 8601 or an epoch number)",
                    )
                )
            keep = np.ones(table.num_rows, dtype=bool)
            keep[wrong] = False
            table, times = table.filter(pa.array(keep)), times[keep]
            index = (index if index is not None else np.arange(len(rows)))[keep]
        table = table.drop_columns([self.time_column]).add_column(0, "time", pa.array(times, pa.int64()))
        raw = rows.raw if index is None else (lambda i: rows.raw(int(index[i])))
        return Part(table, end, nbytes, rejected, raw=raw)


def csv_reader(path: str | Path, options: ReaderOptions) -> CsvReader:
    """The reader of CSV file ``path`` (its header row is read now: FileFormatError if it has none)."""
    return CsvReader(path, options)
