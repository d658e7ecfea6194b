"""File readers for ``windvane import``: a file becomes :class:`Part` objects, each with the position after it.

The import engine (:mod:`ingest.imports`) commits each batch of parts with
the position of the last, so that an interrupted import resumes exactly;
:mod:`connectors.files.formats` picks the reader of a file. A reader is
``make_reader(path, options) -> reader`` and ``reader(start)`` yields the
parts from position ``start`` (None: the beginning).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from windvane.connectors.errors import ConnectorError
from windvane.connectors.files_config import FilesConfig
from windvane.ingest.parts import Part

__all__ = ["FileFormatError", "Part", "ReaderOptions", "column_names"]


class FileFormatError(ConnectorError):
    """A file cannot be read as the format asked for; the message names the file and the problem."""


@dataclass(frozen=True)
class ReaderOptions:
    """What ``windvane import`` tells a reader beside the path.

    ``time_column``: the column holding each row's time (None: the first of
    :data:`connectors.files.times.TIME_NAMES`). ``time_unit``: ``s``, ``ms``,
    ``us`` or ``ns`` for epoch numbers (None: by magnitude). ``start``: ns
    since the epoch of a recording's first sample (WAV). ``column_types``:
    the arrow type each column must be read as (a text format parses to
    them; from the stream's schema). ``block_bytes``: the most file bytes a
    text or WAV reader puts in one part. ``kept_bytes`` (CSV): the most bytes
    of parsed tables the type pass keeps for the parts. ``rename``: old -> new column names
    (``--rename``), applied after :func:`column_names`. ``timezone``: the IANA
    zone of times written without one (``--timezone``; None: UTC, and this
    machine's zone for RFC 3164 syslog, :class:`.logs.LogOptions`).

    Table files (CSV, Parquet, Arrow): ``time_format``: the strptime layout
    of a text time column (``--time-format``; None: the time rule's ISO 8601
    and epoch numbers). ``time_from``: where a row's time comes from
    (:data:`connectors.files_config.TIME_FROM`: its time column; ``arrival``, the time its
    block is read; ``row``, ``start`` plus its row number times
    ``row_interval`` ns). ``delimiter`` (CSV): the field separator (None:
    sniffed, :func:`.csv.sniff_delimiter`). ``na_values`` (CSV): cells that
    are missing values besides pyarrow's null markers (``--na``).

    Log files: ``keep_blank_lines``: blank lines are handed to the parser
    (``--keep-blank-lines``) instead of skipped and counted.
    """

    time_column: str | None = None
    time_unit: str | None = None
    start: int | None = None
    column_types: dict[str, pa.DataType] = field(default_factory=dict)
    block_bytes: int = FilesConfig.block_bytes
    kept_bytes: int = FilesConfig.kept_bytes
    rename: dict[str, str] = field(default_factory=dict)
    timezone: str | None = None
    time_format: str | None = None
    time_from: str = FilesConfig.time_from
    row_interval: int = FilesConfig.row_interval
    delimiter: str | None = None
    na_values: tuple[str, ...] = ()
    keep_blank_lines: bool = False


def column_names(path: str, header: Sequence[str | None], rename: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The names of a file's columns from its ``header`` cells, and notes saying what was named for the user.

    A blank (or missing) cell names its column ``column_<n>``, ``n`` its
    1-based position; so does a cell repeating an earlier cell's name.
    ``rename`` (old -> new) then renames columns: FileFormatError for an
    old name the file does not have or a new name it has already.
    """
    names: list[str] = []
    notes: list[str] = []
    for n, cell in enumerate(header, 1):
        name = "" if cell is None else str(cell)
        if name.strip() and name not in names:
            names.append(name)
            continue
        given = f"column_{n}"
        while given in header or given in names:  # a header that has that name already
            given += "_"
        why = "has no name" if not name.strip() else f"has the name of column {names.index(name) + 1}, {name!r}"
        notes.append(f"{path}: column {n} {why}: it is named {given!r} (--rename {given}=NAME names it otherwise)")
        names.append(given)
    for old, new in rename.items():
        if old not in names:
            raise FileFormatError(f"{path}: --rename {old}={new}: the file has no column {old!r}; it has {names}")
        if new in names and new != old:
            raise FileFormatError(f"{path}: --rename {old}={new}: the file has a column {new!r} already")
        names[names.index(old)] = new
    return names, notes
