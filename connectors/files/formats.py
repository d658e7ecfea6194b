"""Which reader reads a file: by ``--format``, else by the file's extension.

Each format is registered once with :func:`register`: its name, the
extensions that select it, and ``make(path, options) -> reader`` (see
:mod:`connectors.files`). The log formats register themselves at the
registration point below.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import FileFormatError, ReaderOptions
from .arrow import arrow_reader, parquet_reader
from .csv import csv_reader
from .wav import wav_reader


@dataclass(frozen=True)
class Format:
    """A file format ``windvane import`` reads."""

    name: str
    extensions: tuple[str, ...]  # lower case, with the dot; ".gz" style double extensions are not looked at
    make: Callable[[str, ReaderOptions], Callable[[Any], Any]]
    vibration: bool = False  # whether its parts are sample blocks (a vibration stream)


FORMATS: dict[str, Format] = {}


def register(name: str, extensions: Sequence[str], make: Callable[[str, ReaderOptions], Callable[[Any], Any]],
             *, vibration: bool = False) -> None:
    """Make format ``name`` known, chosen by ``--format name`` or one of ``extensions``."""
    if name in FORMATS:
        raise ValueError(f"file format {name!r} is registered twice")
    taken = {e: f.name for f in FORMATS.values() for e in f.extensions}
    clash = [e for e in extensions if e.lower() in taken]
    if clash:
        raise ValueError(f"extension(s) {clash} of format {name!r} already select {[taken[e] for e in clash]}")
    FORMATS[name] = Format(name, tuple(e.lower() for e in extensions), make, vibration)


register("csv", (".csv",), csv_reader)
register("parquet", (".parquet", ".pq"), parquet_reader)
register("arrow", (".arrow", ".arrows", ".feather", ".ipc"), arrow_reader)
register("wav", (".wav", ".wave", ".bwf"), wav_reader, vibration=True)

# -- registration point of the log formats (connectors/files/logs.py): register(name, extensions, make) --
from .logs.reader import log_reader  # noqa: E402 - the log formats build on the readers above

register("jsonl", (".jsonl", ".ndjson"), log_reader("jsonl"))
register("syslog", (), log_reader("syslog"))  # RFC 3164; ".log" says nothing of the format: --format
register("syslog5424", (), log_reader("syslog5424"))
register("combined", (), log_reader("combined"))  # nginx/Apache access logs


def format_for(path: str | Path, name: str | None = None) -> Format:
    """The format named ``name``, else the one ``path``'s extension selects; FileFormatError if none."""
    if name is not None:
        try:
            return FORMATS[name]
        except KeyError:
            raise FileFormatError(f"unknown format {name!r}; known: {', '.join(sorted(FORMATS))}") from None
    suffix = Path(path).suffix.lower()
    for fmt in FORMATS.values():
        if suffix in fmt.extensions:
            return fmt
    known = ", ".join(f"{e} ({f.name})" for f in FORMATS.values() for e in f.extensions)
    raise FileFormatError(f"{path}: cannot tell the format from the extension {suffix or '(none)'!r}; "
                          f"pass --format ({', '.join(sorted(FORMATS))}). Known extensions: {known}")


def open_reader(path: str | Path, name: str | None, options: ReaderOptions) -> Callable[[Any], Any]:
    """The reader of ``path`` in format ``name`` (or by its extension)."""
    return format_for(path, name).make(str(path), options)
