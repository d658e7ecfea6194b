"""Incremental export jobs: what a job exported, kept in the store, changed in small transactions of its own.

A job's state is one record, ``_windvane/export/jobs/<name>`` (msgpack),
beside the streams, as :mod:`ingest.imports` keeps import positions. It
names what the job exports (stream, format, target directory, time range)
and how far: every row before ``exported`` is in a part file, and
``pending`` is the run in progress, if any (its row range and file name).

A run goes: :func:`begin` records the intent (range and file) in one
transaction, the caller writes the file atomically, then :func:`finish`
records it done in another. A run killed in between leaves ``pending``
set; the next run writes that same range into that same file name again
(the rows of a range never change: streams only grow), then goes on. So
every row lands in exactly one part file.

Each change re-reads the record holding neostore's commit lock and checks
it is what the run started from: two runs of one job at once make the
later one fail with :class:`JobBusy`, never export rows twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import msgpack

from windvane import arrays, neostore

from .errors import JobBusy, JobMismatch

PREFIX = "_windvane/export/jobs/"
RECORD_VERSION = 1


@dataclass(frozen=True)
class Pending:
    """A run recorded as started and not yet as done: stream rows ``[start, stop)`` go to ``file``."""

    start: int
    stop: int
    file: str  # the part file's name, in the job's directory


@dataclass(frozen=True)
class Job:
    """What job ``name`` exports and how far it got."""

    name: str
    stream: str
    quarantine: bool
    format: str
    target: str  # the absolute path of the directory its part files go to
    start: int | None  # the time range (ns) it exports, None: unbounded
    stop: int | None
    exported: int = 0  # every stream row before this one is exported
    pending: Pending | None = None
    runs: int = 0  # runs that finished a part
    rows: int = 0  # rows written into part files, over all runs
    files: int = 0  # part files written, over all runs
    updated: float = 0.0  # Unix time of the last change

    def identity(self) -> dict[str, Any]:
        """What must stay the same from run to run of the job."""
        return {
            "stream": self.stream,
            "quarantine": self.quarantine,
            "format": self.format,
            "target": self.target,
            "start": self.start,
            "stop": self.stop,
        }


def job_key(name: str) -> str:
    """The key of job ``name``'s record."""
    return PREFIX + name


def check_name(name: str) -> str:
    """``name`` if it can name a job, else :class:`JobMismatch` saying why."""
    if not isinstance(name, str) or not name or "/" in name or not name.isprintable():
        raise JobMismatch(f"a job name is non-empty printable text without '/', not {name!r}")
    return name


def _encode(job: Job) -> bytes:
    doc = asdict(job)
    doc["version"] = RECORD_VERSION
    packed: bytes = msgpack.packb(doc, use_bin_type=True)
    return packed


def _decode(raw: bytes | None) -> Job | None:
    if raw is None:
        return None
    doc = msgpack.unpackb(raw, raw=False)
    doc.pop("version", None)
    pending = doc.pop("pending", None)
    return Job(**doc, pending=Pending(**pending) if pending else None)


def read_job(store: neostore.Store, name: str) -> Job | None:
    """Job ``name`` as last committed, or None if it never ran."""
    return _decode(arrays.Snapshot(store).get(job_key(name)))


def check_same(job: Job, wanted: Job) -> None:
    """:class:`JobMismatch` naming what differs if ``wanted`` (this run's settings) is not ``job``'s."""
    have, want = job.identity(), wanted.identity()
    differ = [f"{k} {have[k]!r} (this run: {want[k]!r})" for k in have if have[k] != want[k]]
    if differ:
        raise JobMismatch(
            f"job {job.name!r} was run with {', '.join(differ)}; a job always exports one stream "
            "in one format to one directory: run it as before, or name a new --job"
        )


def _change(store: neostore.Store, name: str, change: Callable[[Job | None], Job], message: str) -> Job:
    """Commit ``change(current record)`` as job ``name``'s record, reading it under the commit lock."""
    tx = arrays.Transaction(store, message=message, user="windvane-export", metadata={"job": name})
    try:
        tx.lock()
        new = replace(change(_decode(tx.get(job_key(name)))), updated=time.time())
        tx.set(job_key(name), _encode(new))
        tx.commit()
    except BaseException:
        if tx.state == "open":
            tx.abort()
        raise
    return new


def _busy(name: str) -> JobBusy:
    return JobBusy(
        f"job {name!r} was changed by another run while this one went on: run one export of a job at "
        "a time (this run stopped; what it wrote is consistent, run it again)"
    )


def create(store: neostore.Store, job: Job) -> Job:
    """Record new job ``job`` (nothing exported yet); :class:`JobBusy` if another run created it meanwhile."""

    def change(current: Job | None) -> Job:
        if current is not None:
            raise _busy(job.name)
        return job

    return _change(store, job.name, change, f"export job {job.name}: created")


def begin(store: neostore.Store, job: Job, pending: Pending) -> Job:
    """Record that ``pending`` is being written; :class:`JobBusy` if the record is no longer ``job``."""

    def change(current: Job | None) -> Job:
        if current is None or (current.exported, current.pending) != (job.exported, job.pending):
            raise _busy(job.name)
        return replace(current, pending=pending)

    return _change(store, job.name, change, f"export job {job.name}: writing rows {pending.start}-{pending.stop}")


def finish(store: neostore.Store, name: str, pending: Pending, *, rows: int, files: int) -> Job:
    """Record ``pending`` as written (``rows`` rows in ``files`` files: 0 if no row was in the time range)."""

    def change(current: Job | None) -> Job:
        if current is None or current.pending != pending:
            raise _busy(name)
        return replace(
            current,
            exported=pending.stop,
            pending=None,
            runs=current.runs + 1,
            rows=current.rows + rows,
            files=current.files + files,
        )

    return _change(store, name, change, f"export job {name}: wrote rows {pending.start}-{pending.stop}")
