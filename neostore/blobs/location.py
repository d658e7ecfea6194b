"""Where a store's blobs live, and the key that names each value there.

A location is written ``s3://bucket/prefix`` (the prefix may be empty). A
value's key is derived from its blake3 hash and the compression flag of the
bytes stored: ``<prefix>/<first two hex digits>/<hash hex>`` for a raw value,
the same with ``.zst`` for a zstd frame. The flag is part of the key because
two writers with different compression settings store different bytes for
one hash; the two-digit level keeps a file-system backed server's
directories small.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import InvalidURLError
from ..values import RAW, ZSTD

#: What an error about credentials written into a store URL or a blob location advises.
CREDENTIALS_HINT = (
    "credentials never go in the URL: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
    "or use ~/.aws/credentials (AWS_PROFILE picks a profile)"
)

_SUFFIX = {RAW: "", ZSTD: ".zst"}
_FLAG = {suffix: flag for flag, suffix in _SUFFIX.items()}


@dataclass(frozen=True)
class BlobLocation:
    """A parsed ``s3://bucket/prefix``: the bucket and the key prefix, without slashes at its ends."""

    bucket: str
    prefix: str

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def parse_location(text: str) -> BlobLocation:
    """Parse ``s3://bucket/prefix``; InvalidURLError saying what is wrong."""
    parts = urlsplit(text)
    if "@" in parts.netloc:
        raise InvalidURLError(f"blobs=s3://***@{parts.netloc.rpartition('@')[2]}...: {CREDENTIALS_HINT}")
    if parts.scheme != "s3" or not parts.netloc:
        raise InvalidURLError(f"blobs={text!r}: write the object store location as s3://bucket/prefix")
    if parts.query or parts.fragment:
        raise InvalidURLError(f"blobs={text!r}: an s3:// location takes no ?options or #fragment")
    return BlobLocation(parts.netloc, parts.path.strip("/"))


def blob_key(digest: bytes, compression: int) -> str:
    """The key (below the location's prefix) of the value named ``digest`` stored with ``compression``."""
    text = digest.hex()
    return f"{text[:2]}/{text}{_SUFFIX[compression]}"


def parse_key(key: str) -> tuple[bytes, int] | None:
    """``(digest, compression)`` of a key :func:`blob_key` made, None for any other key."""
    head, _, name = key.rpartition("/")
    stem, dot, suffix = name.partition(".")
    flag = _FLAG.get(dot + suffix)
    if flag is None or len(stem) != 64 or head != stem[:2]:
        return None
    try:
        return bytes.fromhex(stem), flag
    except ValueError:
        return None
