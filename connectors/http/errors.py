"""Errors of the HTTP connector: each carries the HTTP status, a stable code and an actionable message.

The decoders (:mod:`connectors.http.decode`) raise only :class:`HttpError`
subclasses; the application turns any of them into a JSON reply
``{"error": code, "message": message}`` with ``status``.
"""

from __future__ import annotations

from typing import Any

from windvane.connectors.errors import ConnectorError


class HttpError(ConnectorError):
    """A request the connector refuses. ``code`` is stable (clients may match it), ``message`` says what to fix."""

    status = 500

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        # ``args`` holds the message only: rebuild with the code too (errors cross back from ingest's decode workers).
        return (type(self), (self.code, self.message), self.__dict__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r})"


class BadRequest(HttpError):
    """400: the body (or the query, or the path) is malformed; resending it unchanged fails again."""

    status = 400


class Unauthorized(HttpError):
    """401: credentials are missing or wrong."""

    status = 401


class Forbidden(HttpError):
    """The credentials are right, and their user does not hold the role the request needs."""

    status = 403


class NotFound(HttpError):
    """404: nothing is served here."""

    status = 404


class PayloadTooLarge(HttpError):
    """413: the body, sent or decompressed, exceeds a limit; split it into smaller requests."""

    status = 413


class UnsupportedEncoding(HttpError):
    """415: a ``Content-Encoding`` the connector cannot decompress."""

    status = 415


class ExpectationFailed(HttpError):
    """417: an ``Expect`` header other than ``100-continue``."""

    status = 417


class RequestTimeout(HttpError):
    """408: the request's body did not arrive within the body timeout."""

    status = 408


class ServiceUnavailable(HttpError):
    """503: the server cannot take the request now (its memory budget is full); retry after ``retry_after`` s."""

    status = 503

    def __init__(self, code: str, message: str, retry_after: int = 1) -> None:
        super().__init__(code, message)
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.message, self.retry_after), self.__dict__)


class InvalidMetric(ConnectorError, ValueError):
    """A metrics sample with a bad name, label, type or value (a fault of the code that made it, not a request)."""
