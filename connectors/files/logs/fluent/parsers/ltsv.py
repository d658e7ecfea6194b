"""fluentd's ``ltsv`` parser: ``label:value`` pairs split on ``delimiter`` (a tab) or ``delimiter_pattern``.

Each piece that holds ``label_delimiter`` (``:``) is a field, split at its
first ``label_delimiter`` (``a:b:c`` is ``a`` = ``b:c``; ``a:`` is ``a`` =
``""``); a piece without one is ignored; a repeated label keeps its last
value. Splitting is Ruby's (see :mod:`..rubysplit`: a single space splits
on white space runs as awk does; a label delimiter of one space can leave a
label without value, nil); ``delimiter_pattern`` is a Ruby regexp matched
over the line's bytes as in_tail reads them. Non-ASCII delimiters cannot
meet non-ASCII text (fluentd: ``incompatible character encodings``). The time
key defaults to ``time``.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import LineError
from ...lines import Lines, Rows
from ...options import LogOptions
from ..config import ParseConfig
from ..fieldcols import nil_time_reason, pair_columns
from ..records import RecordBuilder
from ..rubyre import ruby_regexp
from ..rubysplit import INCOMPATIBLE, clashes, ruby_split

REGEXP_CLASH = "incompatible encoding regexp match (UTF-8 regexp with ASCII-8BIT string)"


class LTSVParser:
    """``parse(lines, options)``: each line's labelled values."""

    def __init__(self, config: ParseConfig):
        self.config = config
        self.delimiter = "\t" if config.delimiter is None else config.delimiter
        self.label = config.label_delimiter
        self.pattern: re.Pattern[bytes] | None = None
        if config.delimiter_pattern is not None:
            self.pattern = ruby_regexp(config.delimiter_pattern, binary=True)
        self.records = RecordBuilder(config)

    def parse(self, lines: Lines, options: LogOptions) -> Rows:
        """Rows of every line (only a nil time or an encoding clash is a fault)."""
        text, count = lines.text, len(lines)
        faults: dict[int, str] = {}
        if self._arrow_splits():
            rows, labels, values = self._arrow_pairs(text)
        else:
            rows, labels, values = self._line_pairs(text, faults)
        return self.records.to_rows(pair_columns(rows, labels, values, count), count, faults, options)

    def _arrow_splits(self) -> bool:
        """Whether Arrow splits as Ruby does here: plain ASCII delimiters, neither one space nor empty."""
        plain = (self.delimiter, self.label)
        return self.pattern is None and all(d.isascii() and d not in ("", " ") for d in plain)

    def _arrow_pairs(self, text: pa.Array) -> tuple[np.ndarray, pa.Array, pa.Array]:
        """Each piece with a label delimiter as ``(line, label, value)``, split by Arrow."""
        pieces = pc.split_pattern(text, self.delimiter)
        rows = pc.list_parent_indices(pieces).to_numpy(zero_copy_only=False)
        flat = pieces.flatten()
        labelled = pc.match_substring(flat, self.label)
        pairs = pc.split_pattern(flat.filter(labelled), self.label, max_splits=1)
        rows = rows[labelled.to_numpy(zero_copy_only=False)]
        return rows, pc.list_element(pairs, 0), pc.list_element(pairs, 1)

    def _line_pairs(self, text: pa.Array, faults: dict[int, str]) -> tuple[np.ndarray, pa.Array, pa.Array]:
        """The same, line by line (Ruby's awk split, a regexp, an encoding clash; a nil time is a fault)."""
        rows: list[int] = []
        labels: list[str] = []
        values: list[str | None] = []
        key = self.config.effective_time_key
        for i, line in enumerate(text.to_pylist()):
            try:
                record = self._record(line)
            except _Clash as exc:
                faults[i] = str(exc)
                continue
            if key in record and record[key] is None:
                faults[i] = nil_time_reason(self.config)
            rows += [i] * len(record)
            labels += record
            values += record.values()
        return np.array(rows, dtype=np.int64), pa.array(labels, pa.large_string()), pa.array(values, pa.large_string())

    def _record(self, line: str) -> dict[str, str | None]:
        """The fields of one line; _Clash where Ruby raises an encoding error."""
        record: dict[str, str | None] = {}
        for piece in self._pieces(line):
            if clashes(piece, self.label):
                raise _Clash(INCOMPATIBLE)
            if self.label not in piece:
                continue
            parts = ruby_split(piece, self.label, 2)
            label = parts[0] if parts else ""
            record[label] = parts[1] if len(parts) > 1 else None
        return record

    def _pieces(self, line: str) -> list[str]:
        if self.pattern is None:
            if clashes(line, self.delimiter):
                raise _Clash(INCOMPATIBLE)
            return ruby_split(line, self.delimiter)
        data = line.encode()
        if not self.pattern.pattern.isascii() and not data.isascii():
            raise _Clash(REGEXP_CLASH)
        return [p.decode(errors="backslashreplace") for p in self.pattern.split(data) if p is not None]


class _Clash(LineError):
    """Ruby refused to compare a UTF-8 delimiter with a binary line (the message is Ruby's)."""
