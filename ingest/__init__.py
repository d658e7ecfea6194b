"""ingest: validate decoded events against schemas, commit them durably in groups, acknowledge what is committed.

Connectors hand :class:`Batch` objects to a :class:`Sink`; the sink's
``submit`` resolves once the events are committed.
"""

from __future__ import annotations

from .auth import Users
from .batch import INVALID_TIME, Batch, Receipt, Sink, Undecoded, packed_event
from .errors import AuthError, Backpressure, CommitFailed, IngestError, SchemaError, UndecodableBatch

__all__ = [
    "INVALID_TIME",
    "AuthError",
    "Backpressure",
    "Batch",
    "CommitFailed",
    "IngestError",
    "Receipt",
    "SchemaError",
    "Sink",
    "UndecodableBatch",
    "Undecoded",
    "Users",
    "packed_event",
]
