"""Log files to structured log streams: JSON lines, syslog (RFC 3164 and 5424), combined access logs.

Each format turns a block of whole lines (bytes) into an Arrow table in
bulk (``time`` first, int64 ns UTC; the columns below) plus the lines it
could not read, kept verbatim with the reason::

    parsed = parse_log("syslog3164", block, LogOptions(timezone="Europe/Paris"), first_line=1)
    parsed.table             # pyarrow.Table: time, facility, severity, hostname, ...
    parsed.rejected          # [RejectedLine(time, raw, reason)]

Columns beside ``time`` (text unless said):

- ``jsonl``: the objects' own fields (see :mod:`.jsonlines`).
- ``syslog3164`` (RFC 3164, :mod:`.syslog`): facility, severity (int8, -1
  without PRI), hostname, app_name, pid, message.
- ``syslog5424``: facility, severity, version (int16), hostname, app_name,
  pid, msgid, structured_data (JSON text), message.
- ``combined`` (and common, :mod:`.access`): remote_addr, ident,
  remote_user, method, path, protocol, status (int16), bytes_sent (int64),
  referer, user_agent, rest.

Blank lines (empty or whitespace only) are skipped and counted
(:attr:`ParsedLines.blank`), fluentd's parsers' too, unless
``LogOptions(keep_blank=True)`` hands them to the parser (as fluentd's
in_tail does: most parsers then reject them). A format whose records span
lines always keeps them: they belong to its events. Line endings (``\\n``,
``\\r\\n``) are not part of a line.

A format whose records span lines (fluentd's ``multiline``) has a
``group`` step: it makes events of the lines (each parsed as one text, its
lines joined with ``\\n``, numbered by its first line). Its last event may
go on in the next block: ``parse_log(..., final=False)`` leaves it unparsed
and says how many bytes it holds (:attr:`ParsedLines.pending`), for the
reader to give them again in front of the next block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from . import access, jsonlines, syslog
from .errors import LogFormatError
from .lines import Events, Lines, RejectedLine, Rows, fault_mask, line_count, split_lines
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
    keep_blank: bool = False  # blank lines are always parsed too (fluentd's multiline: part of events), not skipped
    group: Callable[[Lines], Events] | None = None  # records span lines: the lines' events are parsed
    binary: bool = False  # the lines are bytes (fluentd's msgpack parser), not UTF-8 text
    #: A block parses the same whatever blocks came before it (no event spans blocks, no types are carried
    #: from one to the next in ``LogOptions.types``): a reader may parse several at once.
    independent: bool = False


LOG_FORMATS = {
    f.name: f
    for f in (
        LogFormat("jsonl", "JSON lines: one JSON object per line", jsonlines.parse_json_lines),
        LogFormat(
            "syslog3164",
            "syslog, RFC 3164 (and rsyslog's RFC 3339 file format)",
            syslog.parse_3164,
            syslog.COLUMNS_3164,
            independent=True,
        ),
        LogFormat("syslog5424", "syslog, RFC 5424", syslog.parse_5424, syslog.COLUMNS_5424, independent=True),
        LogFormat(
            "combined",
            "nginx/Apache combined or common access log",
            access.parse_combined,
            access.COLUMNS,
            independent=True,
        ),
    )
}
#: Other names of windvane's own formats. ``syslog`` and ``nginx`` are none of them: they are fluentd's parsers
#: (``--format syslog``, ``--format nginx``), as are ``apache2`` and ``apache_error``; ``apache`` stays ``combined``.
ALIASES = {
    "ndjson": "jsonl",
    "jsonlines": "jsonl",
    "rfc3164": "syslog3164",
    "rfc5424": "syslog5424",
    "common": "combined",
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
    pending: int = 0  # bytes at the block's end left unparsed: an event the next block may go on with
    blank: int = 0  # blank lines skipped (not handed to the parser)

    def raw(self, i: int) -> bytes:
        """The line table row ``i`` was read from, as it is in the file (without its line ending)."""
        line: str = self.lines[i].as_py()
        return line.encode()


def _rejects(lines: Lines, reasons: dict[int, str], options: LogOptions) -> list[RejectedLine]:
    """Line ``i`` of ``lines`` rejected for ``reasons[i]``, for each ``i`` in ``reasons`` (in that order); the
    lines' bytes taken in one step, not one line at a time."""
    picked = np.fromiter(reasons, dtype=np.int64, count=len(reasons))
    raws = lines.text.take(pa.array(picked)).to_pylist()
    numbers = lines.numbers[picked].tolist()
    return [
        RejectedLine(options.now_ns, raw if isinstance(raw, bytes) else raw.encode(), f"line {n}: {why}", n)
        for raw, n, why in zip(raws, numbers, reasons.values())
    ]


