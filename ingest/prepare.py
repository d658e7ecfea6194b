"""Decoding and validation of submissions, in worker processes so that they do not hold the main process's GIL.

The main process of ``windvane serve`` runs the event loop (the
connectors) and the commit thread; both are Python, so they share one
core. A connector that submits :class:`~ingest.batch.Undecoded` bytes lets
this module decode them (the connector's own function, by reference) and
validate them (:func:`ingest.columns.batch_columns`) in a
:class:`concurrent.futures.ProcessPoolExecutor`: what comes back is
columns (numpy arrays and lists of str, which pickle in C) and the
rejected records with their arrival bytes, ready for the committer to
merge and write. The committer runs the same functions itself on small
submissions (:func:`prepare_each`), where a round trip to a worker would
cost more than the work.

A worker that dies (killed, out of memory) breaks the pool: the
submissions it held fail, and :class:`Preparer` starts a new pool for the
next ones.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import itertools
import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import numpy as np

from windvane import arrays

from .batch import Batch, Undecoded
from .columns import Columns, Rejected, batch_columns, concat_columns, unrouted
from .errors import UndecodableBatch
from .memory import AfterBursts, arrow_buffers_from_malloc, tune_malloc
from .record_types import record_type_for
from .schema import SchemaSet

log = logging.getLogger("windvane.ingest")

#: The tag quarantining records whose own tag cannot name a stream. A valid stream name
#: (arrays takes it), but no real tag's: :func:`tag_problem` refuses it, so a sender's
#: records never join these (``@`` starts fluentd's labels, not its tags).
INVALID_TAG = "@invalid_tag"


@dataclass(slots=True)
class Validated:
    """One batch, validated: the rows that fit (None if none) and the records rejected."""

    tag: str  # the batch's tag (rejected records go to INVALID_TAG's quarantine if it cannot name a stream)
    size: int
    columns: Columns | None
    rejected: list[Rejected]


def tag_problem(tag: str) -> str | None:
    """Why ``tag`` cannot name a stream, or None if it can."""
    if tag == INVALID_TAG:
        return f"tag {tag!r} is reserved for the quarantine of tags that cannot name a stream"
    try:
        arrays.stream_path(tag)
    except (ValueError, TypeError) as exc:
        return f"{exc}: it cannot name a stream"
    return None


def valid_tag(tag: str) -> bool:
    """Whether ``tag`` can name a stream."""
    return tag_problem(tag) is None


def validate(schemas: SchemaSet, batch: Batch) -> Validated:
    """``batch`` split by its tag's schema into what fits and what is quarantined."""
    problem = tag_problem(batch.tag)
    if problem is not None:
        return Validated(batch.tag, batch.size, None, unrouted(batch, problem))
    schema = schemas.for_tag(batch.tag)
    if schema is None:
        rejected = unrouted(batch, f"no schema matches tag {batch.tag!r}; add its pattern to a schema's 'tags'")
        return Validated(batch.tag, batch.size, None, rejected)
    columns, rejected = batch_columns(schema, batch)
    return Validated(batch.tag, batch.size, columns, rejected)


def validate_many(schemas: SchemaSet, batches: Sequence[Batch]) -> list[Validated]:
    """:func:`validate` of each of ``batches``, those of a table schema validated together: a plant's
    thousands of one-event chunks cost a pass per schema, not one each.

    Each batch gets views of the joint columns. Where a record of a set is
    rejected, that set's batches are validated one by one instead, so that
    every rejection stays its own batch's, exactly as :func:`validate`.
    """
    out: dict[int, Validated] = {}  # index in ``batches`` -> its validation; each is set once
    sets: dict[tuple[Any, type | None], list[int]] = {}
    for i, batch in enumerate(batches):
        schema = schemas.for_tag(batch.tag)
        if (
            schema is None
            or schema.holds_blocks
            or not len(batch)
            or batch.faults
            or tag_problem(batch.tag) is not None
        ):
            out[i] = validate(schemas, batch)
        else:
            # Typed batches join others of their record class only: struct records, or maps with bin names.
            sets.setdefault((schema, type(batch.records[0]) if batch.typed else None), []).append(i)
    for (schema, kind), members in sets.items():
        if len(members) > 1:
            joined = Batch(
                "",
                list(itertools.chain.from_iterable(batches[i].times for i in members)),
                list(itertools.chain.from_iterable(batches[i].records for i in members)),
                typed=kind is not None,
            )
            columns, rejected = batch_columns(schema, joined)
            if columns is not None and not rejected:
                start = 0
                for i in members:
                    batch, stop = batches[i], start + len(batches[i])
                    part = Columns(len(batch), {name: values[start:stop] for name, values in columns.columns.items()})
                    out[i] = Validated(batch.tag, batch.size, part, [])
                    start = stop
                continue
        for i in members:
            out[i] = validate(schemas, batches[i])
    return [out[i] for i in range(len(batches))]


