"""A group's rows and rejects gathered per tag, staged for append, and written into one transaction.

:func:`gather` merges the validated parts of a group's submissions;
:class:`GroupWriter` encodes each tag's rows ahead (:meth:`arrays.StreamWriter.stage`)
and writes them, the quarantined records and the group's idempotency keys
into an ``arrays.Transaction``, holding the store's commit lock, which the
caller commits.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from windvane import arrays, neostore

from . import streams
from .batch import INVALID_TIME, Batch, Undecoded
from .columns import Columns, Rejected, concat_columns
from .errors import IngestError, SchemaError
from .ledger import KeyLedger
from .prepare import INVALID_TAG, Validated, valid_tag, validate_many
from .schema import Schema, SchemaSet
from .submission import Submission


class KeysCommitted(IngestError):
    """A key of a group was found committed (by another process) under the commit lock; nothing was written."""


@dataclass
class Group:
    """What one commit writes, gathered from its submissions."""

    rows: dict[str, list[Columns]] = field(default_factory=lambda: collections.defaultdict(list))
    rejected: dict[str, list[Rejected]] = field(default_factory=lambda: collections.defaultdict(list))
    sizes: dict[str, int] = field(default_factory=lambda: collections.defaultdict(int))
    newest: dict[str, int] = field(default_factory=dict)  # per tag, its newest event time (ns) in the group
    receipts: list[tuple[int, int, tuple[str, ...]]] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    key_write: tuple[tuple[int, int], list[bytes]] | None = None  # the ledger bucket the keys went to, once written
    head: bytes | None = None  # the newest commit when the commit lock was taken, once written
    locked: float | None = None  # when the commit lock was taken (time.monotonic), once written
    poisoned: tuple[int, int] = (0, 0)  # (submissions, events) quarantined verbatim (see _salvaged)

    def counts(self) -> tuple[int, int]:
        """(events accepted, events quarantined)."""
        return sum(a for a, _, _ in self.receipts), sum(q for _, q, _ in self.receipts)

    def add(self, part: Validated) -> tuple[int, int]:
        """Add ``part``'s rows and rejects; returns (rows accepted, records quarantined)."""
        accepted = quarantined = 0
        if part.columns is not None:
            self.rows[part.tag].append(part.columns)
            accepted = part.columns.rows
            self.sizes[part.tag] += part.size
            if part.columns.rows:
                newest = _newest(part.columns)
                if newest > self.newest.get(part.tag, 0):
                    self.newest[part.tag] = newest
        if part.rejected:
            tag = part.tag if valid_tag(part.tag) else INVALID_TAG
            self.rejected[tag].extend(part.rejected)
            quarantined = len(part.rejected)
        return accepted, quarantined


def _newest(columns: Columns) -> int:
    if columns.newest is not None:
        return columns.newest
    times = columns.columns["time"]
    # One row is the common case (a sensor's chunk): numpy's max costs more than the rest of it.
    return int(times[0]) if len(times) == 1 else int(times.max())


def _salvaged(batch: Batch | Undecoded, reason: str) -> Validated:
    """Every event of ``batch`` rejected with ``reason``, verbatim; an :class:`Undecoded` item's bytes as
    one event (they may be what could not be decoded)."""
    tag = batch.tag if valid_tag(batch.tag) else INVALID_TAG
    if isinstance(batch, Undecoded):
        rejected = [Rejected(time.time_ns(), reason, batch.payload, batch.source)]
    else:
        rejected = [
            Rejected(int(t) if t != INVALID_TIME else time.time_ns(), reason, batch.raw_bytes(i), batch.source)
            for i, t in enumerate(batch.times)
        ]
    return Validated(tag, batch.size, None, rejected)


def _rows(schema: Schema, parts: list[Columns]) -> dict[str, Any] | list[dict[str, Any]]:
    """What one append of ``parts`` to a stream of ``schema`` takes: blocks are large arrays, passed as
    they are (concatenating them would copy every byte once more); table columns are merged (their lists
    of strings chain cheaply, and one part of many rows encodes each chunk once)."""
    if schema.holds_blocks:
        return [p.columns for p in parts]
    return concat_columns([p.columns for p in parts])


def _parts(item: Submission, validated: Iterator[Validated]) -> Iterator[Validated]:
    """The validated parts of ``item``'s batches (those decoded already come from ``validated``)."""
    prepared = iter(item.validated or ())
    for batch in item.batches:
        if item.salvage is not None:
            yield _salvaged(batch, item.salvage)
        elif isinstance(batch, Undecoded):
            yield from next(prepared)
        else:
            yield next(validated)