def _events(
    fmt: LogFormat,
    block: bytes,
    lines: Lines,
    rejected: list[RejectedLine],
    options: LogOptions,
    first_line: int | None,
) -> tuple[Lines, list[RejectedLine], int]:
    """The events of ``lines`` (``fmt.group``), the lines rejected, and the bytes the open last event holds.

    ``first_line``: the block's first line; None when the block is final (the last event is complete). Else
    the open event is left for the next block, and so are lines rejected in it (they are read again).
    """
    assert fmt.group is not None
    grouped = fmt.group(lines)
    rejected = rejected + _rejects(lines, grouped.stray, options)
    rejected.sort(key=lambda r: r.line)
    events = grouped.events
    if first_line is None or not grouped.open:
        return events, rejected, 0
    start = int(events.numbers[-1])  # the open event's first line
    events = events.pick(np.arange(len(events) - 1))
    newlines = np.flatnonzero(np.frombuffer(block, np.uint8) == 0x0A)
    offset = int(newlines[start - first_line - 1]) + 1 if start > first_line else 0
    return events, [r for r in rejected if r.line < start], len(block) - offset


def parse_log(
    name: str | LogFormat,
    block: bytes,
    options: LogOptions | None = None,
    *,
    first_line: int = 1,
    final: bool = True,
) -> ParsedLines:
    """Parse ``block`` (whole lines) as log format ``name`` (or the format itself); see the module docstring.

    ``final``: the block ends the file (or the wait for more), so an event at its end is complete.
    """
    fmt = name if isinstance(name, LogFormat) else log_format(name)
    options = options or LogOptions()
    keep_blank = fmt.keep_blank or options.keep_blank
    lines, rejected = split_lines(
        block,
        first_line=first_line,
        now=options.now_ns,
        keep_blank=keep_blank,
        keep_cr=fmt.group is not None,
        binary=fmt.binary,
    )
    # the lines split_lines dropped that are not among those rejected (not UTF-8): the blank ones
    blank = 0 if keep_blank else line_count(block) - len(lines) - len(rejected)
    pending = 0
    if fmt.group is not None:
        lines, rejected, pending = _events(fmt, block, lines, rejected, options, None if final else first_line)
    rows = fmt.parse(lines, options)
    if rows.sources is not None:  # several records of one event: each row's own copy of its event
        lines = lines.pick(rows.sources)
    kept = lines.text
    if rows.faults:
        keep = pa.array(~fault_mask(rows.faults, len(lines)))
        columns = {k: v.filter(keep) for k, v in rows.columns.items()}
        kept = kept.filter(keep)
        if rejected:  # lines that are not UTF-8 too: all in file order
            rejected += _rejects(lines, rows.faults, options)
            rejected.sort(key=lambda r: r.line)
        else:
            rejected = _rejects(lines, dict(sorted(rows.faults.items())), options)
    else:
        columns = rows.columns
    if fmt.columns is not None and not len(lines):
        columns = {k: pa.array([], t) for k, t in fmt.columns.items()}
    table = pa.table(columns) if columns else pa.table({"time": pa.array([], pa.int64())})
    return ParsedLines(table, rejected, kept, pending, blank)
