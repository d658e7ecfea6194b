"""`windvane import` and `windvane tail`: files and growing logs into streams."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import shlex
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from windvane import ingest
from windvane.cli.parsing import LogParsing, format_names, format_option, parser_options, timezone_option
from windvane.cli.root import (
    STORE_OPTION,
    BadInput,
    RowsRejected,
    cli,
    counted,
    interrupted,
    open_store,
    say,
    schema_option,
)
from windvane.connectors.files_config import TIME_FROM, FilesConfig
from windvane.connectors.tail.config import TailConfig
from windvane.ingest.config import ImportConfig

if TYPE_CHECKING:
    from windvane import neostore
    from windvane.connectors.files import ReaderOptions
    from windvane.connectors.files.formats import Format
    from windvane.connectors.files.logs import LogFormat
    from windvane.connectors.tail.run import Commit, TailSettings
    from windvane.ingest.imports import ImportResult
    from windvane.ingest.parts import Part
    from windvane.ingest.schema import Schema
    from windvane.ingest.streams import StreamWriters


def _tag_option(into: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The ``--tag`` option: the stream the command writes ``into``."""
    return click.option("--tag", required=True, help=f"The stream to {into} (created on first use).")


def _schema_option(first: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The ``--schema`` option, a new stream's columns otherwise typed from the ``first`` rows read."""
    return schema_option(
        f"Schema file (TOML, see schemas/README.md). Default: the existing stream's columns, else the types of {first}."
    )


@dataclasses.dataclass(frozen=True)
class StreamOptions:
    """What `import` and `tail` are both told: the store, the stream and its schema, how to parse lines."""

    store_url: str
    tag: str
    schema_path: str | None
    parsing: LogParsing

    @classmethod
    def take(cls, options: dict[str, Any]) -> StreamOptions:
        """These options, taken out of a command's ``options`` (the others stay)."""
        return cls(options.pop("store_url"), options.pop("tag"), options.pop("schema_path"), LogParsing.take(options))

    def schema(self) -> Schema | None:
        """The ``--schema`` file's schema (None without one); an IngestError if it is wrong."""
        from windvane.ingest.schema import load_schema

        return load_schema(self.schema_path) if self.schema_path else None


@dataclasses.dataclass(frozen=True)
class ImportOptions:
    """`windvane import`'s arguments and options as click parses them (see each option's help and default)."""

    stream: StreamOptions
    paths: tuple[str, ...]
    time_column: str | None
    time_unit: str | None
    start_time: str | None
    restart: bool
    again: bool
    commit_mb: int
    allow_rejects: bool
    renames: tuple[str, ...]
    verbose: bool
    delimiter: str | None
    time_from: str
    row_interval: float
    na: tuple[str, ...]

    @classmethod
    def parsed(cls, options: dict[str, Any]) -> ImportOptions:
        """The options click passes `windvane import`."""
        return cls(StreamOptions.take(options), **options)


@dataclasses.dataclass(frozen=True)
class ImportPlan:
    """What `windvane import`'s options make: the schema given, each path's format, the readers' options."""

    schema: Schema | None
    formats: list[Format]
    reader: ReaderOptions


@cli.command(name="import", short_help="Import files (CSV, Parquet, Arrow, WAV, logs) into a stream; resumable.")
@click.argument(
    "paths", nargs=-1, required=True, metavar="PATH...", type=click.Path(exists=True, dir_okay=False, path_type=str)
)
@STORE_OPTION
@_tag_option("import into")
@_schema_option("the first file")
@format_option(
    "File format: csv (a header row; fluentd's csv parser: --parser), parquet, arrow, wav, or a log format, "
    + format_names(own=("csv",))
    + ". Default: by extension, "
    "or name (syslog and messages: syslog3164; access.log: combined), seen through a compression suffix and "
    "logrotate's number (x.csv.gz, syslog.1.gz)."
)
@click.option(
    "--time-column",
    default=None,
    metavar="NAME",
    help="Column holding each row's time. Default: time, timestamp, ts, datetime or date.",
)
@click.option(
    "--time-unit",
    type=click.Choice(["s", "ms", "us", "ns"]),
    default=None,
    help="Unit of epoch-number times. Default: chosen by magnitude.",
)
@click.option(
    "--time-from",
    type=click.Choice(TIME_FROM),
    default=FilesConfig.time_from,
    show_default=True,
    help="Where a CSV, Parquet or Arrow row's time comes from: its time column; arrival: the time its block "
    "is read (this run's clock, shared by the rows of a block); row: --start plus the row's number in the "
    "file (from 0, rejected rows counted, the same when an import resumes) times --row-interval. "
    "A file with a column named time needs --rename time=NAME for arrival and row.",
)
@click.option(
    "--row-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=FilesConfig.row_interval / 1e9,
    show_default=True,
    metavar="SECONDS",
    help="--time-from row: seconds between rows (0.001: a row per millisecond; at least 1e-9).",
)
@click.option(
    "--start",
    "start_time",
    default=None,
    metavar="TIME",
    help="ISO 8601 time of a recording's first sample (WAV); several WAV files are placed end to end "
    "in the order given, each starting where the one before ended. Default: each file's BWF "
    "origination time, else its modification time minus its duration. With --time-from row: the time "
    "of each file's row 0.",
)
@click.option(
    "--delimiter",
    default=None,
    metavar="CHAR",
    help="CSV field separator: one character, or tab. Default: sniffed from the header and the first "
    "rows among , ; tab and | (the one giving the most fields, every row as many), else ,.",
)
@click.option(
    "--na",
    multiple=True,
    metavar="TOKEN[,TOKEN...]",
    help="CSV cells that are missing values, besides empty cells and pyarrow's NA, N/A, NULL, null, NaN, "
    "#N/A, ... (repeatable): --na nil,- makes a number column with nil cells a number column with missing "
    "values, read before the types are inferred.",
)
@timezone_option(
    "IANA zone of times written without one (ISO 8601 text, naive timestamps, RFC 3164 syslog). "
    "Default: UTC, and this machine's zone for RFC 3164 syslog."
)
@click.option(
    "--restart", is_flag=True, help="Import a file that changed since it was partly imported from its beginning."
)
@click.option(
    "--again",
    is_flag=True,
    help="Import the files from their beginning even if they, or files of the same content, "
    "were imported into TAG before.",
)
@click.option(
    "--commit-mb",
    type=click.IntRange(1, 4096),
    default=ImportConfig.commit_bytes >> 20,
    show_default=True,
    help="MB of file per commit.",
)
@click.option(
    "--allow-rejects", is_flag=True, help="Exit 0 even if rows were quarantined (they are still counted and reported)."
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Print the whole schema a new stream's columns were typed with (as a schema file, to pin with --schema).",
)
@click.option(
    "--rename",
    "renames",
    multiple=True,
    metavar="OLD=NEW",
    help="Name a file's column OLD as NEW in the stream (repeatable); the file must have OLD. "
    "A blank or repeated header cell names its column column_<n> (n: its position).",
)
@parser_options
def import_files(**options: Any) -> None:
    """Import PATH... into stream TAG, committing as it reads: run again after an interruption to resume.

    Each commit stores rows and the position reached in the file together,
    so a run interrupted (Ctrl-C, kill -9) and started again neither
    duplicates nor skips rows; a finished file run again imports nothing,
    nor does a file of the same content under another name (a blake3 hash
    of the whole file) unless --again. Rows that do not fit go, verbatim
    with the reason, to the tag's quarantine stream. Compressed files
    (gzip, zstd, bzip2, xz: told by their first bytes) of CSV and the log
    formats are read decompressed as they go. A new stream's columns are
    typed from the whole first file; a line says so (--verbose prints the
    schema inferred, as a file to pin with --schema). Column names are kept as written; one a store key cannot
    hold ("flow [l/s]") is stored under an escaped key (see the README).
    RFC 3164 syslog lines carry no year: they are taken in the year of the
    file's modification time (the year before for dates after it), and the
    summary says which.

    \b
    Exit codes: 0 every row read was stored; 2 bad input; 3 rows were
    quarantined (the others are stored; stderr says how many, in which
    quarantine stream and how to read it; --allow-rejects exits 0
    instead); 130 interrupted (run again to resume).
    """
    from windvane.connectors.files import FileFormatError
    from windvane.ingest import imports
    from windvane.ingest.streams import StreamWriters

    opts = ImportOptions.parsed(options)
    plan = _import_plan(opts)
    total = sum(os.path.getsize(p) for p in opts.paths)
    rejected = 0
    with open_store(opts.stream.store_url) as st:
        writers = StreamWriters(st)
        try:
            schema = imports.resolve_schema(st, opts.stream.tag, plan.schema)
            with click.progressbar(length=total, label=f"importing into {opts.stream.tag}", file=sys.stderr) as bar:
                rejected = _import_paths(st, writers, bar.update, opts, dataclasses.replace(plan, schema=schema))
        except (ingest.IngestError, FileFormatError) as exc:
            raise BadInput(str(exc)) from exc
        except KeyboardInterrupt:
            interrupted("interrupted: what was committed stays; run the same command again to resume")
    _check_rejects(rejected, opts.stream.tag, opts.stream.store_url, opts.allow_rejects)


def _check_rejects(rejected: int, tag: str, store_url: str, allow_rejects: bool) -> None:
    """RowsRejected (exit 3) if rows were quarantined, unless --allow-rejects (then only said)."""
    if rejected:
        message = _rejects_message(rejected, tag, store_url)
        if not allow_rejects:
            raise RowsRejected(f"{message}; --allow-rejects makes this exit 0")
        say(f"warning: {message}", err=True)


def _import_paths(
    st: neostore.Store, writers: StreamWriters, advance: Callable[[int], None], opts: ImportOptions, plan: ImportPlan
) -> int:
    """Import each of ``opts.paths`` in turn (``plan.formats``: theirs) and report it; the rows rejected in all."""
    rejected = 0
    schema, options = plan.schema, plan.reader
    for path, fmt in zip(opts.paths, plan.formats, strict=True):
        reader = _open_reader(path, fmt, schema, options)
        if options.start is not None and fmt.vibration:
            # one --start for several recordings: end to end
            options = dataclasses.replace(options, start=reader.end_ns)
        result = _import_reader(st, writers, advance, opts, path, reader, schema)
        schema = result.schema or schema
        _report_file(opts.stream.tag, path, fmt, schema, result, getattr(reader, "blank_lines", 0), opts.verbose)
        rejected += result.rejected
    return rejected


def _import_plan(opts: ImportOptions) -> ImportPlan:
    """What `windvane import`'s options make: schema, formats and the readers' options; BadInput if one is wrong."""
    from windvane.connectors.files import FileFormatError, ReaderOptions
    from windvane.connectors.files.times import check_layout
    from windvane.ingest.times import check_zone, time_ns

    parsing = opts.stream.parsing
    try:
        rename = _renames(opts.renames)
        schema = opts.stream.schema()
        table_times = _table_time_format(opts)
        if parsing.time_format is not None and table_times:
            check_layout(parsing.time_format)
        formats = _file_formats(opts, schema, table_times)
        start_ns = None
        if parsing.timezone is not None:
            check_zone(parsing.timezone)
        if opts.start_time is not None:
            start_ns = time_ns(opts.start_time)
            if start_ns is None:
                raise BadInput(f"--start {opts.start_time!r} is not an ISO 8601 time or an epoch number")
    except (ingest.IngestError, FileFormatError) as exc:
        raise BadInput(str(exc)) from exc
    _check_time_from(opts, start_ns)
    options = ReaderOptions(
        opts.time_column,
        opts.time_unit,
        start_ns,
        block_bytes=min(FilesConfig.block_bytes, opts.commit_mb << 19),
        rename=rename,
        timezone=parsing.timezone,
        time_format=parsing.time_format if table_times else None,
        time_from=opts.time_from,
        row_interval=max(1, round(opts.row_interval * 1e9)),
        delimiter=_delimiter(opts.delimiter),
        na_values=tuple(token for given in opts.na for token in given.split(",")),
        keep_blank_lines=parsing.keep_blank_lines,
    )
    return ImportPlan(schema, formats, options)


def _table_time_format(opts: ImportOptions) -> bool:
    """Whether --time-format is the layout of table files' time column: every path is CSV, Parquet or Arrow
    (by --format or its name) and no --expression or --parser says a fluentd parser."""
    from windvane.connectors.files import FileFormatError
    from windvane.connectors.files.formats import format_for

    parsing = opts.stream.parsing
    if parsing.time_format is None or parsing.expression is not None or parsing.parser_path is not None:
        return False
    try:
        return all(format_for(path, parsing.format_name).table for path in opts.paths)
    except FileFormatError:
        return False  # a fluentd parser's name (regexp, nginx, ...), or a log file


def _check_time_from(opts: ImportOptions, start_ns: int | None) -> None:
    """BadInput if --time-from contradicts --time-column or lacks --start."""
    if opts.time_from == "column":
        return
    if opts.time_column is not None:
        raise BadInput(f"--time-from {opts.time_from} makes each row's time: give no --time-column")
    if opts.time_from == "row" and start_ns is None:
        raise BadInput("--time-from row needs --start TIME: the time of each file's row 0")


def _delimiter(given: str | None) -> str | None:
    """``--delimiter``: one character (``tab`` or a backslash and t: a tab); BadInput otherwise."""
    if given is None:
        return None
    delimiter = "\t" if given.lower() in ("tab", "\\t") else given
    if len(delimiter) != 1 or delimiter in '"\r\n':
        raise BadInput(f"--delimiter {given!r}: give one character other than a quote or a line end, or tab")
    return delimiter


def _file_formats(opts: ImportOptions, schema: Schema | None, table_times: bool = False) -> list[Format]:
    """The format of each of ``opts.paths``: a fluentd parser if the options or the schema's ``[parse]`` say one
    (``table_times``: --time-format is the table files' own, no fluentd parser's)."""
    from windvane.connectors.files.formats import FORMATS, Format, format_for
    from windvane.connectors.files.logs.fluent import fluent_format
    from windvane.connectors.files.logs.reader import log_reader

    parsing = opts.stream.parsing
    if table_times:
        parsing = dataclasses.replace(parsing, time_format=None)
    config = parsing.fluent_config(schema.parse if schema else None, FORMATS)
    if config is None:
        return [format_for(path, parsing.format_name) for path in opts.paths]
    fmt = fluent_format(config)
    return [Format(fmt.name, (), log_reader(fmt), compressed=True)] * len(opts.paths)


def _open_reader(path: str, fmt: Format, schema: Schema | None, options: ReaderOptions) -> Any:
    """``fmt``'s reader of ``path``, its columns typed as ``schema``'s; its notes are printed.

    A reader is a callable that may carry more: ``notes``, ``blank_lines``, a WAV file's ``end_ns``.
    """
    from windvane.ingest import imports

    types = imports.arrow_types(schema) if schema is not None and not schema.holds_blocks else {}
    reader = fmt.make(path, dataclasses.replace(options, column_types=types))
    for note in getattr(reader, "notes", ()):
        say(f"note: {note}", err=True)
    return reader


def _import_reader(
    st: neostore.Store,
    writers: StreamWriters,
    advance: Callable[[int], None],
    opts: ImportOptions,
    path: str,
    reader: Any,
    schema: Schema | None,
) -> ImportResult:
    """Import what ``reader`` reads of ``path`` into the stream (ingest.imports.import_source); the progress is
    ``advance``d by the file's bytes."""
    from windvane.connectors.files.compression import compression_of
    from windvane.ingest import imports

    compressed = compression_of(path) is not None  # its parts count the bytes it holds
    result = imports.import_source(
        st,
        opts.stream.tag,
        reader,
        source_id=imports.source_id_for(path),
        identity=imports.fingerprint(path),
        schema=schema,
        progress=None if compressed else advance,
        same_source=lambda stored: imports.same_file(stored, path),
        restart=opts.restart,
        commit_bytes=opts.commit_mb << 20,
        writers=writers,
        content=imports.content_hash(path),
        name=os.path.abspath(path),
        again=opts.again,
    )
    size = os.path.getsize(path)
    advance(size if compressed else max(0, size - result.nbytes))
    return result


def _report_file(
    tag: str, path: str, fmt: Format, schema: Schema | None, result: ImportResult, blank: int = 0, verbose: bool = False
) -> None:
    """Print what importing ``path`` did: the columns a new stream got (``verbose``: its schema), the summary
    (``blank``: the blank lines a log reader skipped), syslog's years."""
    if result.inferred and schema is not None and not schema.holds_blocks:
        say(_new_stream(tag, path, schema, verbose), err=True)
    say(_import_summary(path, result, blank))
    if fmt.name == "syslog3164":
        say(_syslog_years(path))


def _rejects_message(rejected: int, tag: str, store_url: str) -> str:
    """How many rows an import quarantined, the quarantine stream they are in, and how to read them."""
    from windvane.arrays.stream import stream_path

    return (
        f"{counted(rejected, 'row')} rejected into the quarantine stream {stream_path(tag, quarantine=True)!r}; "
        f"read {'it' if rejected == 1 else 'them'} with `windvane export {shlex.quote(tag)} --quarantine "
        f"--store {shlex.quote(store_url)} --to rejects.csv --format csv`"
    )


def _renames(renames: tuple[str, ...]) -> dict[str, str]:
    """``--rename OLD=NEW`` options as old -> new names (the first ``=`` divides them)."""
    out: dict[str, str] = {}
    for item in renames:
        old, sep, new = item.partition("=")
        if not sep or not old or not new.strip():
            raise BadInput(f"--rename {item!r}: write it as OLD=NEW, both names not empty")
        if old in out:
            raise BadInput(f"--rename names column {old!r} twice")
        out[old] = new
    return out


#: Columns a new stream's one-line summary names; --verbose prints them all.
_NAMED_COLUMNS = 6


def _new_stream(tag: str, path: str, schema: Schema, verbose: bool) -> str:
    """What a new stream got from ``path``: its columns in one line, or (``verbose``) the schema file to pin them."""
    from windvane.ingest.schema import schema_toml

    if verbose:
        return (
            f"stream {tag!r} is new: its columns are typed from {path} (integer and bool columns store a missing "
            f"value as their 'fill'). To pin them, save this as {tag}.toml and pass --schema {tag}.toml:\n"
            + schema_toml(schema).rstrip("\n")
        )
    named = ", ".join(f"{f.name} {f.dtype}" for f in schema.fields[:_NAMED_COLUMNS])
    more = f", and {len(schema.fields) - _NAMED_COLUMNS} more" if len(schema.fields) > _NAMED_COLUMNS else ""
    return (
        f"stream {tag!r} is new: {counted(len(schema.fields), 'column')} typed from {path} ({named}{more}); "
        "--verbose prints the schema, to pin with --schema"
    )


def _syslog_years(path: str) -> str:
    """What year an RFC 3164 file's lines were given: its modification time's."""
    written = datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.UTC)
    return (
        f"{path}: RFC 3164 times carry no year: taken in {written.year}, the year of the file's modification "
        f"time ({written:%Y-%m-%d}); lines dated after that, in {written.year - 1}"
    )


