"""Exceptions of ``windvane export``, each naming the problem and what to do about it.

Every one is an :class:`ExportError`, the root of this package's errors;
the CLI prints the message and exits with code 2.
"""

from __future__ import annotations


class ExportError(Exception):
    """Base class of export errors."""


class StoreUnavailable(ExportError):
    """The store URL is malformed, names no store, or its server does not answer."""


class UnknownStream(ExportError):
    """The store has no stream of that tag; the message lists the ones it has."""


class UnknownFormat(ExportError):
    """The export format is not one of the registered formats."""


class BadTime(ExportError):
    """A --start/--stop TIME is neither ISO 8601 nor epoch seconds, or start >= stop."""


class BadSnapshot(ExportError):
    """An --at that is neither a tid nor a TIME, names a state a pack removed, or comes with --job."""


class TargetExists(ExportError):
    """The target file (or zarr directory) exists and --overwrite was not given."""


class TargetUnwritable(ExportError):
    """The target cannot be written: missing parent directory, no permission, a directory where a file goes."""


class JobMismatch(ExportError):
    """A job was run before with another stream, format, target or time range."""


class StreamShrank(ExportError):
    """The stream has fewer rows than a job already exported: it was replaced or cut since."""


class JobBusy(ExportError):
    """Another process changed the job's state while this run was going: two runs of one job at once."""
