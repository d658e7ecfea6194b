"""The service's, the committer's and the importer's configuration and their defaults, held here once.

Light on purpose (dataclasses only): the command line reads these defaults
for its options and help without importing the committer or the importer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .batch import PENDING_BYTES

#: Decode worker processes at most when their number is not given: one per core up to this.
MAX_DECODE_WORKERS = 4


def default_decode_workers() -> int:
    """Worker processes for decoding: one per core (at most :data:`MAX_DECODE_WORKERS`), none on one core.

    One per core, not one per core but the main process's: decoding and
    validating in a worker costs more per event than the main process's
    share (event loop, stream append), so on 2 cores 2 workers and the main
    process keep both cores busy where 1 worker alone is the bottleneck
    (benchmarks/README.md measures it).
    """
    cores = os.cpu_count() or 1
    return 0 if cores < 2 else min(MAX_DECODE_WORKERS, cores)


@dataclass(frozen=True)
class CommitterConfig:
    """How :class:`ingest.committer.GroupCommitter` groups and bounds commits.

    * ``interval``: seconds to wait after a group's first arrival for more.
    * ``max_pending_bytes``: bytes submitted and not yet committed; past them
      ``submit`` raises :class:`ingest.errors.Backpressure`.
    * ``max_group_bytes``: bytes committed in one transaction at most.
    * ``key_window``: seconds an idempotency key (a Forward chunk id, an HTTP
      ``Idempotency-Key``) is recognised (:class:`ingest.ledger.KeyLedger`).
    * ``decode_workers``: processes decoding and validating; None:
      :func:`default_decode_workers`.
    * ``trim_after``: seconds a decode worker, idle after a burst, waits
      before it gives the memory the burst took back to the system
      (:class:`ingest.memory.AfterBursts`); None: never.
    * ``takes_turns``: other committers (the server's other workers) commit
      to the same store, taking turns at its commit lock: the next group is
      then taken and prepared once this one's commit has ended, and never
      made to linger (see :mod:`ingest.pipeline`).
    """

    interval: float = 0.0
    max_pending_bytes: int = PENDING_BYTES
    max_group_bytes: int = 64 << 20
    key_window: float = 24 * 3600.0
    decode_workers: int | None = None
    trim_after: float | None = None
    takes_turns: bool = False


@dataclass(frozen=True)
class WorkerPlace:
    """Which worker of how many this process is, where the workers answer each other, and with what key."""

    index: int
    count: int
    directory: str
    authkey: bytes
    #: How many times this worker was started again after it ended unasked.
    restarts: int = 0

    def address(self, index: int) -> str:
        """The unix socket worker ``index`` answers on."""
        return str(Path(self.directory) / f"worker-{index}.sock")


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
    #: Which worker of a server of several this service is (None: the server's only process).
    worker: WorkerPlace | None = None


@dataclass(frozen=True)
class ImportConfig:
    """How :func:`ingest.imports.import_source` commits a file (``windvane import``).

    * ``commit_bytes``: file bytes per commit at least. Each commit rewrites
      the stream's partial last chunks and waits for one log flush, so a
      commit holds enough of the file for those to be a small share of the
      work.
    """

    commit_bytes: int = 32 << 20
