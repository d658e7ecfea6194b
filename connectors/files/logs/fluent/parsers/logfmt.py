"""The ``logfmt`` parser (``key=value key2="quoted value" flag``): fluentd users add it as a plugin.

The plugins (fluent-plugin-parser-logfmt and its kin) are not part of
fluentd; this parser reads a line as the reference decoder, Go's
``go-logfmt``, does (see :mod:`..logfmt`, which the test suite checks against
it): each key's value as text (a key without value, or ``key=``, is
``""``), a repeated key keeping its last value, a line the decoder refuses
rejected with its message. Values are text as in every fluentd text parser
(``types`` makes numbers; the Ruby plugin guesses them). The time key
defaults to ``time``, as the plugin's; time, null values and types as
:mod:`..records` says.
"""

from __future__ import annotations

from ...lines import Lines, Rows
from ...options import LogOptions
from ..config import ParseConfig
from ..fieldcols import record_columns
from ..logfmt import LogfmtError, logfmt_pairs
from ..records import RecordBuilder


class LogfmtParser:
    """``parse(lines, options)``: each line's keys and values."""

    def __init__(self, config: ParseConfig):
        self.records = RecordBuilder(config)

    def parse(self, lines: Lines, options: LogOptions) -> Rows:
        """Rows of the lines the decoder reads; the others are faults."""
        faults: dict[int, str] = {}
        records: list[dict[str, str | None]] = []
        for i, line in enumerate(lines.text.cast("large_binary").to_pylist()):
            try:
                records.append(dict(logfmt_pairs(line)))
            except LogfmtError as exc:
                faults[i] = str(exc)
                records.append({})
        return self.records.to_rows(record_columns(records), len(records), faults, options)
