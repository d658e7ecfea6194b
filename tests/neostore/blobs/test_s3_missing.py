"""A missing object on the real S3 server: HEAD says absent, GET raises BlobNotFoundError (not 'unavailable')."""

from __future__ import annotations

import pytest

from windvane import neostore
from windvane.neostore.blobs import parse_location
from windvane.neostore.blobs.s3 import S3BlobStore


def test_a_missing_object_is_absent_not_an_outage(s3_env):
    blobs = S3BlobStore(parse_location(f"s3://{s3_env.new_bucket()}/p"), s3_env.endpoint)
    assert blobs.exists("aa/missing") is False
    with pytest.raises(neostore.BlobNotFoundError, match="no such object"):
        blobs.get("aa/missing")
    with pytest.raises(neostore.BlobNotFoundError):
        blobs.get_range("aa/missing", 0, 10)
    assert blobs.put_new("aa/there", b"x") and blobs.exists("aa/there")
    blobs.close()
