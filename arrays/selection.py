"""Basic indexing over a regular chunk grid: which chunks a selection touches, and where each piece goes.

Only numpy's basic indexing is supported (integers, slices with any step,
``...``); anything else raises a TypeError that says what to do instead.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class AxisSelection:
    """The elements one axis selects: ``start, start+step, ...`` (``count`` of them, step > 0).

    ``reverse``: the index had a negative step, so the result runs the other
    way. ``drop``: an integer index, so the axis leaves the result.
    """

    start: int
    count: int
    step: int = 1
    reverse: bool = False
    drop: bool = False


def _fancy_error(item: Any) -> TypeError:
    return TypeError(
        f"BigArray supports basic indexing only (integers, slices, ...), not {type(item).__name__}: "
        "read a slice, then index the numpy array it returns"
    )


def normalize(key: Any, shape: tuple[int, ...]) -> tuple[AxisSelection, ...]:
    """One :class:`AxisSelection` per axis of ``shape`` for the index ``key``."""
    items = key if isinstance(key, tuple) else (key,)
    for item in items:
        if item is None:
            raise TypeError("BigArray does not support np.newaxis; index the numpy array it returns")
        if not (item is Ellipsis or isinstance(item, slice)):
            if isinstance(item, (bool,)) or getattr(item, "dtype", None) == np.dtype(bool):
                raise _fancy_error(item)
            try:
                operator.index(item)
            except TypeError:
                raise _fancy_error(item) from None
    ellipses = sum(1 for item in items if item is Ellipsis)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    explicit = len(items) - ellipses
    if explicit > len(shape):
        raise IndexError(f"too many indices: the array is {len(shape)}-dimensional, but {explicit} were indexed")
    if ellipses:
        at = next(i for i, item in enumerate(items) if item is Ellipsis)
        fill = (slice(None),) * (len(shape) - explicit)
        items = items[:at] + fill + items[at + 1 :]
    else:
        items = items + (slice(None),) * (len(shape) - explicit)
    return tuple(_axis(item, n, axis) for axis, (item, n) in enumerate(zip(items, shape)))


def _axis(item: Any, n: int, axis: int) -> AxisSelection:
    if isinstance(item, slice):
        start, stop, step = item.indices(n)
        count = len(range(start, stop, step))
        if step > 0 or count == 0:
            return AxisSelection(start if count else 0, count, max(step, 1))
        return AxisSelection(start + (count - 1) * step, count, -step, reverse=True)
    index = operator.index(item)
    if index < 0:
        index += n
    if not 0 <= index < n:
        raise IndexError(f"index {operator.index(item)} is out of bounds for axis {axis} with size {n}")
    return AxisSelection(index, 1, drop=True)


def result_shape(selection: tuple[AxisSelection, ...]) -> tuple[int, ...]:
    """The shape of what the selection reads (integer-indexed axes dropped)."""
    return tuple(s.count for s in selection if not s.drop)


def _axis_pieces(sel: AxisSelection, chunk: int) -> list[tuple[int, slice, slice]]:
    """``(chunk index, slice within the chunk, slice within the selection)`` for one axis."""
    if sel.count == 0:
        return []
    lo, step, count = sel.start, sel.step, sel.count
    if step >= chunk:  # every element in a chunk of its own
        elements = range(lo, lo + count * step, step)
        return [(e // chunk, slice(e % chunk, e % chunk + 1), slice(k, k + 1)) for k, e in enumerate(elements)]
    pieces = []
    last = lo + (count - 1) * step
    for c in range(lo // chunk, last // chunk + 1):
        base = c * chunk
        first_k = max(0, -(-(base - lo) // step))
        last_k = min(count - 1, (base + chunk - 1 - lo) // step)
        if first_k > last_k:
            continue
        pieces.append(
            (c, slice(lo + first_k * step - base, lo + last_k * step - base + 1, step), slice(first_k, last_k + 1))
        )
    return pieces


@dataclass(frozen=True)
class Piece:
    """The part of one chunk a selection touches."""

    coords: tuple[int, ...]
    in_chunk: tuple[slice, ...]  # where in the chunk
    in_result: tuple[slice, ...]  # where in the selection (all axes kept, in ascending order)


def pieces(selection: tuple[AxisSelection, ...], chunks: tuple[int, ...]) -> Iterator[Piece]:
    """Every chunk the selection touches, in C order of chunk coordinates."""
    per_axis = [_axis_pieces(sel, c) for sel, c in zip(selection, chunks)]
    for combo in itertools.product(*per_axis):
        yield Piece(tuple(p[0] for p in combo), tuple(p[1] for p in combo), tuple(p[2] for p in combo))


def covers_chunk(piece: Piece, chunks: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether the piece writes every element of its chunk that lies inside ``shape``."""
    for c, sl, size, n in zip(piece.coords, piece.in_chunk, chunks, shape):
        extent = min(size, n - c * size)
        if sl.start != 0 or sl.stop < extent or (sl.step not in (None, 1) and extent > 1):
            return False
    return True


def orient(full: np.ndarray, selection: tuple[AxisSelection, ...]) -> np.ndarray:
    """View ``full`` (the selection in ascending order, every axis kept) as the user asked for it."""
    flips = tuple(slice(None, None, -1) if s.reverse else slice(None) for s in selection)
    if any(s.reverse for s in selection):
        full = full[flips]
    drops = tuple(0 if s.drop else slice(None) for s in selection)
    oriented: np.ndarray = full[drops]
    return oriented


def unorient(value: Any, selection: tuple[AxisSelection, ...]) -> Any:
    """The inverse of :func:`orient` for a value of the result's shape: every axis kept, ascending."""
    expand = tuple(None if s.drop else slice(None) for s in selection)
    value = value[expand]
    if any(s.reverse for s in selection):
        value = value[tuple(slice(None, None, -1) if s.reverse else slice(None) for s in selection)]
    return value
