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
the same types. The type pass parses each block as the parts read it and
keeps the tables (up to ``options.kept_bytes``): a part whose block's types
are the file's, or widen to them without a change of value (integers to
floats, a column without a value to any but text), takes its table instead
of parsing the block again. The time column (:mod:`.times`) is read as text and
converted by :func:`connectors.files.times.time_ns`. Column names are the
header's, as :func:`connectors.files.column_names` makes them.

The delimiter is ``options.delimiter``, else sniffed from the first rows
(:func:`sniff_delimiter`: ``,``, ``;``, tab or ``|``). ``options.na_values``
are missing values in every column, besides pyarrow's null markers
(``ConvertOptions.null_values``), before the types are inferred. A file
without a time column takes its times from ``options.time_from``
(:func:`connectors.files.times.made_times`; ``row`` numbers the rows from
the start of the file, so a resumed import counts the rows before it).

Bad rows never fail the file: a row with the wrong number of fields, or
whose time is not a time, is rejected verbatim (its bytes, without the line
ending) with the reason. A block with a value pyarrow cannot convert to its
column's type is read again with those columns as text, so that the import
engine can quarantine exactly the rows whose values do not fit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from windvane.ingest.batch import INVALID_TIME

from . import FileFormatError, Part, ReaderOptions, column_names
from .compression import compression_of, open_data
from .times import find_time_column, made_times, time_ns

_NEWLINE, _QUOTE, _CR = 10, 34, 13
T = TypeVar("T")
#: The largest share of a column's values that may be words (not numbers) in a column of numbers: more,
#: and the column is text.
STRAY_SHARE = 0.01
_INTEGER = r"^\s*[+-]?[0-9]+\s*$"
_NUMBER = r"^\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*$|^\s*[+-]?(?i:nan|inf|infinity)\s*$"
#: The delimiters :func:`sniff_delimiter` chooses among, the first winning ties.
DELIMITERS = (",", ";", "\t", "|")
#: How many rows after the header :func:`sniff_delimiter` looks at.
SNIFF_ROWS = 20


class _Tally:
    """What one column's values are, block after block: the types pyarrow inferred, and how many of them are
    integers, other numbers and words. ``most``: the most values the file can hold (None: not known)."""

    def __init__(self, most: int | None = None) -> None:
        self.types: set[pa.DataType] = set()
        self.values = self.fractions = self.words = 0
        self._most = most

    @property
    def settled(self) -> bool:
        """Whether the column is text whatever the rest of the file holds: more of its values are words than
        STRAY_SHARE of the most the file can hold (its words are not counted on)."""
        return self._most is not None and pa.string() in self.types and self.words > STRAY_SHARE * self._most

    def add(self, values: pa.ChunkedArray) -> None:
        if self.settled:
            return
        count = len(values) - values.null_count
        if not count:
            return
        self.types.add(values.type)
        self.values += count
        if pa.types.is_floating(values.type):
            self.fractions += count
        elif pa.types.is_string(values.type):
            numbers = pc.sum(pc.match_substring_regex(values, _NUMBER)).as_py() or 0
            # A column of words has no integers to count.
            integers = (pc.sum(pc.match_substring_regex(values, _INTEGER)).as_py() or 0) if numbers else 0
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


def _as_tallied(values: pa.ChunkedArray, nulls: pa.Array) -> pa.ChunkedArray:
    """``values`` as the tally counts them: text that is a null marker (``""`` among them) is missing, as it is
    when text can be missing, though a text column keeps it."""
    if not pa.types.is_string(values.type):
        return values
    missing: pa.ChunkedArray = pc.if_else(pc.is_in(values, value_set=nulls), None, values)
    return missing


def record_ends(block: bytes | memoryview) -> np.ndarray:
    """Offsets of the newlines of ``block`` that end a row: those after an even number of quotes.

    ``block`` must start at a row boundary (a doubled quote inside a quoted
    field counts twice, so it keeps the parity).
    """
    data = np.frombuffer(block, dtype=np.uint8)
    newlines = np.flatnonzero(data == _NEWLINE)
    if isinstance(block, bytes) and b'"' not in block:  # found in C, sparing a scan for the quotes' offsets
        return newlines
    quotes = np.flatnonzero(data == _QUOTE)
    if not len(quotes):
        return newlines
    ends: np.ndarray = newlines[np.searchsorted(quotes, newlines) % 2 == 0]
    return ends


