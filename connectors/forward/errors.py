"""Errors of the Forward connector.

Every error a decoder raises is a :class:`ForwardError`; the server closes
the connection on it, without acknowledging the message it was raised for,
after the messages before it are committed and acknowledged.
"""

from __future__ import annotations

from typing import Any

from windvane.connectors.errors import ConnectorError


class ForwardError(ConnectorError):
    """Base class: the connection's byte stream cannot be decoded further."""

    def __init__(self, message: str, *, tag: str | None = None) -> None:
        super().__init__(message)
        self.tag = tag  # the message's tag, when it could be read (for logs)

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword arguments are not in ``args``: rebuild from the message and restore the attributes,
        # so the error survives the trip back from ingest's decode workers.
        return (type(self), (str(self),), self.__dict__)


class MalformedMessage(ForwardError):
    """The bytes are not a Forward message: unreadable msgpack/JSON, or framing of the wrong type.

    The message names what is wrong ("tag is int, expected a string",
    "gzip payload is truncated", ...). Records that are merely invalid (not
    a map, an unreadable time) are not malformed: they reach ingest.
    """


class OversizeMessage(ForwardError):
    """A message, or its decompressed entries, is larger than the configured limit."""

    def __init__(self, message: str, *, tag: str | None = None, limit: int = 0, size: int = 0) -> None:
        super().__init__(message, tag=tag)
        self.limit = limit
        self.size = size
