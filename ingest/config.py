"""The service's and the committer's configuration and their defaults, held here once.

Light on purpose (dataclasses only): the command line reads these defaults
for its options and help without importing the committer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .batch import PENDING_BYTES


@dataclass(frozen=True)
class CommitterConfig:
    """How :class:`ingest.committer.GroupCommitter` groups and bounds commits.

    * ``interval``: seconds to wait after a group's first arrival for more.
    * ``max_pending_bytes``: bytes submitted and not yet committed; past them
      ``submit`` raises :class:`ingest.errors.Backpressure`.
    * ``max_group_bytes``: bytes committed in one transaction at most.
    * ``key_window``: seconds an idempotency key (a Forward chunk id, an HTTP
      ``Idempotency-Key``) is recognised (:class:`ingest.ledger.KeyLedger`).
    * ``decode_workers``: processes decoding and validating; None: one per
      core, at most 4 (:func:`ingest.service.default_decode_workers`).
    """

    interval: float = 0.0
    max_pending_bytes: int = PENDING_BYTES
    max_group_bytes: int = 64 << 20
    key_window: float = 24 * 3600.0
    decode_workers: int | None = None


@dataclass(frozen=True)
class ServiceConfig:
    """The store and schemas ``windvane serve`` commits to, its users and its committer.

    ``http_auth`` is "users" or "none"; None: "users" if ``users`` (a users
    file) is given, else "none".
    """

    store: str
    schemas: str
    users: str | None = None
    http_auth: str | None = None
    committer: CommitterConfig = field(default_factory=CommitterConfig)