def _import_summary(path: str, result: ImportResult, blank: int = 0) -> str:
    """One line per imported file: rows, rejects, blank lines skipped, MB, MB/s, where it resumed."""
    if result.duplicate_of is not None and not result.commits:
        return (
            f"{path}: already imported: the same content as {result.duplicate_of}; nothing imported "
            "(--again imports it again)"
        )
    if result.resumed_from is not None and not (result.rows or result.rejected):
        return f"{path}: already imported, nothing new after position {result.resumed_from}"
    line = (
        f"{path}: {counted(result.rows, 'row')}, {result.rejected:,} rejected, "
        + (f"{counted(blank, 'blank line')} skipped, " if blank else "")
        + f"{result.nbytes / 1e6:.1f} MB "
        f"in {result.seconds:.1f} s ({result.mbps:.1f} MB/s)"
    )
    if result.resumed_from is not None:
        line += f", resumed from position {result.resumed_from}"
        if result.duplicate_of is not None:
            line += f" where the import of the same content as {result.duplicate_of} stopped"
    if result.reasons:
        line += f"; first reason: {result.reasons[0]}"
    return line


@dataclasses.dataclass(frozen=True)
class TailOptions:
    """`windvane tail`'s argument and options as click parses them (see each option's help and default)."""

    stream: StreamOptions
    path: str
    commit_lines: int
    commit_ms: float
    poll_ms: float
    rotate_wait: float
    multiline_flush_interval: float

    @classmethod
    def parsed(cls, options: dict[str, Any]) -> TailOptions:
        """The options click passes `windvane tail`."""
        return cls(StreamOptions.take(options), **options)


