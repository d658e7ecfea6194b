"""The errors of the arrays layer, each naming what the user can do about it."""

from __future__ import annotations


class ArrayError(Exception):
    """Base class of every arrays error."""


class ArrayNotFoundError(ArrayError, KeyError):
    """No array of that name exists (in that snapshot)."""

    def __init__(self, name: str, where: str = ""):
        self.name = name
        super().__init__(f"no array named {name!r}{' ' + where if where else ''}; create it with arrays.create")

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class ArrayExistsError(ArrayError):
    """``create`` found an array (or another node) already at that name."""


class ReadOnlyArrayError(ArrayError):
    """A write through a snapshot: open the array without ``at=`` to write."""


class UnsupportedArrayError(ArrayError):
    """The array's metadata uses a feature (codec, grid, encoding) BigArray does not read."""


class SnapshotError(ArrayError):
    """``at=`` names a time or tid the store cannot read (before the pack horizon, or malformed)."""


class TimeError(ArrayError, ValueError):
    """A moment (``at=``, a time range's ``start``/``stop``) given as text or a datetime that is not a time."""


class StreamError(ArrayError):
    """Base class of the errors of streams (:mod:`arrays.stream`)."""


class StreamNotFoundError(StreamError, KeyError):
    """No stream of that tag exists (in that snapshot)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class StreamExistsError(StreamError, ArrayExistsError):
    """``create_stream`` found a stream (or anything else) already at that path."""


class InvalidTagError(StreamError, ValueError):
    """A stream tag (or column name) that cannot name a zarr node."""


class ColumnError(StreamError, ValueError):
    """An append or schema change that does not match the stream's columns: missing, unknown, wrong length or shape."""
