"""Decoding and validation of submissions, in worker processes so that they do not hold the main process's GIL.

The main process of ``windvane serve`` runs the event loop (the
connectors) and the commit thread; both are Python, so they share one
core. A connector that submits :class:`~ingest.batch.Undecoded` bytes lets
this module decode them (the connector's own function, by reference) and
validate them (:func:`ingest.columns.to_columns`) in a
:class:`concurrent.futures.ProcessPoolExecutor`: what comes back is
columns (numpy arrays and lists of str, which pickle in C) and the
rejected records with their arrival bytes, ready for the committer to
merge and write.

A worker that dies (killed, out of memory) breaks the pool: the
submissions it held fail, and :class:`Preparer` starts a new pool for the
next ones.
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import arrays

from .batch import Batch, Undecoded
from .columns import Columns, Rejected, to_columns, unrouted
from .record_types import record_type_for
from .errors import UndecodableBatch
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
    columns, rejected = to_columns(schema, batch)
    return Validated(batch.tag, batch.size, columns, rejected)


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
    out: list[list[Validated]] = []
    for item in items:
        extra = {"record_type": record_type_for(schemas, item.tag) if valid_tag(item.tag) else None} if item.typed else {}
        try:
            batches = item.decode(item.payload, *item.args, **extra)
        except Exception as exc:  # noqa: BLE001 - the connector's own errors, whatever their class
            return UndecodableBatch(str(exc) or type(exc).__name__, _carried(exc))
        out.append([validate(schemas, batch) for batch in batches])
    return out


# -- the worker side ----------------------------------------------------------------------

_schemas: SchemaSet | None = None  # a worker's copy, sent once by the initializer


def _init_worker(schemas: SchemaSet, parent: int) -> None:
    global _schemas
    _schemas = schemas
    # Ctrl-C reaches the whole process group: the main process shuts the pool down itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(parent,), name="windvane-parent-watch", daemon=True).start()


def _exit_with(parent: int) -> None:
    """Exit once the main process is gone (killed -9, it cannot shut the pool down; workers would linger)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _prepare_in_worker(items: Sequence[Undecoded]) -> list[list[Validated]] | UndecodableBatch:
    assert _schemas is not None, "the worker was started without its schemas"
    return prepare(_schemas, items)


def _ready() -> bool:
    return _schemas is not None


# -- the main process side --------------------------------------------------------------------


class Preparer:
    """A pool of ``workers`` processes preparing :class:`Undecoded` submissions; see the module docstring.

    Thread-safe: the event loop dispatches, the commit thread collects.
    """

    def __init__(self, schemas: SchemaSet, workers: int):
        if workers < 1:
            raise ValueError(f"a Preparer needs at least 1 worker, not {workers}")
        self.schemas = schemas
        self.workers = workers
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._closed = False

    def _new_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        # spawn: a fork of a process running an event loop, threads and database connections is unsafe.
        return concurrent.futures.ProcessPoolExecutor(
            self.workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker, initargs=(self.schemas, os.getpid()))

    def start(self) -> None:
        """Start the workers and wait until they are ready, so the first submission does not wait for them."""
        with self._lock:
            if self._pool is None:
                self._pool = self._new_pool()
            pool = self._pool
        for future in [pool.submit(_ready) for _ in range(self.workers)]:
            future.result()

    def submit(self, items: Sequence[Undecoded]) -> concurrent.futures.Future:
        """Start preparing one submission's items; the future gives :func:`prepare`'s result."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the decode workers are shut down")
            if self._pool is None:
                self._pool = self._new_pool()
            try:
                return self._pool.submit(_prepare_in_worker, list(items))
            except BrokenProcessPool:
                self._replace(self._pool)
                return self._pool.submit(_prepare_in_worker, list(items))

    def broken(self) -> None:
        """A worker died: replace the pool (idempotent for each broken pool)."""
        with self._lock:
            if self._pool is not None and not self._closed:
                self._replace(self._pool)

    def _replace(self, pool: concurrent.futures.ProcessPoolExecutor) -> None:
        # Only a pool that is really broken is replaced: several failed futures report the same crash.
        if pool is self._pool and getattr(pool, "_broken", False):
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