@cli.command(short_help="Follow a growing log file into a stream; survives rotation, resumes exactly.")
@click.argument("path", type=click.Path(dir_okay=False, path_type=str))
@STORE_OPTION
@_tag_option("append to")
@format_option(f"Log format (default {TailConfig.format}): " + format_names() + ".")
@_schema_option("the first lines")
@timezone_option("IANA zone of times written without one. Default: this machine's for syslog, UTC for JSON.")
@click.option(
    "--commit-lines",
    type=click.IntRange(min=1),
    default=TailConfig.commit_lines,
    show_default=True,
    help="Commit after this many lines ...",
)
@click.option(
    "--commit-ms",
    type=click.FloatRange(min=1),
    default=TailConfig.commit_ms,
    show_default=True,
    help="... or this many ms after the first line of a batch was read, whichever comes first.",
)
@click.option(
    "--poll-ms",
    type=click.FloatRange(10, 10_000),
    default=TailConfig.poll_ms,
    show_default=True,
    help="How often to look for new lines when there are none.",
)
@click.option(
    "--rotate-wait",
    type=click.FloatRange(min=0),
    default=TailConfig.rotate_wait,
    show_default=True,
    help="Seconds a renamed (rotated) file must be quiet before the new file at PATH is followed.",
)
@click.option(
    "--multiline-flush-interval",
    type=click.FloatRange(min=0),
    default=TailConfig.flush_seconds,
    show_default=True,
    help="fluentd's multiline parser: seconds with no new line after which the last event is complete.",
)
@parser_options
def tail(**options: Any) -> None:
    """Follow the log file PATH as it grows and commit its lines into stream TAG.

    Rows and the position reached (file identity, byte offset) are committed
    together, so a restart (after Ctrl-C or kill -9) resumes after the last
    committed line: no line twice, none skipped. Rotation by rename (the old
    file is read to its end first) and by copytruncate (the copy beside PATH
    is finished first) is followed. Lines that are not the format go,
    verbatim with the reason, to the tag's quarantine stream. SIGTERM or
    Ctrl-C commits what was read and exits 0.
    """
    from windvane.connectors.files.logs import LogFormatError
    from windvane.connectors.tail.follow import FilePosition, Follower
    from windvane.connectors.tail.run import StopFlag, Tailer
    from windvane.ingest import imports
    from windvane.ingest.streams import StreamWriters

    opts = TailOptions.parsed(options)
    tag = opts.stream.tag
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        schema = opts.stream.schema()
        settings = _tail_settings(opts, schema)
    except (ingest.IngestError, LogFormatError) as exc:
        raise BadInput(str(exc)) from exc
    with open_store(opts.stream.store_url) as st:
        try:
            schema = imports.resolve_schema(st, tag, schema)
        except ingest.IngestError as exc:
            raise BadInput(str(exc)) from exc
        source_id = "tail-" + imports.source_id_for(opts.path)
        stored = imports.read_position(st, tag, source_id)
        committed = FilePosition.from_dict(stored.value) if stored else None
        follower = Follower(opts.path, stored.value if stored else None, rotate_wait=opts.rotate_wait)
        settings = dataclasses.replace(settings, types=imports.arrow_types(schema) if schema else {})
        stop = StopFlag()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        where = f"line {committed.line}, offset {committed.offset}" if committed else "its beginning"
        name = settings.format if isinstance(settings.format, str) else settings.format.name
        click.echo(f"following {opts.path} into {tag} ({name}) from {where}")
        try:
            Tailer(
                follower,
                settings,
                _tail_commit(StreamWriters(st), tag, schema, source_id, opts.path),
                click.echo,
                committed,
            ).run(stop)
        except imports.SchemaMismatch as exc:
            raise click.ClickException(f"{exc}; nothing of the last batch was committed, the position stays") from exc
        finally:
            follower.close()
    click.echo("stopped")


