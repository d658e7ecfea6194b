"""File readers for ``windvane import``: a file becomes :class:`Part` objects, each with the position after it.

The import engine (:mod:`ingest.imports`) commits each batch of parts with
the position of the last, so that an interrupted import resumes exactly;
:mod:`connectors.files.formats` picks the reader of a file. A reader is
``make_reader(path, options) -> reader`` and ``reader(start)`` yields the
parts from position ``start`` (None: the beginning).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from ingest.parts import Part

__all__ = ["FileFormatError", "Part", "ReaderOptions"]


class FileFormatError(Exception):
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
    text or WAV reader puts in one part. ``timezone``: the IANA zone of
    times written without one (``--timezone``; None: UTC, and this
    machine's zone for RFC 3164 syslog, :class:`.logs.LogOptions`).
    """

    time_column: str | None = None
    time_unit: str | None = None
    start: int | None = None
    column_types: dict[str, pa.DataType] = field(default_factory=dict)
    block_bytes: int = 16 << 20
    timezone: str | None = None
