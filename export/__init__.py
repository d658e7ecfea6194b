"""Batch exports of streams to files: Parquet, Arrow IPC, CSV, zarr and netCDF; incremental, exactly-once jobs.

>>> from export import export
>>> export("sqlite:///windvane.db", "turbine1.scada", "scada.parquet", "parquet", start="2024-05-01")
>>> export(url, "turbine1.scada", "out/", "parquet", job="nightly")   # the rows committed since the last run

- :mod:`.run`: :func:`export` and :class:`ExportResult`.
- :mod:`.blocks`: the stream read from one snapshot, whole chunks at a time, as Arrow tables.
- :mod:`.formats`: the format registry, one writer module per format.
- :mod:`.files`: targets checked first, written under a temporary name, fsync-ed and renamed.
- :mod:`.jobs`: a job's state in the store: intent, file, done.
- :mod:`.times`: ``--start``/``--stop``.
- :mod:`.errors`: one exception class per failure a user can fix.
"""

from __future__ import annotations

from .errors import (
    BadSnapshot,
    BadTime,
    ExportError,
    JobBusy,
    JobMismatch,
    StoreUnavailable,
    StreamShrank,
    TargetExists,
    TargetUnwritable,
    UnknownFormat,
    UnknownStream,
)
from .formats import FORMATS, format_named
from .jobs import Job, read_job
from .run import ExportResult, export, part_name

__all__ = [
    "FORMATS",
    "BadSnapshot",
    "BadTime",
    "ExportError",
    "ExportResult",
    "Job",
    "JobBusy",
    "JobMismatch",
    "StoreUnavailable",
    "StreamShrank",
    "TargetExists",
    "TargetUnwritable",
    "UnknownFormat",
    "UnknownStream",
    "export",
    "format_named",
    "part_name",
    "read_job",
]