def gather(schemas: SchemaSet, group: list[Submission]) -> Group:
    """What ``group`` stores, its submissions' Undecoded items prepared already (see ``DecodePool.collect``)."""
    out = Group()
    # Batches decoded already (no workers, or a connector that decodes) are validated together.
    validated = iter(
        validate_many(
            schemas,
            [
                batch
                for item in group
                if item.salvage is None
                for batch in item.batches
                if not isinstance(batch, Undecoded)
            ],
        )
    )
    for item in group:
        accepted = quarantined = 0
        reasons: dict[str, None] = {}
        for part in _parts(item, validated):
            rows, rejects = out.add(part)
            accepted += rows
            quarantined += rejects
            if part.rejected:
                reasons.update(dict.fromkeys(r.reason for r in part.rejected[:16]))
        out.receipts.append((accepted, quarantined, tuple(reasons)[:8]))
        if item.salvage is not None:
            out.poisoned = (out.poisoned[0] + 1, out.poisoned[1] + quarantined)
        if item.key is not None:
            out.keys.append(item.key)
        out.keys.extend(item.record_keys)
    return out


class GroupWriter:
    """Stages and writes groups to ``store``'s streams, keeping the stream writers across commits and the
    ``ledger`` of idempotency keys in step with what is committed. Used by one thread at a time."""

    def __init__(self, store: neostore.Store, schemas: SchemaSet, ledger: KeyLedger):
        self.store = store
        self.schemas = schemas
        self.ledger = ledger
        self._writers = streams.StreamWriters(store)  # kept across commits: no re-reading per commit

    def _schema_of(self, tag: str) -> Schema:
        """The schema ``tag``'s rows were validated against."""
        schema = self.schemas.for_tag(tag)
        if schema is None:
            raise SchemaError(f"no schema takes tag {tag!r}, though its rows were validated against one")
        return schema

    def stage(self, gathered: Group, size: int) -> dict[str, arrays.Staged]:
        """Per tag, the staged append of ``gathered``'s rows (``size``: the group's bytes)."""
        # Between commits: the writers of the group before may be committing still.
        self._writers.trim_if_due(size)
        return {
            tag: streams.stage(self._writers, tag, _rows(self._schema_of(tag), parts))
            for tag, parts in gathered.rows.items()
        }

    def write(
        self, group: list[Submission], gathered: Group, staged: dict[str, arrays.Staged]
    ) -> arrays.Transaction | None:
        """A transaction holding what ``gathered`` (of ``group``) stores (None if it stores nothing), not
        yet committed; :class:`KeysCommitted` (nothing written) if a key of ``group`` is committed already.

        ``staged``: per tag, the staged append of its rows.
        """
        if not (gathered.rows or gathered.rejected or gathered.keys):
            return None
        events, rejects = gathered.counts()
        tx = arrays.Transaction(
            self.store,
            message=f"ingest: {events} events, {rejects} quarantined",
            metadata={"events": events, "quarantined": rejects, "submissions": len(gathered.receipts)},
            user="windvane-ingest",
        )
        try:
            self._write_into(tx, group, gathered, staged)
        except BaseException:
            tx.abort()
            raise
        return tx

    def _write_into(
        self, tx: arrays.Transaction, group: list[Submission], gathered: Group, staged: dict[str, arrays.Staged]
    ) -> None:
        """Write ``gathered``'s rows, rejects and keys into ``tx``; KeysCommitted if a key of ``group`` is."""
        # The commit lock, held from here to the commit: what the ledger reads stays the latest.
        gathered.head = tx.head()
        gathered.locked = time.monotonic()
        if gathered.keys:
            self.ledger.sync(self.store, gathered.head)
            # Also keys read by an earlier group's sync, after this group was checked in memory.
            if any(item.key is not None and item.key in self.ledger for item in group):
                raise KeysCommitted()
        self._write_streams(tx, gathered, staged)
        if gathered.keys:
            name, value, where, bucket = self.ledger.to_write(gathered.keys, gathered.head)
            # raw: no array's row log covers the ledger's names (under _windvane/), so none is looked for
            # (on MariaDB each look is a round trip).
            tx.set(name, value, raw=True)
            gathered.key_write = (where, bucket)

    def _write_streams(self, tx: arrays.Transaction, gathered: Group, staged: dict[str, arrays.Staged]) -> None:
        schemas = {tag: self._schema_of(tag) for tag in staged}
        streams.ready_unknown(tx, self._writers, schemas)
        for tag, append in staged.items():
            streams.write(tx, self._writers, tag, schemas[tag], append)
        for tag, rejected in gathered.rejected.items():
            streams.quarantine(tx, self._writers, tag, rejected)

    @property
    def held_bytes(self) -> int:
        """Bytes of rows the stream writers hold between commits (their partial chunks)."""
        return self._writers.held_bytes()

    def let_go(self) -> int:
        """Let go of every row the stream writers hold (their streams' row logs keep them; a stream
        without one is read afresh on its next append): for a service idle after a burst. The bytes freed."""
        return self._writers.trim(0)

    def committed(self, gathered: Group, tid: bytes | None) -> None:
        """``gathered`` is committed in ``tid`` (None: it stored nothing): the ledger learns of it."""
        if gathered.key_write is not None:
            self.ledger.committed(*gathered.key_write, gathered.keys, tid, gathered.head)
        elif tid is not None and gathered.head is not None:
            self.ledger.advanced(tid, gathered.head)
