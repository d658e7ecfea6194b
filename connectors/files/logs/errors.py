"""Exceptions of the log parsers, each naming what to fix."""

from __future__ import annotations

from windvane.connectors.errors import ConnectorError


class LogFormatError(ConnectorError, ValueError):
    """A log format or one of its options is unknown or invalid (not a bad line: those are rejected, not raised)."""


class LineError(ConnectorError, ValueError):
    """A line a parser cannot read: raised and caught inside the parser, its message the reason the line is
    quarantined with (never raised out of a parser)."""