def _carried(exc: BaseException) -> BaseException | None:
    """``exc`` if it survives a pickle round trip (it must cross processes), else None."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any failure means: send the message only
        return None
    return exc


def prepare(schemas: SchemaSet, items: Sequence[Undecoded]) -> list[list[Validated]] | UndecodableBatch:
    """Decode and validate ``items`` (one submission's), a list per item; the decode error of the first that fails instead.

    The decode error is returned, not raised, so that what crosses back is
    always an :class:`UndecodableBatch` (the connector's exception inside
    when it pickles); an error while validating is a bug and is raised.
    """
    decoded = _decode(schemas, items)
    if isinstance(decoded, UndecodableBatch):
        return decoded
    return _validated(schemas, [decoded])[0]


def _decode(schemas: SchemaSet, items: Sequence[Undecoded]) -> list[list[Batch]] | UndecodableBatch:
    """The batches of each of ``items``; the decode error of the first that fails instead."""
    out: list[list[Batch]] = []
    for item in items:
        extra = (
            {"record_type": record_type_for(schemas, item.tag) if valid_tag(item.tag) else None} if item.typed else {}
        )
        try:
            out.append(list(item.decode(item.payload, *item.args, **extra)))
        except Exception as exc:  # noqa: BLE001 - the connector's own errors, whatever their class
            return UndecodableBatch(str(exc) or type(exc).__name__, _carried(exc))
    return out


def _validated(schemas: SchemaSet, submissions: list[list[list[Batch]]]) -> list[list[list[Validated]]]:
    """:func:`validate_many` over the batches of every item of every submission, given back in their shape."""
    results = iter(validate_many(schemas, [b for items in submissions for batches in items for b in batches]))
    return [[[next(results) for _ in batches] for batches in items] for items in submissions]


# -- the worker side ----------------------------------------------------------------------

_schemas: SchemaSet | None = None  # a worker's copy, sent once by the initializer
_after_bursts: AfterBursts | None = None  # gives a worker's memory back after a burst (None: never)


def _init_worker(schemas: SchemaSet, parent: int, trim_after: float | None, given_back: Any) -> None:
    global _schemas, _after_bursts
    # A worker takes in chunks of a MiB and more and makes their copies: with glibc's own thresholds each
    # is fresh pages from the system, faulted in and given back, as in the serving process.
    tune_malloc()
    arrow_buffers_from_malloc()
    _schemas = schemas
    if trim_after is not None:
        _after_bursts = AfterBursts(trim_after, given_back)
    # Ctrl-C reaches the whole process group: the main process shuts the pool down itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(parent,), name="windvane-parent-watch", daemon=True).start()


@contextlib.contextmanager
def _task(submissions: Sequence[Sequence[Undecoded]]) -> Iterator[SchemaSet]:
    """A worker's task on ``submissions``: the schemas to prepare them with; the task's bytes count towards
    the burst after which its memory is given back.

    The task runs without the cycle collector: a chunk decodes as thousands
    of containers (a map per record where names are msgpack bin) that form
    no cycle, and each collection they set off would walk every object the
    worker holds. They are freed as the task ends; the collector runs
    between tasks.
    """
    assert _schemas is not None, "the worker was started without its schemas"
    gc.disable()
    if _after_bursts is not None:
        _after_bursts.begin(sum(len(item.payload) for items in submissions for item in items))
    try:
        yield _schemas
    finally:
        if _after_bursts is not None:
            _after_bursts.end()
        gc.enable()


def _exit_with(parent: int) -> None:
    """Exit once the main process is gone (killed -9, it cannot shut the pool down; workers would linger)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _prepare_in_worker(items: Sequence[Undecoded]) -> list[list[Validated]] | UndecodableBatch:
    with _task([items]) as schemas:
        return prepare(schemas, items)


def _prepare_each_in_worker(submissions: Sequence[Sequence[Undecoded]]) -> _Batch:
    """:func:`prepare` of each submission, packed (see :class:`_Batch`); a bug while validating one is
    that one's result (its own failure, not its neighbours'), as the exception if it pickles, else as a
    RuntimeError naming it."""
    with _task(submissions) as schemas:
        return _Batch.pack(
            [
                Raised(_carried(r.error) or RuntimeError(f"{type(r.error).__name__}: {r.error}"))
                if isinstance(r, Raised)
                else r
                for r in prepare_each(schemas, submissions)
            ]
        )


def prepare_each(schemas: SchemaSet, submissions: Sequence[Sequence[Undecoded]]) -> list[Outcome]:
    """:func:`prepare` of each submission, all validated together (see :func:`validate_many`); what
    preparing one raised (a bug in validating) is that one's result alone, as a :class:`Raised`."""
    decoded = [_decode(schemas, items) for items in submissions]
    ok = {i: d for i, d in enumerate(decoded) if not isinstance(d, UndecodableBatch)}
    results: list[Outcome] = [d if isinstance(d, UndecodableBatch) else [] for d in decoded]  # ok's set below
    try:
        for i, validated in zip(ok, _validated(schemas, list(ok.values()))):
            results[i] = validated
    except Exception:  # noqa: BLE001 - found again one by one, each its own failure
        for i, batches in ok.items():
            try:
                results[i] = _validated(schemas, [batches])[0]
            except Exception as exc:  # noqa: BLE001 - reported to that submission alone
                results[i] = Raised(exc)
    return results


@dataclass(slots=True)
class Raised:
    """What preparing one submission of many raised (see :func:`prepare_each`)."""

    error: BaseException


#: What preparing one submission gives: its validated batches (per item), why its bytes do not decode, or
#: what a bug while validating it raised.
Outcome: TypeAlias = "list[list[Validated]] | UndecodableBatch | Raised"

#: A table's layout: each column's name and its dtype and inner shape (a list's: its class name).
_Layout: TypeAlias = "tuple[tuple[str, tuple[str, tuple[int, ...]] | str], ...]"

_T = TypeVar("_T")


@dataclass(slots=True)
class _Rows:
    """Where a batch's table holds the rows of one Validated: ``table``'s rows ``[start, stop)``."""

    table: int
    start: int
    stop: int


def _layout(columns: Columns) -> _Layout:
    return tuple(
        (name, (v.dtype.str, v.shape[1:]) if isinstance(v, np.ndarray) else type(v).__name__)
        for name, v in columns.columns.items()
    )


@dataclass(slots=True)
class _Batch:
    """Many submissions prepared in one worker call, as they cross back to the main process.

    Their columns are concatenated into one table per layout (names and
    types), and each Validated crosses without its columns, ``rows`` saying
    where they are (:class:`_Rows`): unpickling a few long arrays costs far
    less than thousands of one-row ones, and :meth:`result` gives each
    submission views of them.
    """

    tables: list[dict[str, Any]]
    results: list[Outcome]
    rows: list[list[_Rows | None]]  # of each result, of each of its Validated in order (None: no columns)

    @classmethod
    def pack(cls, results: list[Outcome]) -> _Batch:
        parts: dict[_Layout, list[Columns]] = {}
        places: list[list[tuple[_Layout, int] | None]] = []
        for result in results:
            here: list[tuple[_Layout, int] | None] = []
            places.append(here)
            if not isinstance(result, list):
                continue
            for validated in (v for batches in result for v in batches):
                if validated.columns is None:
                    here.append(None)
                    continue
                layout = _layout(validated.columns)
                here.append((layout, len(parts.setdefault(layout, []))))
                parts[layout].append(validated.columns)
                validated.columns = None  # it crosses in its table
        tables: list[dict[str, Any]] = []
        starts: dict[_Layout, list[int]] = {}
        for layout, columns in parts.items():
            starts[layout] = list(itertools.accumulate((c.rows for c in columns), initial=0))
            tables.append(concat_columns([c.columns for c in columns]))
        index = {layout: i for i, layout in enumerate(parts)}
        rows = [
            [None if p is None else _Rows(index[p[0]], starts[p[0]][p[1]], starts[p[0]][p[1] + 1]) for p in here]
            for here in places
        ]
        return cls(tables, results, rows)

    def result(self, i: int) -> list[list[Validated]] | UndecodableBatch:
        """What :func:`prepare` gave submission ``i`` (raising what preparing it raised)."""
        result = self.results[i]
        if isinstance(result, Raised):
            raise result.error
        if isinstance(result, list):
            for validated, rows in zip((v for batches in result for v in batches), self.rows[i]):
                if rows is not None:
                    table = self.tables[rows.table]
                    validated.columns = Columns(
                        rows.stop - rows.start, {name: values[rows.start : rows.stop] for name, values in table.items()}
                    )
        return result


class Prepared:
    """One submission's preparation in a worker, alone or as its share of a batch: what the committer
    waits for (:meth:`done`, :meth:`wait`) and takes (:meth:`result`, raising what preparing it raised,
    or BrokenProcessPool / CancelledError if the worker died or the pool was replaced)."""

    __slots__ = ("future", "index", "pool")

    def __init__(
        self,
        pool: concurrent.futures.ProcessPoolExecutor,
        future: concurrent.futures.Future[list[list[Validated]] | UndecodableBatch] | concurrent.futures.Future[_Batch],
        index: int | None = None,
    ):
        self.pool = pool  # the one it runs in: a worker of it dying breaks that pool only
        self.future = future
        self.index = index  # None: the future is this submission's alone

    def done(self) -> bool:
        return self.future.done()

    def wait(self, timeout: float | None = None) -> None:
        waited: list[concurrent.futures.Future[Any]] = [self.future]  # either kind: wait takes one type
        concurrent.futures.wait(waited, timeout)

    def result(self) -> list[list[Validated]] | UndecodableBatch:
        result = self.future.result()
        if isinstance(result, _Batch):
            assert self.index is not None, "a share of a batch is made with its index"
            return result.result(self.index)
        return result


def _ready() -> bool:
    return _schemas is not None


# -- the main process side --------------------------------------------------------------------


class Preparer:
    """A pool of ``workers`` processes preparing :class:`Undecoded` submissions; see the module docstring.

    ``trim_after``: seconds a worker waits, idle after a burst, before it
    gives the memory the burst took back to the system
    (:class:`ingest.memory.AfterBursts`; None: never); :attr:`given_back`
    counts the times the workers did.

    Thread-safe: the event loop dispatches, the commit thread collects.
    """

    def __init__(self, schemas: SchemaSet, workers: int, trim_after: float | None = None):
        if workers < 1:
            raise ValueError(f"a Preparer needs at least 1 worker, not {workers}")
        self.schemas = schemas
        self.workers = workers
        self.trim_after = trim_after
        self._context = multiprocessing.get_context("spawn")
        self._given_back = self._context.Value("q", 0)  # shared by every pool's workers
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._closed = False

    def _new_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        # spawn: a fork of a process running an event loop, threads and database connections is unsafe.
        return concurrent.futures.ProcessPoolExecutor(
            self.workers,
            mp_context=self._context,
            initializer=_init_worker,
            initargs=(self.schemas, os.getpid(), self.trim_after, self._given_back),
        )

    @property
    def given_back(self) -> int:
        """Times a worker gave the memory a burst took back to the system."""
        return int(self._given_back.value)

    def start(self) -> None:
        """Start the workers, without waiting for them: each imports the decoders and loads the schemas while
        the service opens its listeners (a submission before they are ready waits in the pool's queue)."""
        with self._lock:
            if self._pool is None:
                self._pool = self._new_pool()
            pool = self._pool
        for _ in range(self.workers):
            pool.submit(_ready)  # one task each: the pool starts a process per task while none is idle

    def let_go_of_the_last(self, timeout: float = 10.0) -> None:
        """Pass a task of nothing through the workers and wait for it (at most ``timeout`` seconds): the
        pool's threads, which keep the last task they sent and the last result they received until the
        next, then keep that one instead of a burst's last submission and its columns."""
        with self._lock:
            pool = None if self._closed else self._pool
        if pool is not None:
            with contextlib.suppress(BrokenProcessPool, RuntimeError, concurrent.futures.TimeoutError):
                pool.submit(_ready).result(timeout)

    def submit(self, items: Sequence[Undecoded]) -> Prepared:
        """Start preparing one submission's items; :meth:`Prepared.result` gives :func:`prepare`'s result."""
        return Prepared(*self._submit(_prepare_in_worker, list(items)))

    def _submit(
        self, function: Callable[[Any], _T], argument: Any
    ) -> tuple[concurrent.futures.ProcessPoolExecutor, concurrent.futures.Future[_T]]:
        """``function(argument)`` started in the current pool (a new one if that one is broken): the pool, and
        the future of the call."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the decode workers are shut down")
            if self._pool is None:
                self._pool = self._new_pool()
            try:
                return self._pool, self._pool.submit(function, argument)
            except BrokenProcessPool:
                self._replace(self._pool)
                return self._pool, self._pool.submit(function, argument)

    def submit_each(self, submissions: Sequence[Sequence[Undecoded]]) -> list[Prepared]:
        """Start preparing many submissions' items in one round trip to a worker (for small submissions,
        whose own round trips would cost more than their decoding); each submission's share."""
        pool, batch = self._submit(_prepare_each_in_worker, [list(items) for items in submissions])
        return [Prepared(pool, batch, i) for i in range(len(submissions))]

    def broken(self, prepared: Prepared) -> None:
        """A worker died under ``prepared`` (its result raised BrokenProcessPool): replace its pool, unless
        that one is replaced already (several failed preparations report the same crash)."""
        with self._lock:
            if not self._closed:
                self._replace(prepared.pool)

    def _replace(self, pool: concurrent.futures.ProcessPoolExecutor) -> None:
        """Replace ``pool``, which is broken, if it is still the current one."""
        if pool is self._pool:
            log.error("a decode worker died; starting a new pool of %d", self.workers)
            pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._new_pool()

    def close(self) -> None:
        """Stop the workers (after what they hold is done)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=False)
