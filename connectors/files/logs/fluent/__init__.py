"""fluentd-compatible log parsing: a ``<parse>`` section (:class:`ParseConfig`) read as fluentd reads it.

:func:`fluent_format` makes a :class:`..LogFormat` of a section, so
``parse_log``, ``LogReader``, ``windvane import`` and ``windvane tail`` run
it as any log format::

    config = ParseConfig.from_mapping({"type": "regexp", "expression": r"^(?<host>\\S+) (?<message>.*)$"})
    parsed = parse_log(fluent_format(config), block)

Parser types: :data:`.parsers.PARSERS`. ``multiline`` groups lines into
events, each one text (the format's ``group`` step). Blank lines are skipped and
counted, as windvane's own formats do (fluentd's in_tail hands them to the parser, which
rejects them but for ``none`` and a few expressions); ``LogOptions(keep_blank=True)``
parses them as fluentd does. ``multiline`` always keeps them: they belong to its
events. Lines a parser cannot read are
rejected with fluentd's reason (``pattern not matched``, ``invalid time
format: ...``).
"""

from __future__ import annotations

from .. import LogFormat
from .config import ParseConfig, ParseConfigError
from .parsers import PARSERS
from .timefmt import TimeParser

__all__ = ["PARSERS", "ParseConfig", "ParseConfigError", "TimeParser", "fluent_format"]


def fluent_format(config: ParseConfig) -> LogFormat:
    """The log format that parses as fluentd's parser ``config.type`` with ``config``'s options; ParseConfigError if
    the type is unknown or an option is wrong."""
    make = PARSERS.get(config.type)
    if make is None:
        raise ParseConfigError(f"unknown parser type {config.type!r}; known: {', '.join(sorted(PARSERS))}")
    parser = make(config)
    group = getattr(parser, "group", None)  # a parser whose records span lines makes events of them first
    binary = getattr(parser, "binary", False)  # msgpack reads the lines' bytes
    return LogFormat(
        f"fluent:{config.type}",
        f"fluentd's {config.type} parser",
        parser.parse,
        keep_blank=group is not None,  # a blank line inside an event is part of it
        group=group,
        binary=binary,
        independent=group is None,  # a parser reads a line (or event) by itself
    )
