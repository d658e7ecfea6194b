"""What a connector hands to ingest: batches of decoded events, and the sink that takes them.

A connector (Forward, HTTP, MQTT, files) decodes what arrives into
:class:`Batch` objects, one tag each, and awaits :meth:`Sink.submit`. The
awaitable resolves only once every event of the batches is durably
committed (stored in its stream, or in its tag's quarantine stream with the
reason it was rejected); only then may the connector acknowledge.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgpack

from .errors import IngestError

#: The time a connector gives an event whose time it could not read (not an
#: integer, a float or an EventTime; out of range). Ingest quarantines such
#: events with the reason instead of storing a made-up time.
INVALID_TIME = -(1 << 63)

#: Bytes of received data a service holds by default while they wait for their commit: the committer's
#: ``max_pending_bytes`` and the connectors' memory budget (:class:`connectors.limits.Limits`), one budget.
PENDING_BYTES = 256 << 20


def packed_event(time_ns: int, record: Any) -> bytes:
    """The msgpack ``[time, record]`` of an event, for a record whose arrival bytes are not at hand.

    The time is an EventTime-free integer of nanoseconds so that nothing of
    the event is lost; records that msgpack cannot encode are kept as their
    ``repr``.
    """
    try:
        packed: bytes = msgpack.packb([time_ns, record], use_bin_type=True)
    except (TypeError, ValueError, OverflowError, RecursionError):
        pass
    else:
        return packed
    try:
        text = repr(record)
    except RecursionError:  # nested deeper than Python recurses: the outermost part is all that is kept
        text = f"<{type(record).__name__} nested too deeply to represent>"
    packed = msgpack.packb([time_ns, text], use_bin_type=True)
    return packed


@dataclass(slots=True)
class Batch:
    """Events of one tag in arrival order.

    ``times`` are nanoseconds since the Unix epoch (UTC), one per record.
    ``records`` are the decoded records; ingest validates them against the
    tag's schema (a record that is not a mapping is rejected there, not by
    the connector). ``raw(i)`` returns the bytes record ``i`` arrived as,
    which a rejected record is quarantined with; without it the record is
    kept as :func:`packed_event`. ``source`` names the connector for logs and
    metrics (``"forward"``, ``"http"``, ...), ``size`` the bytes it arrived
    as (for backpressure and metrics). ``typed`` says the records are
    instances of the tag's record type (:mod:`ingest.record_types`): they
    fit its schema as they are; or, all of them, maps with bin names
    decoded as its ``bin_keyed`` (:class:`~ingest.record_types.FieldsRecord`), which
    ingest checks a column at a time. ``faults`` maps the index of a record the
    connector could not read (a line that is not JSON, a time that is not
    a time) to why: ingest quarantines it verbatim with that reason.
    """

    tag: str
    times: Sequence[int]
    records: Sequence[Any]
    raw: Callable[[int], bytes] | None = None
    source: str = ""
    size: int = 0
    typed: bool = False
    faults: Mapping[int, str] | None = None

    def __post_init__(self) -> None:
        if len(self.times) != len(self.records):
            raise ValueError(f"a batch has {len(self.times)} times for {len(self.records)} records")

    def __len__(self) -> int:
        return len(self.records)

    def raw_bytes(self, i: int) -> bytes:
        """The bytes record ``i`` arrived as (or its msgpack ``[time, record]``)."""
        if self.raw is not None:
            return bytes(self.raw(i))
        return packed_event(int(self.times[i]), self.records[i])


@dataclass(slots=True)
class Undecoded:
    """Bytes a connector hands over still encoded, for ingest to decode off the event loop.

    ``decode`` must be a module-level function (it is pickled by reference
    and called in a worker process): ``decode(payload, *args)`` returns the
    :class:`Batch` objects the bytes hold, or raises the connector's own
    exception for bytes it cannot read. Ingest reports such an exception as
    :class:`ingest.errors.UndecodableBatch` carrying it, so the connector
    answers as it would have had it decoded in place. ``tag`` names the
    bytes in logs, ``size`` is what they arrived as (for backpressure and
    metrics), ``source`` the connector. Only submit these to a sink whose
    ``accepts_undecoded`` is true; ingest never imports the connector.

    With ``typed``, ingest calls ``decode(payload, *args, record_type=T)``,
    ``T`` the record type of ``tag``'s schema (:mod:`ingest.record_types`)
    or None: a decoder whose records all decode as ``T`` may return them so,
    with ``Batch.typed``, and ingest skips checking them one by one.
    """

    tag: str
    payload: bytes
    decode: Callable[..., Sequence[Batch]]
    args: tuple[Any, ...] = ()
    source: str = ""
    size: int = 0
    typed: bool = False


@dataclass(frozen=True, slots=True)
class Receipt:
    """What a durable commit did with a submission."""

    accepted: int  # events stored in their streams
    quarantined: int  # events stored in quarantine streams, with the reason
    tid: bytes | None  # the commit that holds them; None if nothing needed storing
    duplicate: bool = False  # the idempotency key was committed before: nothing was stored again
    reasons: tuple[str, ...] = field(default=())  # distinct rejection reasons, for logs and HTTP replies


class Sink(Protocol):
    """Where connectors hand their batches. Implemented by :class:`ingest.committer.GroupCommitter`."""

    @property
    def accepts_undecoded(self) -> bool:
        """Whether :meth:`submit` takes :class:`Undecoded` items among ``batches`` (a sink that decodes in
        worker processes). Connectors read it with ``getattr(sink, ..., False)``."""

    def record_type(self, tag: str) -> type | None:
        """The msgspec type of ``tag``'s records (:mod:`ingest.record_types`), or None. A connector that
        decodes in place may decode records as it and submit them so, with :attr:`Batch.typed`. Optional:
        connectors read it with ``getattr(sink, "record_type", None)``."""
        ...

    async def submit(
        self,
        batches: Sequence[Batch | Undecoded],
        *,
        key: bytes | None = None,
        wait: bool = True,
        record_keys: Sequence[bytes] = (),
    ) -> Receipt:
        """Store ``batches`` durably; resolve once they are committed.

        ``key`` is an idempotency key (a Forward chunk id, an HTTP
        ``Idempotency-Key``): batches submitted again under a key already
        committed are not stored twice, and the receipt says
        ``duplicate=True``; a resubmission while the first is still in flight
        waits for the first. With ``wait=False`` a sink that is full raises
        :class:`ingest.errors.Backpressure` at once instead of waiting for
        room (HTTP answers 503 with it; socket readers wait, and so stop
        reading). Raises :class:`ingest.errors.CommitFailed` if the store
        could not commit: nothing of the batches is then acknowledged, or
        :class:`ingest.errors.UndecodableBatch` if an :class:`Undecoded` item's
        bytes could not be decoded (nothing of the submission is stored).
        ``record_keys`` are idempotency keys committed with the batches but not
        checked first: a connector that gathers many messages into one
        submission (MQTT) records each message's key, so that a later resend
        of one of them, submitted alone under its ``key``, is recognised.
        """
        ...

    async def submit_many(
        self, items: Sequence[tuple[Sequence[Batch | Undecoded], bytes | None]], *, wait: bool = True
    ) -> list[Receipt | IngestError]:
        """Submit each ``(batches, key)`` of ``items`` as :meth:`submit` would, at once; resolve once all
        of them are done, with each one's :class:`Receipt` or the error :meth:`submit` would have raised
        for it (:class:`ingest.errors.CommitFailed`, :class:`ingest.errors.UndecodableBatch`), in order.

        Each item stands alone (one failing fails alone), but they cost the
        sink one call: a connection that read many small messages together
        (many slow sensors, one chunk each) hands them over together.
        :class:`ingest.errors.Backpressure` (``wait=False``) is raised for the
        whole call.
        """
        ...