def _tail_settings(opts: TailOptions, schema: Schema | None) -> TailSettings:
    """`windvane tail`'s settings from its options (and the schema's ``[parse]``); LogFormatError if wrong."""
    from windvane.connectors.tail.run import TailSettings

    parsing = opts.stream.parsing
    return TailSettings(
        _tail_format(parsing, schema),
        parsing.timezone,
        opts.commit_lines,
        opts.commit_ms,
        opts.poll_ms,
        flush_seconds=opts.multiline_flush_interval,
        keep_blank_lines=parsing.keep_blank_lines,
    )


def _tail_format(parsing: LogParsing, schema: Schema | None) -> str | LogFormat:
    """`windvane tail`'s log format: a fluentd parser if the options or the schema's ``[parse]`` say one, else the
    ``--format`` name (jsonl by default)."""
    from windvane.connectors.files.logs.fluent import fluent_format

    config = parsing.fluent_config(schema.parse if schema else None)
    return fluent_format(config) if config is not None else parsing.format_name or TailConfig.format


def _tail_commit(writers: StreamWriters, tag: str, schema: Schema | None, source_id: str, path: str) -> Commit:
    """``commit(parts, position)`` for `windvane tail`: rows and position in one transaction (ingest.imports)."""
    from windvane.ingest import imports
    from windvane.ingest.schema import Kind, Schema

    chosen = [schema]

    def commit(parts: list[Part], position: dict[str, Any]) -> tuple[int, int]:
        if chosen[0] is None:  # no stream and no --schema: the first lines that parsed decide
            first = next((p for p in parts if p.table.num_rows), None)
            chosen[0] = imports.infer_schema(tag, first) if first is not None else None
        # Until some line parsed there are only rejects, which need no schema: any will do.
        done = imports.commit_parts(
            writers,
            tag,
            chosen[0] or Schema(tag, Kind.LOG, (tag,), extra="reject"),
            parts,
            source_id,
            position,
            source="tail",
            message=f"tail {path}",
        )
        return done.rows, done.rejected

    return commit