def _read_ahead(items: Iterator[T]) -> Iterator[T]:
    """``items``, the next made by a thread while the caller works on this one (reading a file and finding its
    rows overlap parsing, which releases the GIL)."""
    with ThreadPoolExecutor(1, thread_name_prefix="windvane-csv-read") as pool:
        ahead = pool.submit(next, items, None)
        while (item := ahead.result()) is not None:
            ahead = pool.submit(next, items, None)
            yield item


def _has_zero(values: pa.ChunkedArray) -> bool:
    """Whether integers ``values`` hold a zero, whose text may be ``-0``: parsed as a float, -0.0."""
    return bool(pc.any(pc.equal(values, 0)).as_py())


def _read_at(path: str, offset: int, size: int) -> bytes:
    """``size`` bytes of the uncompressed file ``path`` from byte ``offset``."""
    with open(path, "rb") as f:
        return os.pread(f.fileno(), size, offset)


def _last_row_end(block: bytes) -> int:
    """The offset of the last newline of ``block`` that ends a row (-1: none); found in C if it has no quote."""
    if b'"' not in block:
        return block.rfind(b"\n")
    ends = record_ends(block)
    return int(ends[-1]) if len(ends) else -1


def sniff_delimiter(head: bytes) -> str:
    """The delimiter of the CSV text ``head`` (its header row, then rows): of :data:`DELIMITERS`, the one that
    splits the header into the most fields, the first :data:`SNIFF_ROWS` rows having as many; ``,`` if none
    splits it."""
    ends = record_ends(head)
    sample = head[: int(ends[min(SNIFF_ROWS, len(ends) - 1)]) + 1] if len(ends) else head
    best, most = ",", 1
    for delimiter in DELIMITERS:
        uneven: list[int] = []

        def invalid(row: pacsv.InvalidRow, uneven: list[int] = uneven) -> str:
            uneven.append(row.number)
            return "skip"

        try:
            table = pacsv.read_csv(
                pa.py_buffer(sample),
                read_options=pacsv.ReadOptions(autogenerate_column_names=True, use_threads=False),
                parse_options=pacsv.ParseOptions(
                    delimiter=delimiter, newlines_in_values=True, invalid_row_handler=invalid
                ),
                convert_options=pacsv.ConvertOptions(column_types={}, strings_can_be_null=False),
            )
        except pa.ArrowInvalid:
            continue
        if table.num_columns > most and not uneven:
            best, most = delimiter, table.num_columns
    return best


class _Rows:
    """The bytes of the non-empty rows of a block, as pyarrow numbers them (1-based, empty lines skipped)."""

    block: bytes | None  # None: read from the file when a row is asked for (:meth:`in_file`)

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
        self._file: tuple[str, int, int] | None = None

    def __len__(self) -> int:
        return len(self.starts)

    def in_file(self, path: str, offset: int, size: int) -> None:
        """Let go of the block, the ``size`` bytes of uncompressed file ``path`` from byte ``offset``: it is read
        again when a row is asked for (a part keeps the rows the engine may quarantine without the block in
        memory, which most parts never ask for)."""
        self.block, self._file = None, (path, offset, size)

    def raw(self, i: int) -> bytes:
        if self.block is None:
            assert self._file is not None, "a block let go of is in the file"
            self.block = _read_at(*self._file)
        return self.block[int(self.starts[i]) : int(self.stops[i])]


@dataclass(frozen=True)
class _Kept:
    """A block the type pass parsed, for its part: the table as parsed, the rows skipped for their field count,
    its rows, where it ends, and its bytes (None: read again from the file if need be)."""

    table: pa.Table
    bad: list[tuple[int, str]]
    rows: _Rows
    end: int
    block: bytes | None


