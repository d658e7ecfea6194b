"""Exceptions of the ingest layer, each with a message a user can act on."""

from __future__ import annotations


class IngestError(Exception):
    """Base class of ingest errors."""


class SchemaError(IngestError):
    """A schema file is invalid; the message names the file and the field."""


class Backpressure(IngestError):
    """The store is behind: try again after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: float = 1.0):
        super().__init__(message)
        self.retry_after = retry_after


class CommitFailed(IngestError):
    """The store could not commit a group; none of its events is acknowledged."""


class AuthError(IngestError):
    """Credentials are missing or wrong; the message says which, never the secret."""


class UndecodableBatch(IngestError):
    """An :class:`ingest.batch.Undecoded` item's bytes could not be decoded; nothing of its submission is stored.

    ``cause`` is the exception the connector's decode function raised (its
    own class, e.g. a malformed-message error), or None when it could not be
    carried across processes; the message always names the problem.
    Connectors translate it back into their own answer (no ack, a 400).
    """

    def __init__(self, message: str, cause: BaseException | None = None):
        super().__init__(message)
        self.cause = cause

    def __reduce__(self) -> tuple[type[UndecodableBatch], tuple[str, BaseException | None]]:
        # The keyword-free form pickle needs: it crosses from the worker process.
        return (type(self), (str(self), self.cause))
