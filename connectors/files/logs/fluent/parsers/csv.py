"""fluentd's ``csv`` parser: ``keys`` name the values of each line, split on ``delimiter`` (default ``,``).

``parser_engine`` (alias ``parser_type``) ``normal`` reads each line as
Ruby's CSV does (see :mod:`..rubycsv`): a malformed line is rejected with
Ruby's message (``Illegal quoting in line 1.``, ``Unclosed quoted field in
line 1.``, ``Any value after quoted field isn't allowed in line 1.``), an
empty line too (fluentd fails on it: ``wrong argument type NilClass (must
respond to :each)``); an empty unquoted value is nil. ``fast`` is fluentd's
own splitter: it rejects nothing, an empty line is an empty record, and a
line with more values than keys puts the last extra one under the empty
name (fluentd's ``nil`` key, written ``""`` by its JSON).

Values past the keys are dropped; keys past the values are nil (a nil time
field is rejected as fluentd's time parser rejects it). There is no time key
unless ``time_key`` says so. Lines without quotes or carriage returns are
split by Arrow; the others line by line.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...lines import Lines, Rows, add_faults
from ...options import LogOptions
from ..config import KEYS_HINT, ParseConfig, ParseConfigError
from ..fieldcols import assemble, empty_as_nil, last_column, nil_time_faults, nth_columns
from ..records import RecordBuilder
from ..rubycsv import MalformedCSV, csv_line, fast_line, quick_csv_lines, well_formed
from ..rubysplit import INCOMPATIBLE, clashes

ENGINES = ("normal", "fast")
NIL_LINE = "wrong argument type NilClass (must respond to :each)"
EXTRA_KEY = ""  # fluentd's fast engine stores values past the keys under a nil key


class CSVParser:
    """``parse(lines, options)``: each line's values named by ``config.keys``."""

    def __init__(self, config: ParseConfig):
        if not config.keys:
            raise ParseConfigError(f"csv parser: 'keys' parameter is required{KEYS_HINT}")
        engine = config.parser_engine or config.parser_type or "normal"
        if engine not in ENGINES:
            raise ParseConfigError(f"csv parser: valid options are normal,fast but got {engine}")
        self.fast = engine == "fast"
        self.delimiter = "," if config.delimiter is None else config.delimiter
        if not self.delimiter and not self.fast:
            raise ParseConfigError("csv parser: :col_sep must be 1 or more characters")
        self.config = config
        self.keys = list(config.keys)
        self.records = RecordBuilder(config)

    def parse(self, lines: Lines, options: LogOptions) -> Rows:
        """Rows of every line; malformed ones (normal engine) are faults."""
        text, count = lines.text, len(lines)
        faults: dict[int, str] = {}
        if not self.fast and not self.delimiter.isascii():
            # Ruby cannot convert the separator to the binary lines' encoding: every line fails
            first = next(c for c in self.delimiter if not c.isascii())
            add_faults(faults, np.ones(count, dtype=bool), f"U+{ord(first):04X} from UTF-8 to ASCII-8BIT")
            return self.records.to_rows({}, count, faults, options)
        lists = self._lists(text, faults)
        columns, lengths = nth_columns(lists, len(self.keys))
        fields: dict[str, pa.Array] = {}
        present: dict[str, np.ndarray] = {}
        for n, (name, column) in enumerate(zip(self.keys, columns)):
            # normal: Ruby's zip gives every key (nil past the values); fast: only the keys of values found
            found = lengths > n if self.fast else np.ones(count, dtype=bool)
            if name in fields:  # a repeated key: its last value there, as Ruby's Hash keeps it
                column = pc.if_else(pa.array(found), column, fields[name])
                found |= present[name]
            fields[name], present[name] = column, found
        over = lengths > len(self.keys)
        if self.fast and over.any():
            fields[EXTRA_KEY] = last_column(lists, lengths, over)
        key = self.config.effective_time_key
        if key in present:
            nil_time_faults(self.config, present[key] & ~fields[key].is_valid().to_numpy(zero_copy_only=False), faults)
        return self.records.to_rows(fields, count, faults, options)

    def _lists(self, text: pa.Array, faults: dict[int, str]) -> pa.ListArray:
        """Each line's values (null for a line at fault): Arrow splits the simple lines, Python reads the others
        (well-formed quoted lines with its ``csv`` module, the rest one by one)."""
        delimiter = self.delimiter
        quick = None
        if not self.fast and len(delimiter) == 1:
            quick = pc.match_substring_regex(text, well_formed(delimiter)).to_numpy(zero_copy_only=False)

        def read(indexes: list[int], lines: list[str]) -> list[list[str | None] | None]:
            chosen = [n for n, i in enumerate(indexes) if quick is not None and quick[i] and lines[n]]
            found: list[list[str | None] | None] = [None] * len(lines)
            for n, values in zip(chosen, quick_csv_lines([lines[n] for n in chosen], delimiter)):
                found[n] = values
            for n, i in enumerate(indexes):
                if found[n] is None:
                    found[n] = self._line(lines[n], i, faults)
            return found

        return assemble(
            text, self._simple(text), lambda simple: empty_as_nil(pc.split_pattern(simple, delimiter)), read
        )

    def _simple(self, text: pa.Array) -> np.ndarray:
        """Lines Arrow splits as Ruby would: not empty, no quote, no carriage return, a separator Ruby's split
        reads literally, no non-ASCII text against a non-ASCII separator."""
        if self.delimiter in (" ", ""):
            return np.zeros(len(text), dtype=bool)
        plain = pc.and_(pc.invert(pc.match_substring_regex(text, '["\\r]')), pc.not_equal(text, ""))
        if not self.delimiter.isascii():
            plain = pc.and_(plain, pc.string_is_ascii(text))
        mask: np.ndarray = plain.to_numpy(zero_copy_only=False)
        return mask

    def _line(self, line: str, i: int, faults: dict[int, str]) -> list[str | None] | None:
        """The values of one line (None: at fault, the reason in ``faults``)."""
        if self.fast:
            if clashes(line, self.delimiter):
                faults[i] = INCOMPATIBLE
                return None
            return fast_line(line, self.delimiter)
        try:
            fields = csv_line(line, self.delimiter)
        except MalformedCSV as exc:
            faults[i] = str(exc)
            return None
        if fields is None:
            faults[i] = NIL_LINE
        return fields
