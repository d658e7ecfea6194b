"""How `windvane import` and `windvane tail` are told to parse lines: ``--format``, ``--parser``, ``--expression``,
``--time-format``, ``--timezone``, ``--keep-blank-lines`` (:class:`LogParsing`).

A fluentd ``<parse>`` section comes from, first found: ``--parser FILE.toml``
(or ``--parser NAME``, a shipped parser of :mod:`windvane.parsers`);
``--format TYPE`` with ``--expression`` / ``--time-format`` (TYPE defaults to
regexp); ``--format TYPE`` alone, TYPE one of fluentd's parser names
(:data:`FLUENTD_TYPES`: ``nginx``, ``syslog``, ... with fluentd's defaults)
that is not one of windvane's own formats; the ``[parse]`` table of the
``--schema`` file. None of them: the format is windvane's own (``combined``
and its aliases ``common``, ``apache``; ``syslog3164`` or ``rfc3164``;
``syslog5424`` or ``rfc5424``; ``jsonl``, ``ndjson`` or ``jsonlines``; and
`windvane import`'s file formats, ``csv`` among them).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, TypeVar

import click

from windvane import parsers
from windvane.cli.root import BadInput

if TYPE_CHECKING:
    from windvane.connectors.files.logs.fluent import ParseConfig

Command = TypeVar("Command", bound=Callable[..., Any])

#: fluentd's parser types, by the names ``--format`` takes them: the names of PARSERS, written out so that
#: ``--help`` loads no parser.
FLUENTD_TYPES = (
    "nginx",
    "apache2",
    "apache_error",
    "syslog",
    "ltsv",
    "csv",
    "tsv",
    "json",
    "none",
    "msgpack",
    "multiline",
    "logfmt",
    "regexp",
)


def format_names(own: Collection[str] = ()) -> str:
    """The ``--format`` help's list of log format names: windvane's own, then fluentd's (but ``own``)."""
    return (
        "windvane's own: combined (alias common, apache: nginx/Apache access logs), syslog3164 (rfc3164), "
        "syslog5424 (rfc5424), jsonl (ndjson, jsonlines); fluentd's parsers with their defaults: "
        + ", ".join(name for name in FLUENTD_TYPES if name not in own)
        + " (regexp needs --expression; other options: --parser)"
    )


_OPTIONS = (
    click.option(
        "--parser",
        "parser_path",
        metavar="FILE.toml|NAME",
        help='A fluentd <parse> section as TOML (type = "regexp", expression = \'...\', time_format = "..."), '
        "or the NAME of a shipped one (`windvane parsers` lists them): lines are parsed as fluentd's parser "
        "of that type does.",
    ),
    click.option(
        "--expression",
        default=None,
        metavar="REGEXP",
        help="fluentd regexp parser's expression (Ruby (?<name>...) groups; implies --format regexp).",
    ),
    click.option(
        "--time-format",
        default=None,
        metavar="STRPTIME",
        help="fluentd's time_format of the time field (e.g. %d/%b/%Y:%H:%M:%S %z) for --expression or --format; "
        "`import` of CSV, Parquet or Arrow files without --expression or --parser: the strptime layout of their "
        "text time column (e.g. %m/%d/%Y %H:%M; Arrow's strptime, in --timezone unless %z).",
    ),
    click.option(
        "--keep-blank-lines",
        is_flag=True,
        help="Hand blank (empty or whitespace-only) lines of a log to its parser, as fluentd's in_tail does "
        "(most parsers reject them). Default: they are skipped, and the summary says how many; fluentd's "
        "multiline parser always keeps them (they belong to its events).",
    ),
)


