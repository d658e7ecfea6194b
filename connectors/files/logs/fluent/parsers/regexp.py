"""fluentd's ``regexp`` parser: ``expression``'s named groups are the record's fields.

The expression is a Ruby regexp (see :mod:`..rubyre`), searched in the
line as Ruby's ``match`` does (not anchored unless it says ``^``), over the
line's UTF-8 bytes as fluentd's in_tail matches it (see
:mod:`..line_regexp`: RE2 over the whole array where that gives the same
groups). A line it does not match is rejected, ``pattern not matched``, as
fluentd warns and drops it, the reason saying where the line stopped matching
(:mod:`..stopped`: the last of the expression's fields it matches); a group that took no part in the match is no
field of that line (null). Time, null values and types as :mod:`..records`
says; the time key defaults to ``time``.

fluentd's ``nginx`` and ``apache_error`` parsers are this parser with a
default ``expression`` (and ``time_format``): :class:`RegexpParser`'s
subclasses set :attr:`RegexpParser.DEFAULTS`.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pyarrow as pa

from ...lines import Lines, Rows
from ...options import LogOptions
from ..config import ParseConfig, ParseConfigError
from ..line_regexp import LineRegexp
from ..records import RecordBuilder
from ..stopped import WhereStopped


class RegexpParser:
    """``parse(lines, options)``: the named groups of ``config.expression`` in each line."""

    #: Options this parser type gives a value when the section leaves them unset (fluentd's config_set_default).
    DEFAULTS: ClassVar[dict[str, str]] = {}

    def __init__(self, config: ParseConfig):
        config = config.replace(**{k: v for k, v in self.DEFAULTS.items() if getattr(config, k) is None})
        if not config.expression:
            raise ParseConfigError("regexp parser: 'expression' parameter is required")
        self.regexp = LineRegexp(config.expression, ignorecase=config.ignorecase, multiline=config.multiline)
        if not self.regexp.names:
            raise ParseConfigError(
                "No named captures in 'expression' parameter. The regexp must have at least one named capture"
            )
        self.names = self.regexp.names
        self.stopped = WhereStopped(config.expression, ignorecase=config.ignorecase, multiline=config.multiline)
        self.records = RecordBuilder(config)

    def fields(self, lines: Lines) -> tuple[dict[str, pa.Array], dict[int, str]]:
        """Each named group as a text column (null where absent), and the lines that do not match as faults."""
        found = self.regexp.match(lines.text)
        unmatched = np.flatnonzero(found.unmatched)
        reasons = self.stopped.reasons(lines.text.take(pa.array(unmatched))) if len(unmatched) else []
        return found.columns, dict(zip(unmatched.tolist(), reasons))

    def parse(self, lines: Lines, options: LogOptions) -> Rows:
        """Rows of the lines that match; the others are faults."""
        fields, faults = self.fields(lines)
        return self.records.to_rows(fields, len(lines), faults, options)
