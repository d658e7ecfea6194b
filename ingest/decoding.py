"""The decode pool: where submissions of :class:`~ingest.batch.Undecoded` bytes are decoded and validated.

With ``workers`` > 0, large submissions are prepared in worker processes
(:mod:`ingest.prepare`) as soon as they are submitted, so that work
overlaps with the commit of the group before and leaves the main process's
GIL to the event loop and the committer. Small ones (see
:attr:`DecodePool.INLINE_PREPARE_BYTES`), and all of them without workers,
are prepared by the committer thread, a group's together.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool

from .errors import CommitFailed, UndecodableBatch
from .observer import CommitObserver
from .prepare import Outcome, Preparer, Raised, Validated, prepare_each
from .retries import salvage_reason
from .schema import SchemaSet
from .submission import Submission


class DecodePool:
    """Prepares submissions' Undecoded items, in ``workers`` processes (none: all in the caller's thread).

    :meth:`prepare_ahead` runs on the submitters' event loop, :meth:`collect`
    in the committer thread; failed submissions are answered through ``fail``
    (``fail(group, error)``). ``trim_after``: see :class:`ingest.prepare.Preparer`.
    """

    #: Undecoded submissions smaller than this are prepared by the committer thread, not a worker: a
    #: round trip to a worker process costs more than decoding a few events (many slow sensors send
    #: one event per chunk), and the committer validates a group's small ones together.
    INLINE_PREPARE_BYTES = 32 * 1024
    #: ... unless one call submits at least this many, this many bytes between them: they then go to a
    #: worker together, in one round trip. (Sensors' one-event chunks, thousands a second, stay here:
    #: through the workers, their round trips and results held the main process's GIL longer than
    #: validating them together takes.)
    BATCH_PREPARE_MIN = 8

    def __init__(
        self,
        schemas: SchemaSet,
        workers: int,
        observer: CommitObserver,
        fail: Callable[[list[Submission], Exception], None],
        trim_after: float | None = None,
    ):
        self.schemas = schemas
        self.preparer = Preparer(schemas, workers, trim_after) if workers > 0 else None
        self._observer = observer
        self._fail = fail

    def start(self) -> None:
        if self.preparer is not None:
            self.preparer.start()

    def let_go_of_the_last(self) -> None:
        """See :meth:`ingest.prepare.Preparer.let_go_of_the_last` (nothing to do without workers); blocks."""
        if self.preparer is not None:
            self.preparer.let_go_of_the_last()

    @property
    def given_back(self) -> int:
        """Times a worker gave the memory a burst took back to the system (``trim_after``)."""
        return 0 if self.preparer is None else self.preparer.given_back

    def close(self) -> None:
        if self.preparer is not None:
            self.preparer.close()

    def prepare_ahead(self, item: Submission) -> CommitFailed | None:
        """Start preparing ``item`` in a worker if it is large; the error if the workers are unavailable."""
        undecoded = item.undecoded()
        if (
            undecoded
            and self.preparer is not None
            and sum(len(b.payload) for b in undecoded) >= self.INLINE_PREPARE_BYTES
        ):
            try:
                item.prepared = self.preparer.submit(undecoded)  # starts now: overlaps the commit running
            except (RuntimeError, BrokenProcessPool) as exc:
                return CommitFailed(f"the decode workers are unavailable ({exc}); nothing was stored")
        return None

    def prepare_small_ahead(self, items: list[Submission]) -> None:
        """Send the small ones of ``items`` (submitted in one call) to a worker together, if there are
        enough of them (:attr:`BATCH_PREPARE_MIN`, :attr:`INLINE_PREPARE_BYTES` between them)."""
        if self.preparer is None:
            return
        small = [(item, undecoded) for item in items if item.prepared is None and (undecoded := item.undecoded())]
        if (
            len(small) >= self.BATCH_PREPARE_MIN
            and sum(len(b.payload) for _, undecoded in small for b in undecoded) >= self.INLINE_PREPARE_BYTES
        ):
            try:
                shares = self.preparer.submit_each([undecoded for _, undecoded in small])
            except (RuntimeError, BrokenProcessPool):
                return  # prepared in the commit thread, as if they were few
            for (item, _), prepared in zip(small, shares):
                item.prepared = prepared

    def collect(self, group: list[Submission]) -> list[Submission]:
        """The submissions of ``group`` whose Undecoded items are prepared; the others are failed here."""
        out = []
        undecoded = {id(item): item.undecoded() for item in group}
        # Those left to this thread (small, or no workers) are prepared together (see validate_many).
        inline = [item for item in group if item.prepared is None and undecoded[id(item)]]
        here = dict(zip(map(id, inline), prepare_each(self.schemas, [undecoded[id(item)] for item in inline])))
        for item in group:
            if not undecoded[id(item)]:
                out.append(item)
                continue
            error = self._result(item, here.get(id(item)))
            if error is None:
                out.append(item)
            else:
                self._fail([item], error)
        return out

    def _result(self, item: Submission, here: Outcome | None) -> Exception | None:
        """Take ``item``'s preparation (``here``: made in this thread, or None); the error that fails it."""
        try:
            result = _taken(item, here)
        except BrokenProcessPool as exc:
            assert self.preparer is not None
            assert item.prepared is not None, "only a worker's preparation raises BrokenProcessPool"
            self.preparer.broken(item.prepared)
            return CommitFailed(
                f"a decode worker died while preparing this submission ({exc}); nothing of it was stored: send it again"
            )
        except concurrent.futures.CancelledError as exc:  # a pool replacement cancelled it
            return CommitFailed(f"preparing this submission was cancelled ({exc!r}); nothing of it was stored")
        except Exception as exc:  # noqa: BLE001 - a bug in decoding or validating: its records are kept
            self._observer.internal_error("preparing", exc)
            item.salvage = salvage_reason(exc)
            return None
        if isinstance(result, UndecodableBatch):
            return result
        item.validated = result
        return None


def _taken(item: Submission, here: Outcome | None) -> list[list[Validated]] | UndecodableBatch:
    """``item``'s preparation, ``here`` if it was made in this thread; raising what preparing it raised."""
    result = here if item.prepared is None else item.prepared.result()
    assert result is not None, "a submission no worker prepares is prepared in the committer's thread"
    if isinstance(result, Raised):
        raise result.error
    return result
