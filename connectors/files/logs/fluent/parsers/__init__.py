"""fluentd's parser types, one module each; :data:`PARSERS` maps a type name to its class.

Each class is made from a :class:`..config.ParseConfig` (its options
checked then: a bad one raises ParseConfigError) and has
``parse(lines, options) -> Rows``.
"""

from __future__ import annotations

from typing import Protocol

from ...lines import Lines, Rows
from ...options import LogOptions
from ..config import ParseConfig
from .none import NoneParser
from .regexp import RegexpParser
from .syslog import SyslogParser


class Parser(Protocol):
    """A fluentd parser type."""

    def __init__(self, config: ParseConfig) -> None: ...

    def parse(self, lines: Lines, options: LogOptions) -> Rows: ...


PARSERS: dict[str, type[Parser]] = {"regexp": RegexpParser, "none": NoneParser, "syslog": SyslogParser}

__all__ = ["PARSERS", "Parser"]
