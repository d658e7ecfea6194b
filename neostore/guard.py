"""Driver errors turned into neostore's: what a Store's and a Transaction's public methods raise.

A database driver's own exception (``sqlite3.Error``, ``mariadb.Error``)
escaping a public method becomes a :class:`~neostore.errors.DatabaseError`
(:class:`~neostore.errors.StorageUnavailableError` when the database is out
of reach) naming the operation and the store's location, with the driver's
error as its cause. neostore's own errors pass through unchanged.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, Protocol, TypeVar, cast

from . import errors
from .backends import Backend

F = TypeVar("F", bound=Callable[..., Any])


class HasBackend(Protocol):
    """What a guarded method's object offers: the backend its errors come from."""

    @property
    def guarded_backend(self) -> Backend: ...


def translate(backend: Backend, operation: str, exc: BaseException) -> errors.NeoStoreError | None:
    """The neostore error to raise for ``exc``, raised by ``operation``; None unless a driver raised it."""
    if isinstance(exc, errors.NeoStoreError) or not isinstance(exc, backend.driver_errors):
        return None
    cls = errors.StorageUnavailableError if backend.is_unavailable(exc) else errors.DatabaseError
    return cls(f"{operation} failed on {backend.location}: {type(exc).__name__}: {exc}")


def guarded(method: F) -> F:
    """``method`` raising neostore errors in place of its driver's (generators too, as they are consumed)."""
    operation = method.__qualname__

    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def generate(self: HasBackend, *args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from method(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001  # every error passes: a driver's translated, any other as it is
                _reraise(translate(self.guarded_backend, operation, exc), exc)

        return cast(F, generate)

    @functools.wraps(method)
    def call(self: HasBackend, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001  # every error passes: a driver's translated, any other as it is
            _reraise(translate(self.guarded_backend, operation, exc), exc)

    return cast(F, call)


def _reraise(error: errors.NeoStoreError | None, exc: Exception) -> NoReturn:
    """Raise ``error`` from ``exc``, or ``exc`` itself, keeping no reference to either in this frame.

    A local naming the exception would make a cycle (exception, traceback,
    frame, local): the frames of the failed call, their cursors included,
    would then wait for the cyclic garbage collector, which may run in any
    thread. A MariaDB cursor finalised there runs its statement close on a
    connection another thread has taken from the pool since, and corrupts it.
    """
    try:
        if error is None:
            raise exc
        raise error from exc
    finally:
        del error, exc