class CsvReader:
    """``reader(start)`` yields :class:`Part` objects of a CSV file from byte offset ``start``."""

    def __init__(self, path: str | Path, options: ReaderOptions | None = None):
        self.path = str(path)
        self.options = options = options if options is not None else ReaderOptions()
        self.block_bytes = options.block_bytes
        with open_data(self.path) as f:
            head = f.read(1 << 20)
        self.delimiter = options.delimiter or sniff_delimiter(head.removeprefix(b"\xef\xbb\xbf"))
        header, self.header_end = self._header(head)
        self.names, self.notes = column_names(self.path, header, options.rename)
        self.time_column = find_time_column(self.names, options.time_column, self.path, options.time_from)
        self.types: dict[str, pa.DataType] = {n: t for n, t in options.column_types.items() if n in self.names}
        if self.time_column is not None:
            self.types[self.time_column] = pa.string()
        self._inferred = bool(options.column_types)
        self._unit = options.time_unit
        self._null_values = [*pacsv.ConvertOptions().null_values, *options.na_values]
        self._kept: dict[int, _Kept] = {}  # the type pass's blocks by their start offset

    def _header(self, head: bytes) -> tuple[list[str | None], int]:
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
        compressed = compression_of(self.path) is not None
        # A row holds a byte per field at least (its delimiters and line end).
        most = None if compressed else os.path.getsize(self.path) // len(self.names)
        tallies = {n: _Tally(most) for n in self.names if n not in self.options.column_types and n != self.time_column}
        kept, nulls = 0, pa.array(self._null_values, pa.string())
        self._kept.clear()
        for block, end, rows in _read_ahead(self._blocks_with_rows()) if tallies else ():
            bad: list[tuple[int, str]] = []
            table = self._parse_inferring(block, bad)
            if table is None:  # a value that is not of its given type: the tallied columns alone, as text can be
                table = self._read(block, {}, [], True, threads=False, columns=list(tallies))
                kept = self.options.kept_bytes + 1  # the parts read on from here
            elif kept + table.nbytes + (len(block) if compressed else 0) <= self.options.kept_bytes:
                if not compressed:
                    rows.in_file(self.path, end - len(block), len(block))
                self._kept[end - len(block)] = _Kept(table, bad, rows, end, block if compressed else None)
                kept += table.nbytes + (len(block) if compressed else 0)
            else:
                kept = self.options.kept_bytes + 1
            for name, tally in tallies.items():
                if not tally.settled:
                    tally.add(_as_tallied(table.column(name), nulls))
        found = {name: tally.type() for name, tally in tallies.items()}
        self.types.update({n: t for n, t in found.items() if not pa.types.is_null(t)})
        found.update({n: t for n, t in self.types.items() if n != self.time_column})
        self._inferred = True
        return found

    def _blocks_with_rows(self) -> Iterator[tuple[bytes, int, _Rows]]:
        """The blocks of the file from its first row, with their rows."""
        for block, end in self._blocks(self.header_end):
            yield block, end, _Rows(block, record_ends(block))

    def __call__(self, start: int | None) -> Iterator[Part]:
        first = start is None
        position = self.header_end if start is None else int(start)
        row = self._rows_before(position) if self.options.time_from == "row" else 0
        while (kept := self._kept.pop(position, None)) is not None:  # the type pass's blocks, in order
            nbytes = kept.end - position + (self.header_end if first else 0)
            first = False
            part = self._kept_part(position, kept, nbytes, row)
            row += part.table.num_rows + len(part.rejected)
            position = kept.end
            yield part
        self._kept.clear()
        for block, end in self._blocks(position):
            nbytes = len(block) + (self.header_end if first else 0)
            first = False
            part = self._part(block, _Rows(block, record_ends(block)), end, nbytes, row)
            row += part.table.num_rows + len(part.rejected)
            yield part

    def _kept_part(self, start: int, kept: _Kept, nbytes: int, row: int) -> Part:
        """The part of a block the type pass kept: its table, as the file's types make it, else the block parsed
        again."""
        table = self._typed(kept.table)
        if table is not None:
            return self._part_of(table, list(kept.bad), kept.rows, kept.end, nbytes, row)
        block = kept.block if kept.block is not None else _read_at(self.path, start, kept.end - start)
        return self._part(block, _Rows(block, record_ends(block)), kept.end, nbytes, row)

    def _rows_before(self, position: int) -> int:
        """How many rows (not empty lines) the file has between its header and byte offset ``position``."""
        count = 0
        for block, end in self._blocks(self.header_end):
            if end >= position:
                block = block[: len(block) - (end - position)]
            count += len(_Rows(block, record_ends(block)))
            if end >= position:
                return count
        return count

    def _blocks(self, position: int) -> Iterator[tuple[bytes, int]]:
        """``(block, the offset after it)`` of whole rows from byte offset ``position`` on."""
        with open_data(self.path) as f:
            f.seek(position)
            carry = b""
            while True:
                chunk = f.read(self.block_bytes)
                block = carry + chunk
                if not block:
                    return
                at_end = len(chunk) < self.block_bytes
                if not at_end:
                    cut = _last_row_end(block) + 1
                    if not cut:  # a row longer than a block: read on
                        carry = block
                        continue
                    block, carry = block[:cut], block[cut:]
                else:
                    carry = b""
                end = position + len(block)
                yield bytes(block), end
                position = end
                if at_end and not carry:
                    return

    def _parse(
        self,
        block: bytes,
        types: dict[str, pa.DataType],
        bad: list[tuple[int, str]],
        text: bool = False,
        threads: bool = True,
    ) -> pa.Table:
        """The rows of ``block``; ``bad`` gets ``(row number, reason)`` of the rows skipped for their field count."""
        table = self._read(block, types, bad, text, threads=threads)
        if bad and threads:  # parsing in parallel numbers no row: parse again in one thread to know which were skipped
            bad.clear()
            table = self._read(block, types, bad, text, threads=False)
        return table

    def _parse_inferring(self, block: bytes, bad: list[tuple[int, str]]) -> pa.Table | None:
        """The rows of ``block`` as a part reads them, the columns of no known type inferred over the block;
        None if a value is not of its column's given type."""
        try:  # in parallel, pyarrow takes each column's type from its first MiB and fails if the rest differ
            return self._parse(block, self.types, bad)
        except pa.ArrowInvalid:
            bad.clear()
        try:  # then one thread parses the block as one, inferring over all of it
            return self._parse(block, self.types, bad, threads=False)
        except pa.ArrowInvalid:
            bad.clear()
            return None

    def _typed(self, table: pa.Table) -> pa.Table | None:
        """``table`` as parsed by the type pass, as the file's types make it; None if a column would change its
        values (the block is then parsed again)."""
        for i, field in enumerate(table.schema):
            wanted = self.types.get(field.name, field.type)
            if field.type == wanted:
                continue
            if pa.types.is_null(field.type) and not pa.types.is_string(wanted):
                values = pa.nulls(table.num_rows, wanted)
            elif pa.types.is_integer(field.type) and pa.types.is_floating(wanted) and not _has_zero(table.column(i)):
                values = pc.cast(table.column(i), wanted, safe=False)  # rounded to the nearest, as parsing does
            else:  # text read as numbers, a column without a value as text ("" is not missing in text), or a zero
                return None
            table = table.set_column(i, field.with_type(wanted), values)
        return table

    def _read(
        self,
        block: bytes,
        types: dict[str, pa.DataType],
        bad: list[tuple[int, str]],
        text: bool,
        threads: bool,
        columns: list[str] | None = None,
    ) -> pa.Table:
        """The rows of ``block`` (``columns`` of them; None: all); ``bad`` gets the rows skipped for their field
        count."""

        def invalid(row: pacsv.InvalidRow) -> str:
            bad.append((row.number, f"{row.actual_columns} fields where the header has {row.expected_columns}"))
            return "skip"

        table = pacsv.read_csv(
            pa.py_buffer(block),
            # Parallel blocks of 1 MiB use every core; one block in one thread numbers the rows.
            read_options=pacsv.ReadOptions(
                column_names=self.names,
                use_threads=threads,
                block_size=1 << 20 if threads else max(len(block) + 1, 1 << 20),
            ),
            # Without a quote no value holds a newline: pyarrow then cuts its parallel blocks at any newline
            # instead of lexing the whole block for quotes first.
            parse_options=pacsv.ParseOptions(
                delimiter=self.delimiter, newlines_in_values=b'"' in block, invalid_row_handler=invalid
            ),
            convert_options=pacsv.ConvertOptions(
                column_types=types,
                strings_can_be_null=text,
                null_values=self._null_values,
                include_columns=columns or [],
            ),
        )
        if self.options.na_values and not text:  # text columns read with strings_can_be_null=False keep them
            table = self._na_as_missing(table)
        return table

    def _na_as_missing(self, table: pa.Table) -> pa.Table:
        """``table`` with the text cells that are one of ``options.na_values`` missing (but the time column's)."""
        tokens = pa.array(self.options.na_values, pa.string())
        for i, field in enumerate(table.schema):
            if pa.types.is_string(field.type) and field.name != self.time_column:
                values = table.column(i)
                table = table.set_column(i, field, pc.if_else(pc.is_in(values, tokens), None, values))
        return table

    def _part(self, block: bytes, rows: _Rows, end: int, nbytes: int, row: int = 0) -> Part:
        bad: list[tuple[int, str]] = []
        try:
            table = self._parse(block, self.types, bad)
        except pa.ArrowInvalid:
            # A value that is not of its column's type: read those columns as text; the engine
            # quarantines the rows whose values do not fit (and names them).
            bad.clear()
            text = {n: pa.string() for n in self.names}
            table = self._parse(block, text, bad, text=True)
            if self.time_column is not None:
                at = self.names.index(self.time_column)
                table = table.set_column(at, self.time_column, pc.fill_null(table.column(at), ""))
        if not self._inferred:
            # The first block's types hold for the whole file (a column with no value yet stays open).
            self.types.update({f.name: f.type for f in table.schema if not pa.types.is_null(f.type)})
            self._inferred = True
        return self._part_of(table, bad, rows, end, nbytes, row)

    def _part_of(
        self, table: pa.Table, bad: list[tuple[int, str]], rows: _Rows, end: int, nbytes: int, row: int
    ) -> Part:
        """The part of a block's ``rows`` parsed as ``table``, but for ``bad`` (its rows skipped for their field
        count), ending at offset ``end``."""
        rejected = [(INVALID_TIME, rows.raw(number - 1), why) for number, why in bad]
        skipped = {number - 1 for number, _ in bad}
        index = np.delete(np.arange(len(rows), dtype=np.int64), sorted(skipped)) if skipped else None
        if len(index if index is not None else rows) != table.num_rows:
            raise FileFormatError(
                f"{self.path}: {table.num_rows} rows parsed where {len(rows)} were found "
                f"before byte {end}; the file's quoting is not CSV"
            )
        if self.time_column is None:
            times = made_times(self.options, row + (index if index is not None else np.arange(len(rows))))
        else:
            table, times, index = self._column_times(table, rows, index, rejected)
        table = table.add_column(0, "time", pa.array(times, pa.int64()))
        raw = rows.raw if index is None else (lambda i: rows.raw(int(index[i])))
        return Part(table, end, nbytes, rejected, raw=raw)

    def _column_times(
        self, table: pa.Table, rows: _Rows, index: np.ndarray | None, rejected: list[tuple[int, bytes, str]]
    ) -> tuple[pa.Table, np.ndarray, np.ndarray | None]:
        """``table`` without its time column and its rows that have no time, their times, and the rows kept
        (``index``: the rows ``table`` holds, None: all); ``rejected`` gets the rows without a time."""
        assert self.time_column is not None
        options = self.options
        values = table.column(self.time_column)
        times, wrong = time_ns(values, self._unit, options.timezone or "UTC", options.time_format)
        table = table.drop_columns([self.time_column])
        if not len(wrong):
            return table, times, index
        what = f"--time-format {options.time_format!r}" if options.time_format else "ISO 8601 or an epoch number"
        for i in wrong:
            i = int(i)
            raw = rows.raw(index[i] if index is not None else i)
            why = f"column {self.time_column!r}: {values[i].as_py()!r} is not a time ({what})"
            rejected.append((INVALID_TIME, raw, why))
        keep = np.ones(table.num_rows, dtype=bool)
        keep[wrong] = False
        index = (index if index is not None else np.arange(len(rows)))[keep]
        return table.filter(pa.array(keep)), times[keep], index


def csv_reader(path: str | Path, options: ReaderOptions) -> CsvReader:
    """The reader of CSV file ``path`` (its header row is read now: FileFormatError if it has none)."""
    return CsvReader(path, options)
