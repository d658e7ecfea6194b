"""fluentd's ``regexp`` parser: ``expression``'s named groups are the record's fields.

The expression is a Ruby regexp (see :mod:`..rubyre`), searched in the
line as Ruby's ``match`` does (not anchored unless it says ``^``), over the
line's UTF-8 bytes as fluentd's in_tail matches it (``.`` is one byte; a
group that cuts a character in two keeps the bytes it has as ``\\xHH``). A line
it does not match is rejected, ``pattern not matched``, as fluentd warns
and drops it; a group that took no part in the match is no field of that
line (null). Time, null values and types as :mod:`..records` says; the
time key defaults to ``time``.
"""

from __future__ import annotations

import pyarrow as pa

from ...lines import Lines, Rows
from ...options import LogOptions
from ..config import ParseConfig, ParseConfigError
from ..records import PATTERN_NOT_MATCHED, RecordBuilder
from ..rubyre import ruby_regexp


class RegexpParser:
    """``parse(lines, options)``: the named groups of ``config.expression`` in each line."""

    def __init__(self, config: ParseConfig):
        if not config.expression:
            raise ParseConfigError("regexp parser: 'expression' parameter is required")
        self.pattern = ruby_regexp(
            config.expression, ignorecase=config.ignorecase, multiline=config.multiline, binary=True
        )
        if not self.pattern.groupindex:
            raise ParseConfigError(
                "No named captures in 'expression' parameter. The regexp must have at least one named capture"
            )
        self.names = list(self.pattern.groupindex)
        self.records = RecordBuilder(config)

    def parse(self, lines: Lines, options: LogOptions) -> Rows:
        """Rows of the lines that match; the others are faults."""
        search, numbers = self.pattern.search, [self.pattern.groupindex[name] for name in self.names]
        missing = (None,) * len(numbers)
        found: list[tuple] = []
        faults: dict[int, str] = {}
        for i, line in enumerate(lines.text.cast(pa.large_binary()).to_pylist()):
            match = search(line)
            if match is None:
                faults[i] = PATTERN_NOT_MATCHED
                found.append(missing)
            else:
                found.append(match.group(*numbers) if len(numbers) > 1 else (match.group(numbers[0]),))
        columns = list(zip(*found)) if found else [() for _ in numbers]
        fields = {name: _text(column) for name, column in zip(self.names, columns)}
        return self.records.to_rows(fields, len(lines), faults, options)


def _text(values: tuple) -> pa.Array:
    """A group's bytes of each line as text (bytes that are not UTF-8 written ``\\xHH``)."""
    column = pa.array(values, pa.large_binary())
    try:
        return column.cast(pa.large_string())
    except pa.ArrowInvalid:
        text = [None if v is None else v.decode("utf-8", "backslashreplace") for v in values]
        return pa.array(text, pa.large_string())
