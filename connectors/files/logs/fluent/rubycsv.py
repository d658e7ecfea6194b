"""One line of CSV read as fluentd's csv parser reads it: Ruby's ``CSV.parse_line`` or its own ``fast`` engine.

:func:`csv_line` is Ruby's CSV (3.2) on a single line with the default quote
``"``: a field that starts with a quote runs to the closing quote (``""``
inside is one quote; the separator and carriage returns are text there) and
must be followed by the separator or the end of the row; an unquoted field
holding a quote is refused, an empty one is nil (a quoted empty one is
``""``). A carriage return ends the row (Ruby picks ``\\r`` as the row
separator when the line holds one): what follows is not read. Errors are
:class:`MalformedCSV` with Ruby's message.

:func:`fast_line` is fluentd's ``parser_engine fast``: split on the
separator, then mend quoted fields (see its docstring); it never refuses a
line.
"""

from __future__ import annotations

import csv
from typing import cast

from ..errors import LineError
from .rubysplit import ruby_split

QUOTE = '"'
UNCLOSED = "Unclosed quoted field in line 1."
AFTER_QUOTE = "Any value after quoted field isn't allowed in line 1."
ILLEGAL_QUOTING = "Illegal quoting in line 1."


class MalformedCSV(LineError):
    """Ruby's ``CSV::MalformedCSVError``: the line is not CSV (its message is Ruby's)."""


def csv_line(line: str, separator: str) -> list[str | None] | None:
    """The fields of the first row of ``line`` (None for an empty line, as Ruby returns nil); MalformedCSV."""
    if not line:
        return None
    fields: list[str | None] = []
    at, size = 0, len(line)
    while True:
        if line.startswith(QUOTE, at):
            value, at = _quoted(line, at + 1)
            fields.append(value)
            if at == size or line[at] == "\r":
                return fields
            if not line.startswith(separator, at):
                raise MalformedCSV(AFTER_QUOTE)
            at += len(separator)
            continue
        end = _find(line, separator, at)
        value = line[at:end]
        if QUOTE in value:
            raise MalformedCSV(ILLEGAL_QUOTING)
        fields.append(value or None)
        if end == size or (line[end] == "\r" and not line.startswith(separator, end)):
            return fields
        at = end + len(separator)


def _quoted(line: str, at: int) -> tuple[str, int]:
    """The text of a quoted field whose first character is at ``at``, and where its closing quote ends."""
    parts = []
    while True:
        closing = line.find(QUOTE, at)
        if closing < 0:
            raise MalformedCSV(UNCLOSED)
        parts.append(line[at:closing])
        if not line.startswith(QUOTE, closing + 1):
            return "".join(parts), closing + 1
        parts.append(QUOTE)
        at = closing + 2


def _find(line: str, separator: str, at: int) -> int:
    """Where the unquoted field from ``at`` ends: the next separator or carriage return, else the line's end."""
    ends = [n for n in (line.find(separator, at), line.find("\r", at)) if n >= 0]
    return min(ends) if ends else len(line)


def well_formed(separator: str) -> str:
    """An RE2 pattern of the lines Ruby's CSV reads without error and Python's ``csv`` reads alike (quoted fields
    with doubled quotes, unquoted fields without quotes; no carriage return), for a one-character separator."""
    sep = f"\\x{{{ord(separator):x}}}"
    field = f'(?:"(?:[^"\\r]|"")*"|[^"\\r{sep}]*)'
    return f"^{field}(?:{sep}{field})*$"


def quick_csv_lines(lines: list[str], separator: str) -> list[list[str | None] | None]:
    """:func:`csv_line` of many well-formed lines (see :func:`well_formed`) at C speed (Python's ``csv``); None
    for a line whose fields it cannot tell apart (an empty field in a line that holds ``""``: nil or quoted empty)."""
    if not lines:
        return []
    try:
        rows = list(csv.reader(lines, delimiter=separator, quotechar=QUOTE, doublequote=True, strict=True))
    except csv.Error:  # e.g. a field past csv's size limit: the caller reads each line itself
        return [None] * len(lines)
    if len(rows) != len(lines):
        return [None] * len(lines)
    found: list[list[str | None] | None] = []
    for line, row in zip(lines, rows):
        if "" not in row:
            found.append(cast("list[str | None]", row) or None)  # a row of str, only read from here on
        else:
            found.append(None if '""' in line else [value or None for value in row])
    return found


def fast_line(line: str, separator: str) -> list[str | None]:
    """The fields fluentd's fast engine finds (nil for an empty unquoted field).

    Split on the separator (Ruby's split, every field kept); a field with
    one quote that starts with it is joined with the following fields up to
    the first that ends with a quote (or the last), and loses its first and
    last character; a field with two quotes loses them when it starts and
    ends with one; a field with more quotes too, and then each ``""`` in it
    becomes ``"``.
    """
    columns = ruby_split(line, separator, -1)
    fields: list[str | None] = []
    j = 0
    while j < len(columns):
        column = columns[j]
        quotes = column.count(QUOTE)
        wrapped = column.startswith(QUOTE) and column.endswith(QUOTE)
        if quotes == 0:
            fields.append(column or None)
        elif quotes == 1 and column.startswith(QUOTE):
            merged = [column]
            while j + 1 < len(columns):
                j += 1
                merged.append(columns[j])
                if columns[j].endswith(QUOTE):
                    break
            else:
                j = len(columns)
            fields.append(separator.join(merged)[1:-1])
        elif quotes == 2:
            fields.append(column[1:-1] if wrapped else column)
        elif quotes > 2:
            fields.append((column[1:-1] if wrapped else column).replace('""', QUOTE))
        else:
            fields.append(column)
        j += 1
    return fields
