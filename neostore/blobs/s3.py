"""A :class:`~neostore.blobs.base.BlobStore` on any S3-compatible service, through obstore.

obstore (Rust's ``object_store``) was chosen by measurement against boto3 on
the same server and concurrency: ranged and whole GETs of 2 MiB objects ran
2.7 times as fast, PUTs a little faster (see ``benchmarks/README.md``). Its
calls release the GIL, so a thread pool drives many requests at once. It
retries timeouts, dropped connections and 5xx answers (``503 SlowDown``
included) with exponential backoff and jitter, as configured here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

import obstore
from obstore import exceptions as obstore_errors
from obstore.store import S3Store

from ..errors import BlobNotFoundError, BlobStoreError, BlobStoreUnavailableError, InvalidOptionError
from .base import BlobStore, ListedBlob
from .credentials import shared_file_settings
from .location import BlobLocation

#: Retries of a failing request: 10 tries over up to two minutes, backing off from 100 ms to 15 s.
RETRIES: dict[str, Any] = {
    "max_retries": 10,
    "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=15), "base": 2.0},
    "retry_timeout": timedelta(minutes=2),
}


def retries_within(seconds: float) -> dict[str, Any]:
    """:data:`RETRIES` giving up after ``seconds`` (a test's or an impatient caller's shorter window)."""
    if not seconds > 0:
        raise InvalidOptionError(f"blob_retry_timeout must be a positive number of seconds, got {seconds!r}")
    window = timedelta(seconds=seconds)
    backoff = {**RETRIES["backoff"], "max_backoff": min(RETRIES["backoff"]["max_backoff"], window)}
    return {**RETRIES, "backoff": backoff, "retry_timeout": window}


#: What obstore raises for a missing key: its own NotFoundError, or (from get, get_range and head) the
#: builtin FileNotFoundError.
_NOT_FOUND = (obstore_errors.NotFoundError, FileNotFoundError)

#: Where the client asks for credentials the environment does not give (EC2 and ECS metadata services).
_CREDENTIAL_SERVICES = ("169.254.169.254", "169.254.170.2")

#: Values at least this large are asked for (HEAD) before they are sent. A server may answer a
#: conditional PUT of a key that exists before reading the body and close the connection (versitygw
#: does, from a few MiB): the client then sees a failed request, not "already exists".
HEAD_FIRST_BYTES = 1 << 20

#: Keys per DeleteObjects request (the S3 limit is 1,000).
DELETE_BATCH = 1000


class S3BlobStore(BlobStore):
    """Blobs in ``location`` (``s3://bucket/prefix``) at ``endpoint`` (None: AWS, or ``AWS_ENDPOINT_URL``)."""

    def __init__(self, location: BlobLocation, endpoint: str | None = None, *, retries: dict[str, Any] | None = None):
        self.location = str(location)
        settings: dict[str, Any] = shared_file_settings()
        endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        client: dict[str, Any] = {"timeout": "60s", "connect_timeout": "5s"}
        if endpoint:
            settings["endpoint"] = endpoint
            # Servers of one's own (MinIO, Ceph, versitygw) are addressed by path, often over plain HTTP.
            settings["virtual_hosted_style_request"] = False
            client["allow_http"] = endpoint.startswith("http://")
        self._store = S3Store(
            location.bucket,
            prefix=location.prefix or None,
            client_options=client,  # type: ignore[arg-type]  # a plain dict of the keys obstore's TypedDict names
            retry_config=RETRIES if retries is None else retries,  # type: ignore[arg-type]  # as client_options
            **settings,
        )

    def put_new(self, key: str, data: bytes | memoryview) -> bool:
        if len(data) >= HEAD_FIRST_BYTES and self.exists(key):
            return False
        try:
            obstore.put(self._store, key, data, mode="create")
        except (obstore_errors.AlreadyExistsError, obstore_errors.PreconditionError):
            return False
        except Exception as exc:
            if self._written_meanwhile(key):  # by another writer since the HEAD (see HEAD_FIRST_BYTES)
                return False
            raise self._error("PUT", key, exc) from exc
        return True

    def _written_meanwhile(self, key: str) -> bool:
        try:
            return self.exists(key)
        except BlobStoreError:
            return False  # the PUT's own error says more

    def get(self, key: str) -> memoryview:
        try:
            # A view of the buffer the body arrived in: copying every value into bytes would slow each read.
            return memoryview(obstore.get(self._store, key).bytes())
        except Exception as exc:
            raise self._error("GET", key, exc) from exc

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        try:
            return obstore.get_range(self._store, key, start=start, end=stop).to_bytes()
        except Exception as exc:
            raise self._error("GET", key, exc) from exc

    def exists(self, key: str) -> bool:
        try:
            obstore.head(self._store, key)
        except _NOT_FOUND:
            return False
        except Exception as exc:
            raise self._error("HEAD", key, exc) from exc
        return True

    def list(self, prefix: str = "") -> Iterator[ListedBlob]:
        try:
            for page in obstore.list(self._store, prefix or None, chunk_size=1000):
                for meta in page:
                    yield ListedBlob(meta["path"], meta["size"], meta["last_modified"].timestamp())
        except Exception as exc:
            raise self._error("LIST", prefix, exc) from exc

    def delete(self, keys: Iterable[str]) -> int:
        todo = list(keys)
        for start in range(0, len(todo), DELETE_BATCH):
            batch = todo[start : start + DELETE_BATCH]
            try:
                obstore.delete(self._store, batch)
            except _NOT_FOUND:
                pass
            except Exception as exc:
                raise self._error("DELETE", batch[0], exc) from exc
        return len(todo)

    def _error(self, method: str, key: str, exc: BaseException) -> BlobStoreError:
        where = f"{self.location}/{key}"
        if isinstance(exc, _NOT_FOUND):
            return BlobNotFoundError(f"{method} {where}: no such object")
        if isinstance(exc, (obstore_errors.PermissionDeniedError, obstore_errors.UnauthenticatedError)):
            return BlobStoreError(
                f"{method} {where} was refused ({_first_line(exc)}): check the AWS credentials "
                "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or ~/.aws/credentials) and the bucket's policy"
            )
        if any(address in str(exc) for address in _CREDENTIAL_SERVICES):
            # No key in the environment or the shared files, so the client asked the instance metadata
            # service, and nothing answered with credentials: a setup to fix, not a service to wait for.
            return BlobStoreError(
                f"{method} {where}: no AWS credentials found (none in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
                f"or ~/.aws/credentials, and no instance role answered: {_first_line(exc)}); check the AWS credentials"
            )
        return BlobStoreUnavailableError(f"{method} {where} failed after its retries: {_first_line(exc)}")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
