"""fluentd's ``apache2`` parser: Apache's combined (or common) access log, with its own record rules.

It is no regexp parser (``expression``, ``time_key``, ``types``,
``null_value_pattern`` and ``null_empty_string`` are not used) but its
matching is the regexp parser's, with a fixed expression. Of each line
that matches: ``host user method path code size referer agent``, where
``-`` is null for ``host``, ``user``, ``size``, ``referer`` and ``agent``;
``code`` and ``size`` are integers (Ruby's ``to_i``; a ``code`` of 0 is
null). ``time`` (``%d/%b/%Y:%H:%M:%S %z``, under the section's
``time_type``, ``timezone``, ``localtime``, ``utc``) is the row's time,
kept as text too with ``keep_time_key``. A line without a valid time is
rejected, as fluentd rejects it.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ...lines import Lines, Rows
from ...options import LogOptions
from ..access_split import APACHE2 as EXPRESSION
from ..config import ParseConfig
from ..records import RecordBuilder
from ..rubynum import ruby_integers
from .regexp import RegexpParser

#: fluentd 1.14.6's apache2 time format.
TIME_FORMAT = "%d/%b/%Y:%H:%M:%S %z"
DASH_IS_NULL = ("host", "user", "size", "referer", "agent")


class Apache2Parser:
    """``parse(lines, options)``: fluentd's apache2 records (see the module)."""

    def __init__(self, config: ParseConfig):
        RecordBuilder(config)  # its options are checked as fluentd checks them, though apache2 uses few
        fixed = {"time_key": "time", "time_format": TIME_FORMAT, "estimate_current_event": True, "types": {}}
        fixed |= {"null_value_pattern": None, "null_empty_string": False, "ignorecase": False, "multiline": False}
        self.regexp = RegexpParser(config.replace(type="regexp", expression=EXPRESSION, **fixed))

    def parse(self, lines: Lines, options: LogOptions) -> Rows:
        """Rows of the lines that match and have a valid time; the others are faults."""
        fields, faults = self.regexp.fields(lines)
        dash = pa.scalar(None, pa.large_string())
        fields = {
            name: pc.if_else(pc.equal(values, "-"), dash, values) if name in DASH_IS_NULL else values
            for name, values in fields.items()
        }
        rows = self.regexp.records.to_rows(fields, len(lines), faults, options)
        rows.columns["code"] = ruby_integers(rows.columns["code"], zero_is_null=True)
        rows.columns["size"] = ruby_integers(rows.columns["size"])
        return rows
