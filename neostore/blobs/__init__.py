"""The blob tier: a store's big values in an S3-compatible object store, their rows in the database.

:class:`~neostore.blobs.base.BlobStore` is the contract an object store
client meets (:class:`~neostore.blobs.s3.S3BlobStore` is the one shipped),
:mod:`~neostore.blobs.location` names the objects, :mod:`~neostore.blobs.tier`
decides what goes there and moves it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import BlobStoreError
from .base import BlobStore, ListedBlob
from .location import BlobLocation, blob_key, parse_key, parse_location
from .tier import GRACE_SECONDS, TIERED, BlobTier

if TYPE_CHECKING:
    from ..url import StoreURL

__all__ = [
    "GRACE_SECONDS",
    "TIERED",
    "BlobLocation",
    "BlobStore",
    "BlobTier",
    "ListedBlob",
    "blob_key",
    "open_tier",
    "parse_key",
    "parse_location",
]


def open_tier(url: StoreURL, *, grace: float, retry: float | None = None) -> BlobTier | None:
    """The tier of a store URL's ``blobs``, ``endpoint`` and ``blob_threshold`` options; None without ``blobs``.

    ``grace``: the sweep's grace period (seconds); ``retry``: seconds a failing
    request is retried (None: the two minutes of ``s3.RETRIES``).
    """
    blobs = url.blobs
    if blobs is None:
        return None
    try:
        from .s3 import S3BlobStore, retries_within  # the client loads only for stores that have a tier
    except ImportError as exc:
        if exc.name != "obstore":
            raise
        raise BlobStoreError(f"blobs={blobs} needs the S3 client: pip install 'windvane[s3]'") from None
    retries = None if retry is None else retries_within(retry)
    return BlobTier(S3BlobStore(parse_location(blobs), url.endpoint, retries=retries), url.blob_threshold, grace=grace)