def parser_options(command: Command) -> Command:
    """``command`` with the options above."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def format_option(help_text: str) -> Callable[[Command], Command]:
    """The ``--format NAME`` option, worded for its command by ``help_text``."""
    return click.option("--format", "format_name", default=None, help=help_text)


def timezone_option(help_text: str) -> Callable[[Command], Command]:
    """The ``--timezone ZONE`` option, worded for its command by ``help_text``."""
    return click.option("--timezone", default=None, metavar="ZONE", help=help_text)


@dataclasses.dataclass(frozen=True)
class LogParsing:
    """The parsing options as click parses them: those above, ``--format`` and ``--timezone``."""

    format_name: str | None
    parser_path: str | None
    expression: str | None
    time_format: str | None
    timezone: str | None
    keep_blank_lines: bool

    @classmethod
    def take(cls, options: dict[str, Any]) -> LogParsing:
        """The parsing options, taken out of a command's ``options`` (the others stay)."""
        return cls(**{f.name: options.pop(f.name) for f in dataclasses.fields(cls)})

    def fluent_config(
        self, schema_parse: dict[str, Any] | None = None, own_formats: Collection[str] = ()
    ) -> ParseConfig | None:
        """:func:`fluent_config` of these options."""
        return fluent_config(
            self.format_name,
            self.parser_path,
            self.expression,
            self.time_format,
            schema_parse,
            self.timezone,
            own_formats,
        )


def fluent_config(
    format_name: str | None,
    parser_path: str | None,
    expression: str | None,
    time_format: str | None,
    schema_parse: dict[str, Any] | None = None,
    timezone: str | None = None,
    own_formats: Collection[str] = (),
) -> ParseConfig | None:
    """The fluentd section these options say (see the module), None for a windvane format; BadInput if wrong.

    ``own_formats``: more names that are windvane's own (`windvane import`'s file formats: ``csv``, ...).
    """
    from windvane.connectors.files.logs import log_format
    from windvane.connectors.files.logs.errors import LogFormatError
    from windvane.connectors.files.logs.fluent import PARSERS, ParseConfig, fluent_format

    inline = {k: v for k, v in (("expression", expression), ("time_format", time_format)) if v is not None}
    alone = False  # --format TYPE with no option: those TYPE needs come only from a --parser file
    try:
        if parser_path is not None:
            if inline or format_name is not None:
                raise BadInput(
                    "--parser holds the whole <parse> section: give no --format, --expression or --time-format"
                )
            config = ParseConfig.from_toml(parser_file(parser_path))
        elif inline:
            config = ParseConfig.from_mapping({"type": format_name or "regexp", **inline}, where="--format")
        elif format_name in PARSERS and not (format_name in own_formats or _windvane_format(format_name, log_format)):
            config, alone = ParseConfig(format_name), True
        elif format_name is None and schema_parse is not None:
            config = ParseConfig.from_mapping(schema_parse, where="the schema's [parse]")
        else:
            return None
        if timezone and config.timezone is None and not config.utc and config.time_format is not None:
            config = config.replace(timezone=timezone)  # --timezone: the zone of times written without one
        fluent_format(config)  # every option checked before anything is read
    except LogFormatError as exc:
        if alone:
            raise BadInput(
                f"--format {format_name}: {exc}; --format gives no parser options: write them with "
                f'type = "{format_name}" in a TOML file and give it as --parser FILE.toml'
            ) from exc
        raise BadInput(str(exc)) from exc
    return config


def parser_file(given: str) -> str:
    """The TOML file ``--parser`` names: ``given`` if it is a file, else the shipped parser of that name."""
    if os.path.isfile(given) or given.endswith(".toml") or os.sep in given:
        if not os.path.isfile(given):
            raise BadInput(f"--parser {given}: no such file")
        return given
    try:
        return str(parsers.parser_path(given))
    except parsers.ParserNotFound as exc:
        raise BadInput(f"--parser {given}: not a file, and {exc} (`windvane parsers` lists them)") from None


def _windvane_format(name: str, log_format: Callable[[str], Any]) -> bool:
    """Whether ``name`` is one of windvane's own log formats (file formats: the caller's ``own_formats``)."""
    try:
        log_format(name)
    except ValueError:
        return False
    return True
