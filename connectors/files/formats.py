"""Which reader reads a file: by ``--format``, else by the file's extension or name.

Each format is registered once with :func:`register`: its name, the
extensions and file names that select it, and ``make(path, options) ->
reader`` (see :mod:`connectors.files`). The log formats register themselves
at the registration point below.

The name looked at is the file's without a compression suffix and
logrotate's number (:func:`connectors.files.compression.data_name`):
``x.csv.gz`` is CSV (so are ``.tsv`` and ``.tab`` files: the CSV reader
sniffs their tab delimiter), ``syslog.1.gz`` RFC 3164 syslog (``syslog3164``). Whether a file is compressed
is told by its first bytes; formats read front to back (CSV, the log
formats) read it decompressed as they go, the others (Parquet, Arrow, WAV)
seek in their file and refuse it with a message saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from windvane.connectors.errors import ConnectorConfigError

from . import FileFormatError, ReaderOptions
from .arrow import arrow_reader, parquet_reader
from .compression import compression_of, data_name
from .csv import csv_reader
from .wav import wav_reader


@dataclass(frozen=True)
class Format:
    """A file format ``windvane import`` reads."""

    name: str
    extensions: tuple[str, ...]  # lower case, with the dot
    make: Callable[[str, ReaderOptions], Callable[[Any], Any]]
    vibration: bool = False  # whether its parts are sample blocks (a vibration stream)
    names: tuple[str, ...] = ()  # whole file names that select it (lower case)
    compressed: bool = False  # whether its reader reads a compressed file (it reads front to back)
    table: bool = False  # whether it is a table of columns (ReaderOptions' time_format, time_from, ... apply)


FORMATS: dict[str, Format] = {}


def register(
    name: str,
    extensions: Sequence[str],
    make: Callable[[str, ReaderOptions], Callable[[Any], Any]],
    *,
    vibration: bool = False,
    names: Sequence[str] = (),
    compressed: bool = False,
    table: bool = False,
) -> None:
    """Make format ``name`` known, chosen by ``--format name``, one of ``extensions`` or of the file ``names``."""
    if name in FORMATS:
        raise ConnectorConfigError(f"file format {name!r} is registered twice")
    taken = {e: f.name for f in FORMATS.values() for e in (*f.extensions, *f.names)}
    clash = [e for e in (*extensions, *names) if e.lower() in taken]
    if clash:
        raise ConnectorConfigError(
            f"extension(s) or name(s) {clash} of format {name!r} already select {[taken[e.lower()] for e in clash]}"
        )
    FORMATS[name] = Format(
        name, tuple(e.lower() for e in extensions), make, vibration, tuple(n.lower() for n in names), compressed, table
    )


register("csv", (".csv", ".tsv", ".tab"), csv_reader, compressed=True, table=True)
register("parquet", (".parquet", ".pq"), parquet_reader, table=True)
register("arrow", (".arrow", ".arrows", ".feather", ".ipc"), arrow_reader, table=True)
register("wav", (".wav", ".wave", ".bwf"), wav_reader, vibration=True)

# -- registration point of the log formats (connectors/files/logs.py): register(name, extensions, make) --
from .logs.reader import log_reader  # noqa: E402 - the log formats build on the readers above

register("jsonl", (".jsonl", ".ndjson"), log_reader("jsonl"), compressed=True)
# RFC 3164; ".log" says nothing of the format (--format), but rsyslog's and syslogd's files are named so:
register("syslog3164", (), log_reader("syslog3164"), names=("syslog", "messages"), compressed=True)
register("syslog5424", (), log_reader("syslog5424"), compressed=True)
register(
    "combined",
    (),
    log_reader("combined"),
    names=("access.log", "access_log"),  # nginx/Apache access logs
    compressed=True,
)


def format_for(path: str | Path, name: str | None = None) -> Format:
    """The format named ``name``, else the one ``path``'s name selects; FileFormatError if none.

    A compressed file in a format that cannot be read compressed is a FileFormatError too.
    """
    compression = compression_of(path) if Path(path).is_file() else None
    fmt = _by_name(name) if name is not None else _by_file_name(path, compression)
    if compression is not None and not fmt.compressed:
        raise FileFormatError(
            f"{path}: compressed file ({compression}); the {fmt.name} reader seeks in its file, so decompress it first"
        )
    return fmt


def _by_name(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise FileFormatError(f"unknown format {name!r}; known: {', '.join(sorted(FORMATS))}") from None


def _by_file_name(path: str | Path, compression: str | None) -> Format:
    plain = data_name(path)
    suffix = Path(plain).suffix.lower()
    for fmt in FORMATS.values():
        if plain.lower() in fmt.names or suffix in fmt.extensions:
            return fmt
    known = ", ".join(f"{e} ({f.name})" for f in FORMATS.values() for e in (*f.extensions, *f.names))
    what = f"compressed file ({compression}) holding {plain!r}; " if compression else ""
    raise FileFormatError(
        f"{path}: {what}cannot tell the format from the extension {suffix or '(none)'!r}; "
        f"pass --format ({', '.join(sorted(FORMATS))}). Known extensions and names: {known}"
    )
