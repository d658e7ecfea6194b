"""Tested ``<parse>`` sections for common log formats, shipped with windvane.

Each parser is ``<name>.toml``, a fluentd ``<parse>`` section as TOML (``windvane import FILE --parser
nginx_error``; or copied into a schema's ``[parse]`` table or a fluentd configuration), with sample lines in
``<name>.log``. ``catalog.toml`` gives each a title and the fields every sample gives; the test suite runs
every sample through the real fluentd. ``windvane parsers`` lists them.
"""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["ParserNotFound", "catalog", "list_parsers", "parser_path", "sample_path"]

HERE = Path(__file__).resolve().parent


class ParserNotFound(LookupError):
    """No shipped parser has that name."""


@cache
def catalog() -> dict[str, dict[str, Any]]:
    """Each shipped parser's entry: ``title``, ``fields`` (and ``own_time`` false where lines carry no time)."""
    return tomllib.loads((HERE / "catalog.toml").read_text())


def list_parsers() -> list[str]:
    """The names of the shipped parsers, sorted."""
    return sorted(catalog())


def parser_path(name: str) -> Path:
    """The TOML ``<parse>`` section of parser ``name``; ParserNotFound naming the known ones."""
    if name not in catalog():
        raise ParserNotFound(f"no shipped parser {name!r}; known: {', '.join(list_parsers())}")
    return HERE / f"{name}.toml"


def sample_path(name: str) -> Path:
    """Sample lines of parser ``name`` (each must parse)."""
    return parser_path(name).with_suffix(".log")
