"""fluentd's parser types, one module each; :data:`PARSERS` maps a type name to its class.

Each class is made from a :class:`..config.ParseConfig` (its options
checked then: a bad one raises ParseConfigError) and has
``parse(lines, options) -> Rows``. A parser whose records span lines
(``multiline``) also has ``group(lines) -> Events``: its ``parse`` is then
given the events (see :func:`..fluent_format`).
"""

from __future__ import annotations

from typing import Protocol

from ...lines import Lines, Rows
from ...options import LogOptions
from ..config import ParseConfig
from .apache2 import Apache2Parser
from .apache_error import ApacheErrorParser
from .multiline import MultilineParser
from .nginx import NginxParser
from .none import NoneParser
from .regexp import RegexpParser


class Parser(Protocol):
    """A fluentd parser type."""

    def __init__(self, config: ParseConfig) -> None: ...

    def parse(self, lines: Lines, options: LogOptions) -> Rows: ...


PARSERS: dict[str, type[Parser]] = {
    "regexp": RegexpParser,
    "none": NoneParser,
    "apache2": Apache2Parser,
    "apache_error": ApacheErrorParser,
    "nginx": NginxParser,
    "multiline": MultilineParser,
}

__all__ = ["PARSERS", "Parser"]
