"""fluentd's ``tsv`` parser: ``keys`` name the values of each line, split on ``delimiter`` (default a tab).

As Ruby's ``split(delimiter, number of keys)``: the last key takes the rest
of the line (delimiters included), keys past the values are nil (a nil time
field is rejected as fluentd's time parser rejects it), an empty line has no
values; a single space splits on runs of white space as awk does. No quoting.
There is no time key unless ``time_key`` says so. A non-ASCII delimiter
cannot meet a line with non-ASCII text (fluentd: ``incompatible character
encodings``). Arrow splits the lines; Python the few it cannot.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...lines import Lines, Rows
from ...options import LogOptions
from ..config import KEYS_HINT, ParseConfig, ParseConfigError
from ..fieldcols import assemble, nil_time_faults, nth_columns
from ..records import RecordBuilder
from ..rubysplit import INCOMPATIBLE, clashes, ruby_split


class TSVParser:
    """``parse(lines, options)``: each line's values named by ``config.keys``."""

    def __init__(self, config: ParseConfig):
        if not config.keys:
            raise ParseConfigError(f"tsv parser: 'keys' parameter is required{KEYS_HINT}")
        self.config = config
        self.keys = list(config.keys)
        self.delimiter = "\t" if config.delimiter is None else config.delimiter
        self.records = RecordBuilder(config)

    def parse(self, lines: Lines, options: LogOptions) -> Rows:
        """Rows of every line (only a nil time or an encoding clash is a fault)."""
        text, count, width = lines.text, len(lines), len(self.keys)
        faults: dict[int, str] = {}
        delimiter = self.delimiter
        simple = pc.not_equal(text, "")
        if not delimiter.isascii():
            simple = pc.and_(simple, pc.string_is_ascii(text))
        if delimiter in (" ", ""):
            simple = pa.array(np.zeros(count, dtype=bool))

        def line_split(i: int, line: str) -> list[str | None] | None:
            if clashes(line, delimiter):
                faults[i] = INCOMPATIBLE
                return None
            return list(ruby_split(line, delimiter, width))

        lists = assemble(
            text,
            simple.to_numpy(zero_copy_only=False),
            lambda easy: pc.split_pattern(easy, delimiter, max_splits=width - 1),
            lambda indexes, hard: [line_split(i, line) for i, line in zip(indexes, hard)],
        )
        columns, _ = nth_columns(lists, width)
        fields = dict(zip(self.keys, columns))  # a repeated key: its last value, as Ruby's Hash keeps it
        key = self.config.effective_time_key
        if key in fields:
            nil_time_faults(self.config, ~fields[key].is_valid().to_numpy(zero_copy_only=False), faults)
        return self.records.to_rows(fields, count, faults, options)
