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

from ...lines import Lines, Rows
from ...options import LogOptions
from ..config import ParseConfig
from ..fieldcols import nil_time_faults, record_columns
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
        faults: dict[int, str] = {}
        records = []
        for i, line in enumerate(lines.text.to_pylist()):
            try:
                records.append(self.record(line))
            except _Clash as exc:
                faults[i] = str(exc)
                records.append({})
        key = self.config.effective_time_key
        if key is not None:
            nil = np.array([key in r and r[key] is None for r in records], dtype=bool)
            nil_time_faults(self.config, nil, faults)
        return self.records.to_rows(record_columns(records), len(records), faults, options)

    def record(self, line: str) -> dict[str, str | None]:
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


class _Clash(ValueError):
    """Ruby refused to compare a UTF-8 delimiter with a binary line (the message is Ruby's)."""
