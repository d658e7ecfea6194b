"""Log files to structured log streams: JSON lines, syslog (RFC 3164 and 5424), combined access logs.

Each format turns a block of whole lines (bytes) into an Arrow table in
bulk (``time`` first, int64 ns UTC; the columns below) plus the lines it
could not read, kept verbatim with the reason::

    parsed = parse_log("syslog", block, LogOptions(timezone="Europe/Paris"), first_line=1)
    parsed.table             # pyarrow.Table: time, facility, severity, hostname, ...
    parsed.rejected          # [RejectedLine(time, raw, reason)]

Columns beside ``time`` (text unless said):

- ``jsonl``: the objects' own fields (see :mod:`.jsonlines`).
- ``syslog`` (RFC 3164, :mod:`.syslog`): facility, severity (int8, -1
  without PRI), hostname, app_name, pid, message.
- ``syslog5424``: facility, severity, version (int16), hostname, app_name,
  pid, msgid, structured_data (JSON text), message.
- ``combined`` (and common, :mod:`.access`): remote_addr, ident,
  remote_user, method, path, protocol, status (int16), bytes_sent (int64),
  referer, user_agent, rest.

Blank lines are skipped; line endings (``\\n``, ``\\r\\n``) are not part of
a line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from . import access, jsonlines, syslog
from .errors import LogFormatError
from .lines import Lines, RejectedLine, Rows, fault_mask, split_lines
from .options import LogOptions

__all__ = [
    "LOG_FORMATS",
    "LogFormat",
    "LogFormatError",
    "LogOptions",
    "ParsedLines",
    "RejectedLine",
    "log_format",
    "parse_log",
]


@dataclass(frozen=True)
class LogFormat:
    """A log format: its name, what it reads, its fixed columns (None: they come from the lines)."""

    name: str
    description: str
    parse: Callable[[Lines, LogOptions], Rows]
    columns: dict[str, pa.DataType] | None = None
    keep_blank: bool = False  # blank lines are parsed too (fluentd's parsers), not skipped
    binary: bool = False  # the lines are bytes (fluentd's msgpack parser), not UTF-8 text


LOG_FORMATS = {
    f.name: f
    for f in (
        LogFormat("jsonl", "JSON lines: one JSON object per line", jsonlines.parse_json_lines),
        LogFormat(
            "syslog", "syslog, RFC 3164 (and rsyslog's RFC 3339 file format)", syslog.parse_3164, syslog.COLUMNS_3164
        ),
        LogFormat("syslog5424", "syslog, RFC 5424", syslog.parse_5424, syslog.COLUMNS_5424),
        LogFormat("combined", "nginx/Apache combined or common access log", access.parse_combined, access.COLUMNS),
    )
}
ALIASES = {
    "ndjson": "jsonl",
    "jsonlines": "jsonl",
    "syslog3164": "syslog",
    "rfc3164": "syslog",
    "rfc5424": "syslog5424",
    "common": "combined",
    "nginx": "combined",
    "apache": "combined",
}


def log_format(name: str) -> LogFormat:
    """The format called ``name`` (or one of its aliases); LogFormatError listing the known ones."""
    found = LOG_FORMATS.get(ALIASES.get(name, name))
    if found is None:
        raise LogFormatError(f"unknown log format {name!r}; known: {', '.join([*LOG_FORMATS, *ALIASES])}")
    return found


@dataclass(slots=True)
class ParsedLines:
    """A block's lines as a table (``time`` first), the lines rejected with why, and each row's line."""

    table: pa.Table
    rejected: list[RejectedLine]
    lines: pa.LargeStringArray  # the line each table row was read from (without its ending)

    def raw(self, i: int) -> bytes:
        """The line table row ``i`` was read from, as it is in the file (without its line ending)."""
        return self.lines[i].as_py().encode()


def _reject(lines: Lines, i: int, reason: str, options: LogOptions) -> RejectedLine:
    number = int(lines.numbers[i])
    return RejectedLine(options.now, lines.raw(i), f"line {number}: {reason}", number)


def parse_log(
    name: str | LogFormat, block: bytes, options: LogOptions | None = None, *, first_line: int = 1
) -> ParsedLines:
    """Parse ``block`` (whole lines) as log format ``name`` (or the format itself); see the module docstring."""
    fmt = name if isinstance(name, LogFormat) else log_format(name)
    options = options or LogOptions()
    lines, rejected = split_lines(
        block, first_line=first_line, now=options.now, keep_blank=fmt.keep_blank, binary=fmt.binary
    )
    rows = fmt.parse(lines, options)
    kept = lines.text
    if rows.faults:
        keep = pa.array(~fault_mask(rows.faults, len(lines)))
        columns = {k: v.filter(keep) for k, v in rows.columns.items()}
        kept = kept.filter(keep)
        if rejected:  # lines that are not UTF-8 too: all in file order
            rejected += [_reject(lines, i, reason, options) for i, reason in rows.faults.items()]
            rejected.sort(key=lambda r: r.line)
        else:
            rejected = [_reject(lines, i, reason, options) for i, reason in sorted(rows.faults.items())]
    else:
        columns = rows.columns
    if fmt.columns is not None and not len(lines):
        columns = {k: pa.array([], t) for k, t in fmt.columns.items()}
    table = pa.table(columns) if columns else pa.table({"time": pa.array([], pa.int64())})
    return ParsedLines(table, rejected, kept)
