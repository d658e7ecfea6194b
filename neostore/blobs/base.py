"""The contract of a blob store: immutable values under keys, as neostore's blob tier uses them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class ListedBlob:
    """A key a listing found, with its size and when the server last wrote it (seconds since the epoch)."""

    key: str
    size: int
    modified: float


class BlobStore(ABC):
    """Bytes under string keys in an object store. Thread-safe; every method may be called from many threads.

    neostore writes each key once and never overwrites it (the key names the
    content), so the contract is narrow: create if absent, read whole or a
    range, ask, list, delete. Every method raises
    :class:`~neostore.errors.BlobStoreUnavailableError` when the service
    cannot be reached or keeps failing after its retries, and
    :class:`~neostore.errors.BlobStoreError` for any other refusal.
    """

    #: Where the blobs are, for messages: ``s3://bucket/prefix``.
    location: str

    @abstractmethod
    def put_new(self, key: str, data: bytes | memoryview) -> bool:
        """Store ``data`` under ``key`` unless the key exists: True if written, False if it was there already."""

    @abstractmethod
    def get(self, key: str) -> bytes | memoryview:
        """The whole value under ``key`` (bytes, or a read-only view of the buffer it arrived in);
        :class:`~neostore.errors.BlobNotFoundError` if there is none."""

    @abstractmethod
    def get_range(self, key: str, start: int, stop: int) -> bytes:
        """``value[start:stop]`` for ``0 <= start < stop``, transferring only that range; BlobNotFoundError if none."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether ``key`` holds a value (one HEAD request)."""

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[ListedBlob]:
        """Every key under ``prefix`` (relative to the store's own prefix), page by page, in no promised order."""

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> int:
        """Delete ``keys`` (missing ones are not an error); how many were asked for."""

    def close(self) -> None:  # noqa: B027 - an optional hook: most clients hold nothing to release
        """Release connections; the store is not used after."""
