"""Exceptions of the log parsers, each naming what to fix."""

from __future__ import annotations

from windvane.connectors.errors import ConnectorError


class LogFormatError(ConnectorError, ValueError):
    """A log format or one of its options is unknown or invalid (not a bad line: those are rejected, not raised)."""
